"""The library face of robustctl: one ``run_<command>(request) -> result`` per command.

Requests are frozen and hold every option after layering (inventory < environment < flags);
results are frozen, carry ``kind`` and ``schema_version``, hold everything the CLI prints, and
give their exit code through :func:`robustctl.commands.base.exit_code_of`. The CLI (``robustctl.cli``)
and the playbook engine call these functions and nothing below them.

Modules: :mod:`~robustctl.commands.diagnose` (``run_diagnose``, ``plan_diagnose``),
:mod:`~robustctl.commands.stacks` (``run_stacks``), :mod:`~robustctl.commands.analyze`
(``run_analyze``), :mod:`~robustctl.commands.inventory` (``run_inventory_validate``,
``run_inventory_show``), :mod:`~robustctl.commands.audit` (``run_audit``),
:mod:`~robustctl.commands.hosts` (``run_hosts``). Option layering lives in
:mod:`~robustctl.commands.options` only; each ``<command>_request(...)`` builds its request from
command-line values through it.
"""
