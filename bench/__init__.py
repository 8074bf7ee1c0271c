"""robustctl benchmarks (``make bench`` → ``python -m bench``).

``bench.fanout``: fan-out of the L0 host probe to many loopback sshd hosts, robustctl against
``pdsh -R ssh``, wall-time ratio and client CPU per host from one run.
"""
