"""One ``replay-sdc`` run's orchestration: its layout and command from the flags, its plan, both
rounds, and the suspects its verdict names.

Dual-phase replay (ByteRobust, arXiv 2509.16293, §4.2). The command
(:mod:`robustctl.commands.replay_sdc`) builds the request and calls these:

* :func:`layout_for_hosts`: the layout of machines given by ``--hosts`` with ``--tp/--pp/--dp``;
* :func:`parse_command`: ``--command`` split into argv (bounded by :data:`MAX_COMMAND_CHARS`);
* :func:`plan_document`: what a run would do and cost, connecting to nothing (``--plan``);
* :func:`replay_rounds`: both rounds over the transports;
* :func:`suspect_reasons`: the line recorded for each machine the verdict names.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from robustctl.errors import UsageError

if TYPE_CHECKING:
    from robustctl.config import ParallelLayout
    from robustctl.inventory import Host
    from robustctl.sdc.grouping import SdcGrouping
    from robustctl.sdc.replay import ReplaySpec, RoundResult
    from robustctl.sdc.verdict import GroupRun, SdcVerdict
    from robustctl.transport.pool import TransportPool

__all__ = [
    "MAX_COMMAND_CHARS",
    "layout_for_hosts",
    "parse_command",
    "plan_document",
    "replay_rounds",
    "suspect_reasons",
]

MAX_COMMAND_CHARS = 8192
"""Longest ``--command``."""

MASTER_SHOWN = "<address of the group's first machine>"
"""What the plan's sample command shows in place of the rendezvous address (known only at run time)."""


def layout_for_hosts(
    machines: Sequence[Host], tp: int | None, pp: int | None, dp: int | None
) -> tuple[ParallelLayout, int]:
    """The layout and ranks per machine of ``machines`` given by ``--hosts``.

    Ranks per machine: the hosts' ``gpus_per_host`` (1 on CPU-only hosts; ByteRobust's TP = GPUs per
    machine); ``tp`` defaults to the ranks left after ``pp × dp``.

    Args:
        machines: the selected hosts (at least one).
        tp: the ``--tp`` flag (None: the ranks left after ``pp × dp``).
        pp: the ``--pp`` flag (None: not given).
        dp: the ``--dp`` flag (None: not given).

    Returns:
        ``(layout, ranks per machine)``.

    Raises:
        UsageError: no ``pp`` or ``dp``; hosts with different GPU counts; ranks not divisible by
            ``pp × dp``; a layout out of range or whose world size is past the largest.
    """
    from pydantic import ValidationError

    from robustctl.config import ParallelLayout

    if pp is None or dp is None:
        raise UsageError("--hosts needs --pp and --dp (the job's pipeline and data-parallel sizes)")
    per = {h.gpus or 1 for h in machines}
    if len(per) > 1:
        raise UsageError(f"the selected hosts have different GPU counts ({sorted(per)}): give --job instead")
    g = per.pop()
    ranks = len(machines) * g
    if tp is None:
        if ranks % (pp * dp):
            raise UsageError(
                f"{len(machines)} machines x {g} ranks = {ranks} ranks are not divisible by pp*dp = {pp * dp}"
            )
        tp = ranks // (pp * dp)
    try:
        return ParallelLayout(tp=tp, pp=pp, dp=dp), g
    except ValidationError as exc:  # each size in range, their product past the largest world
        why = str(exc.errors()[0].get("msg", "invalid layout")).removeprefix("Value error, ")
        raise UsageError(f"--tp {tp} --pp {pp} --dp {dp}: {why}") from None


def parse_command(command: str | None) -> tuple[str, ...] | None:
    """``--command`` as argv (shell-style words), or None when not given.

    Args:
        command: the ``--command`` text (None: not given; the built-in workload).

    Returns:
        The argv, or None.

    Raises:
        UsageError: longer than :data:`MAX_COMMAND_CHARS`, unbalanced quotes, or empty.
    """
    if command is None:
        return None
    if len(command) > MAX_COMMAND_CHARS:
        raise UsageError(f"--command is longer than {MAX_COMMAND_CHARS} characters")
    try:
        argv = tuple(shlex.split(command))
    except ValueError as exc:
        raise UsageError(f"--command: {exc}") from None
    if not argv:
        raise UsageError("--command is empty")
    return argv


