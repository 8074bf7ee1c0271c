"""Playbooks: YAML recovery ladders run step by step through robustctl's library calls.

* :mod:`~robustctl.playbooks.schema`: the file format and its checks (``FILE:LINE`` errors);
* :mod:`~robustctl.playbooks.expr`: the safe expressions of ``when:`` and ``*_from`` arguments;
* :mod:`~robustctl.playbooks.kinds`: the step kinds (registry: :func:`~robustctl.playbooks.kinds.register_kind`);
* :mod:`~robustctl.playbooks.engine`: run, resume, dry run;
* :mod:`~robustctl.playbooks.journal`: the run journal in the state store;
* :mod:`~robustctl.playbooks.catalog`: shipped playbooks (``playbooks/*.yaml``) and the inventory's own.
"""

MAX_RUN_ID = 2**63 - 1
"""Largest playbook run id (SQLite's INTEGER); ``resume`` refuses a larger one as a usage error."""
