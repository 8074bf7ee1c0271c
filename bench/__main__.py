"""``python -m bench`` (``make bench``): every benchmark, each printing ratios against a baseline run
in the same process.

- :mod:`bench.agent`: the in-job agent's overhead per step (10 ms and 1 s steps), with vs without it.
- :mod:`bench.fanout`: the L0 probe fanned out to loopback sshd hosts, robustctl vs ``pdsh -R ssh``.
- :mod:`bench.stacks`: stack clustering + blame on synthetic dumps of 1K-100K ranks (linearity, 100K target).
- :mod:`bench.saved_dumps`: ``robustctl analyze`` of 10K and 100K saved dumps (files, a directory, a
  tar.gz), end to end, against clustering the same ranks (100K target).
- :mod:`bench.stacks_e2e`: live ``stacks`` on the 16-rank test-bed job, start to named suspects.
- :mod:`bench.evidence`: each injected hang of the test-bed job named from the debug server, from Flight
  Recorder alone and from py-spy alone (and by ``torchfrtrace``), against the truth, in one table.
- :mod:`bench.ssh_connect`: client CPU per SSH connection, known_hosts parsed once vs per connection.
- :mod:`bench.replay_sdc`: replay-sdc rounds vs bisection (M = 24…4,096), one round vs one group.
- :mod:`bench.sweep_history`: a simulated year (``--days``) of 5-minute sweeps of 2,000 hosts through the
  history code: store size, ``history --since 7d`` and ``lemons --since 30d`` vs the SELECT of their rows.
- :mod:`bench.sweep_fanout`: ``robustctl sweep`` of loopback sshd hosts vs ``pdsh -R ssh`` (same probes).
- :mod:`bench.recovery`: ``playbook run hang`` on the test bed, hung rank to the job's first new step,
  broken down, against the job's own cold start; then ``playbook run gpu-lost`` through slurmctld on
  the Slurm test bed against a plain requeue of the whole job.
- :mod:`bench.soak`: first the watch's fail-slow rule (:mod:`bench.failslow`: BOCPD + medians on
  step-time traces of the test-bed job, healthy and with a slow rank: detection delay and false alarms
  vs the rolling-median rule alone); then one fault of each class (crash, hang, fail-slow, NaN loss,
  host loss) on an 8-host test-bed job with warm standbys under ``robustctl watch``, and the same
  schedule under today's practice (the job's collective timeout, a whole-job restart in place): detect,
  localize, MTTR, machines evicted, lost time per class and the job's ETTR, MTTR baseline / watch.
- :mod:`bench.sweep_srun`: ``robustctl sweep --transport srun`` over the Slurm test bed's nodes vs the
  same sweep over SSH (sshd test-bed hosts of the same count): wall time and client CPU.

``python -m bench fanout [args]``, ``python -m bench saved-dumps [args]``, ... runs one of them.
"""

import sys

from bench import (
    agent,
    evidence,
    failslow,
    fanout,
    recovery,
    replay_sdc,
    saved_dumps,
    soak,
    ssh_connect,
    stacks,
    stacks_e2e,
    sweep_fanout,
    sweep_history,
    sweep_srun,
)

BENCHES = {
    "fanout": fanout.main,
    "stacks": stacks.main,
    "saved-dumps": saved_dumps.main,
    "stacks-e2e": stacks_e2e.main,
    "replay-sdc": replay_sdc.main,
    "sweep-history": sweep_history.main,
    "sweep-fanout": sweep_fanout.main,
    "sweep-srun": sweep_srun.main,
    "ssh-connect": ssh_connect.main,
    "recovery": recovery.main,
    "failslow": failslow.main,
    "soak": soak.main,
    "agent": agent.main,
    "evidence": evidence.main,
}

args = sys.argv[1:]
if args and args[0] in BENCHES:
    raise SystemExit(BENCHES[args[0]](args[1:]))
if args:
    raise SystemExit(f"python -m bench: no benchmark {args[0]!r} (known: {', '.join(BENCHES)})")
rc = 0
for name, fn in BENCHES.items():
    if name == "failslow":
        continue  # the soak runs it first
    print(f"== bench {name}", flush=True)
    rc = max(rc, int(fn([]) or 0))
raise SystemExit(rc)