def plan_document(spec: ReplaySpec, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (the grouping document, :func:`robustctl.sdc.result.grouping_doc`) with the run's cost
    (rounds, groups per round and at once, waves, machine runs, budgets) and the first machine's
    command added; connects to nothing.

    Args:
        spec: the replay.
        doc: its grouping document (changed in place and returned).

    Returns:
        ``doc``, with ``cost`` and ``first_machine_command``.
    """
    from robustctl.sdc.replay import command_argv, groups_at_once, probe_args, rounds_needed

    g, settings = spec.grouping, spec.settings
    at_once = groups_at_once(spec)
    first = spec.hosts[g.phases[0].groups[0].machines[0]]
    port = settings.allreduce.master_port + 1
    if spec.workload.command:
        sample = command_argv(spec, first, node_rank=0, master=MASTER_SHOWN, port=port)
    else:
        sample = [
            "replay",
            *probe_args(spec, node_rank=0, master=MASTER_SHOWN, port=port, bind="<its own address>",
                        timeout=f"{settings.host_timeout_s:g}"),
        ]  # fmt: skip
    doc["cost"] = {
        "rounds": rounds_needed(g.machines),
        "groups_per_round": g.n,
        "groups_at_once": at_once,
        "waves_per_round": -(-g.n // at_once),
        "machine_runs": 2 * g.machines,
        "group_timeout_s": settings.host_timeout_s,
        "round_deadline_s": spec.round_deadline_s,
    }
    doc["first_machine_command"] = sample
    return doc


def replay_rounds(
    spec: ReplaySpec,
    pool: TransportPool | None,
    *,
    accept_new_host_keys: bool = False,
    on_group: Callable[[GroupRun], None] | None = None,
) -> tuple[RoundResult, RoundResult]:
    """Both rounds of ``spec``: the hosts preflighted and their addresses resolved once, then phase 1
    (horizontal groups), then phase 2 (vertical).

    Args:
        spec: the replay.
        pool: the transports (closed by the caller); None: a pool opened and closed here.
        accept_new_host_keys: a pool opened here adds unknown SSH host keys instead of refusing the host.
        on_group: called as each group finishes (None: nobody).

    Returns:
        The two :class:`~robustctl.sdc.replay.RoundResult` s.

    Raises:
        ConfigError / UsageError: from the preflight (a host the transports cannot be set up for).
    """
    from robustctl.sdc.replay import resolve, run_round

    own = pool is None
    if pool is None:
        from robustctl.transport.pool import TransportPool

        pool = TransportPool(accept_new_host_keys=accept_new_host_keys)
    try:
        pool.preflight(spec.hosts)
        addresses, missing = resolve(spec, pool)
        r1 = run_round(spec, pool, 1, addresses=addresses, missing=missing, on_group=on_group)
        r2 = run_round(spec, pool, 2, addresses=addresses, missing=missing, on_group=on_group)
    finally:
        if own:
            pool.close()
    return r1, r2


def suspect_reasons(verdict: SdcVerdict, grouping: SdcGrouping, names: Sequence[str]) -> dict[str, str]:
    """The line recorded for each machine the verdict names (the isolated one, or the candidates):
    ``replay-sdc: isolated by dual-phase replay (h3 x v1)``, naming its two groups.

    Args:
        verdict: the judged rounds.
        grouping: both phases' groups.
        names: machine ``x`` is ``names[x]``.

    Returns:
        ``{host name: line}``, in the verdict's order.
    """
    from robustctl.sdc.verdict import Verdict

    what = "isolated" if verdict.verdict is Verdict.ISOLATED else "candidate"
    named: dict[str, str] = {}
    for x in verdict.over_evict:
        h, v = grouping.group_of(1, x).name, grouping.group_of(2, x).name
        named[names[x]] = f"replay-sdc: {what} by dual-phase replay ({h} x {v})"
    return named
