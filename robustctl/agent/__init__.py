"""The in-job agent: what a training script runs inside each rank so that robustctl can read the job.

Two calls::

    agent = robustctl.agent.start(run_dir="/shared/run42")   # before init_process_group
    for step in ...:
        ...
        agent.step(step, loss=loss.item(), tokens=n)          # each step
    agent.close()                                             # or: with robustctl.agent.start(...) as agent

Rank, local rank and world size come from torchrun's ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` unless
given. What it writes under ``run_dir``:

* ``rankRRRRR.json``, the heartbeat ``jobs.J.progress`` reads (``files: RUN_DIR/rank*.json``): the
  keys of the test-bed job's (``tests/jobs/minimegatron.py``): ``rank``, ``pid``, ``step``,
  ``phase``, ``time`` (UNIX seconds of the step), ``step_s``, ``loss`` (a number, or ``"NaN"``,
  ``"Infinity"``, ``"-Infinity"``: strict JSON), plus ``local_rank``, ``world_size``, ``tokens``,
  ``debug_socket`` and the step's ``extra`` fields; written atomically (a temporary file and
  ``os.replace``), at most once per :data:`HEARTBEAT_INTERVAL_S`, and at once on the first step, a
  phase change, a NaN/Inf loss and close.
* ``events/rankRRRRR-STEP-nan.json`` at once for a loss that is not finite (at most
  :data:`MAX_NAN_EVENTS`). The watch reads a NaN from the heartbeat's ``loss`` (and the training
  log's ``lm loss: nan``); the event file keeps the first step it happened at.
* ``stacks/rankRRRRR.txt``: every thread's stack on each SIGUSR1 (:mod:`faulthandler`, which needs no
  GIL: a rank stuck in C code answers too). A SIGUSR1 handler installed before is chained, not replaced.
* ``debug/rankRRRRR.sock``: PyTorch's per-rank debug server (``c10d._WorkerServer``; see
  :mod:`robustctl.agent.torchside`), when torch is in use and the build has it; ask it with
  :func:`robustctl.agent.client.fetch`. Its path is in the heartbeat's ``debug_socket``.
* ``fr/rankRRRRR.json``: this rank's Flight Recorder ring, on :meth:`Agent.dump_flight_recorder`,
  when ``start(flight_recorder=N)`` turned it on (before the process group was created).

The agent never raises into the training loop for I/O trouble: errors are counted
(:attr:`Agent.errors`) and the first is printed on stderr. Importing it imports only the standard
library; torch is used only when the script imported it already (or ``start(torch=True)``). It
imports nothing else of robustctl: the control side reads its files, never the other way round.
"""

from __future__ import annotations

from robustctl.agent.core import HEARTBEAT_INTERVAL_S, HEARTBEAT_MAX_BYTES, MAX_NAN_EVENTS, Agent, start

__all__ = ["HEARTBEAT_INTERVAL_S", "HEARTBEAT_MAX_BYTES", "MAX_NAN_EVENTS", "Agent", "start"]
