"""Scheduled health sweeps: the quick diagnose level over the fleet, with history, debounce and lemons.

* :mod:`robustctl.sweep.history`: check states, state changes and per-host counters in the store;
* :mod:`robustctl.sweep.policy`: debounce and escalation per check class;
* :mod:`robustctl.sweep.lemons`: hosts that keep failing or keep coming back;
* :mod:`robustctl.sweep.lock`: one sweep at a time;
* :mod:`robustctl.sweep.run`: one fleet sweep, from the hosts it picks to what it records;
* :mod:`robustctl.sweep.healthcheck`: ``sweep --local``, this node as Slurm's health check.

The command itself is :func:`robustctl.commands.sweep.run_sweep`.
"""
