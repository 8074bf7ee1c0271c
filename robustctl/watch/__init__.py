"""The controller behind ``robustctl watch``: read a job's signals (progress, step times, logs, exits,
host findings: :mod:`robustctl.watch.signals`, the one part that touches the world), classify them
(:mod:`robustctl.watch.rules`: hang, fail-slow, nan-loss;
:mod:`robustctl.watch.logscan`: explicit errors in a rank's log), decide (:mod:`robustctl.watch.decide`:
signal class → playbook, with rails) and record every decision; and the job's ETTR ledger (:mod:`robustctl.watch.ledger`:
productive and unproductive time by cause, cumulative and sliding-window ETTR, MTTR per incident). Its
cores are pure functions over frozen dataclasses, given their inputs (times are passed in, never read
from the clock). Importing this package imports none of its submodules.
"""
