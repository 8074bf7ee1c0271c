"""The controller behind ``robustctl watch``: read a job's signals (progress, step times, logs, exits,
host findings: :mod:`robustctl.watch.signals`, the one part that touches the world), classify them
(:mod:`robustctl.watch.rules`: hang, fail-slow, nan-loss;
:mod:`robustctl.watch.logscan`: explicit errors in a rank's log), decide (:mod:`robustctl.watch.decide`:
signal class → playbook, with rails) and record every decision; and the job's ETTR ledger (:mod:`robustctl.watch.ledger`:
productive and unproductive time by cause, cumulative and sliding-window ETTR, MTTR per incident). Its
cores are pure functions over frozen dataclasses, given their inputs (times are passed in, never read
from the clock). Importing this package imports none of its submodules.

One evaluation of ``robustctl watch`` is :func:`robustctl.watch.loop.evaluate_job`: the reading's
verdicts (:mod:`robustctl.watch.verdicts`), the decision, the store's incidents
(:mod:`robustctl.watch.incidents`) and state (:mod:`robustctl.watch.state`), and the recovery through
the :class:`~robustctl.watch.recovery.PlaybookEngine` the command layer passes down (this package
imports neither the commands nor the playbooks). ``robustctl ettr`` reads the store's records as a
timeline (:mod:`robustctl.watch.records`); a sweep carries its summary (:mod:`robustctl.watch.timeline`).
"""
