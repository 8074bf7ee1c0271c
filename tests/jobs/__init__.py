"""Real training jobs for the testbed (run on simulated hosts, never imported by robustctl).

:mod:`tests.jobs.minimegatron`: a tiny Megatron-style model trained with gloo across TP, PP and DP
process groups, with data-loader workers, periodic checkpoints and faults injected from outside.
"""
