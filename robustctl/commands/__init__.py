"""The library face of robustctl: one ``run_<command>(request) -> result`` per command.

Requests are frozen and hold every option after layering (inventory < environment < flags);
results are frozen, carry ``kind`` and ``schema_version``, hold everything the CLI prints, and
give their exit code through :func:`robustctl.commands.base.exit_code_of`. The CLI (``robustctl.cli``)
and the playbook engine call these functions and nothing below them.
"""
