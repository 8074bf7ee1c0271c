"""Helpers shared by the unit and integration tests (no fixtures, nothing that starts a process).

``needs``: what a test needs from this machine, skipped where it is missing and failed in CI, and the
skips CI accepts. ``hostroot``: a healthy simulated host's ``/proc``, ``/sys`` and kernel log.
"""
