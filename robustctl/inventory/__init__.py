"""The inventory: which hosts exist, how to reach them, and what state they are in.

:func:`load_inventory` reads a YAML file strictly (unknown keys and bad ranges are
:class:`~robustctl.errors.InventoryError`/:class:`~robustctl.errors.ConfigError` with ``FILE:LINE``);
:func:`default_inventory` is the embedded default: this machine, ``localhost``, through the local
transport, with the Python that runs robustctl.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from robustctl.config import (
    CheckpointSpec,
    CodeSpec,
    DiagnoseSettings,
    HostEntry,
    HostState,
    InventoryFile,
    JobSpec,
    LaunchSpec,
    ParallelLayout,
    PolicySettings,
    ProgressSpec,
    PythonSettings,
    RankProcessSpec,
    SchedulerSettings,
    SshSettings,
    SweepSettings,
    WatchSettings,
    apply_env,
    env_override_of,
)
from robustctl.errors import ConfigError, InventoryError
from robustctl.inventory.hostrange import MAX_EXPANSION, count, expand, validate_address, validate_name
from robustctl.thresholds import Thresholds
from robustctl.yamlsrc import SourceMap, dotted_path, format_validation_errors, load_yaml


@dataclass(frozen=True)
class Host:
    """One resolved host: an inventory entry expanded and merged with the defaults.

    Attributes:
        name: inventory name (unique). address: where to connect (name when not given).
        transport: ``"ssh"``, ``"local"`` or ``"srun"`` (the Slurm node of that name). ssh: effective SSH settings. python: how to run probes.
        gpus: expected GPU count (0: CPU-only). labels: free-form labels. state: service state.
        probe_root: root prefix passed to probes as ``--root`` (None: ``/`` or the host's env).
    """

    name: str
    address: str
    transport: Literal["ssh", "local", "srun"]
    ssh: SshSettings
    python: PythonSettings
    gpus: int = 0
    labels: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    state: HostState = HostState.ACTIVE
    probe_root: str | None = None


@dataclass(frozen=True)
class Job:
    """A resolved training job.

    Attributes:
        name: job name. hosts: machines in rank order (machine k holds ranks k·G … k·G+G-1).
        layout: the parallel layout; ``layout.world_size == len(hosts) * ranks_per_host``.
        ranks_per_host: G. process: how to find rank processes (None: not configured).
        ckpt: where its checkpoints are (None: not configured).
        launch: how the inventory back end starts it (None: not configured).
        code: its git work tree (update, rollback). progress: its progress signal (None: not configured).
    """

    name: str
    hosts: tuple[Host, ...]
    layout: ParallelLayout
    ranks_per_host: int
    process: RankProcessSpec | None = None
    ckpt: CheckpointSpec | None = None
    launch: LaunchSpec | None = None
    code: CodeSpec | None = None
    progress: ProgressSpec | None = None

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return self.layout.world_size


@dataclass(frozen=True)
class Inventory:
    """All hosts (in file order) plus the settings that apply to a run.

    Attributes:
        hosts: every host, unique names, file order. source: file path or ``"<embedded default>"``.
        playbooks: the inventory's own playbook files (``playbooks:``, relative to the inventory file).
    """

    hosts: tuple[Host, ...]
    thresholds: Thresholds
    diagnose: DiagnoseSettings
    source: str
    jobs: Mapping[str, Job] = field(default_factory=dict)
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    policy: PolicySettings = field(default_factory=PolicySettings)
    playbooks: tuple[Path, ...] = ()
    sweep: SweepSettings = field(default_factory=SweepSettings)
    watch: WatchSettings = field(default_factory=WatchSettings)

    def job(self, name: str) -> Job:
        """The job called ``name``. Raises InventoryError (listing the known jobs) if there is none."""
        try:
            return self.jobs[name]
        except KeyError:
            known = ", ".join(sorted(self.jobs)) or "none defined"
            raise InventoryError(f"unknown job {name!r} (jobs in {self.source}: {known})") from None

    def by_name(self, name: str) -> Host:
        """The host called ``name``. Raises InventoryError if there is none."""
        for h in self.hosts:
            if h.name == name:
                return h
        raise InventoryError(f"unknown host {name!r} (not in {self.source})")

    def select(self, pattern: str | None = None, *, states: Iterable[HostState] | None = None) -> list[Host]:
        """Hosts matching a host range, in inventory order.

        Args:
            pattern: a host range such as ``"node[001-008],node017"``; None selects every host.
            states: keep only hosts in these states; default: active hosts only when ``pattern`` is
                None, any state when hosts are named explicitly.

        Returns:
            The selected hosts, in inventory order.

        Raises:
            InventoryError: the pattern is malformed or names a host not in the inventory.
        """
        if pattern is None:
            wanted_states = set(states) if states is not None else {HostState.ACTIVE}
            return [h for h in self.hosts if h.state in wanted_states]
        names = expand(pattern)
        known = {h.name for h in self.hosts}
        missing = [n for n in names if n not in known]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise InventoryError(f"unknown host {missing[0]!r}{more}: not in {self.source}")
        wanted = set(names)
        out = [h for h in self.hosts if h.name in wanted]
        if states is not None:
            allowed = set(states)
            out = [h for h in out if h.state in allowed]
        return out


def default_inventory() -> Inventory:
    """The embedded default: ``localhost`` through the local transport, with this interpreter."""
    host = Host(
        name="localhost",
        address="local",
        transport="local",
        ssh=SshSettings(),
        python=PythonSettings(path=sys.executable),
        gpus=0,
    )
    return Inventory(
        hosts=(host,),
        thresholds=Thresholds(),
        diagnose=DiagnoseSettings(),
        source="<embedded default>",
    )


def resolve_inventory(path: Path | None, environ: Mapping[str, str] | None = None) -> Inventory:
    """Load ``path``, else ``$ROBUSTCTL_INVENTORY``, else the embedded default.

    Args:
        path: the ``--inventory`` value (None: not given).
        environ: the environment to read (None: ``os.environ``); also what ``${VAR}`` in the file reads.

    Returns:
        The validated inventory.

    Raises:
        ConfigError / InventoryError: the file is invalid (``FILE:LINE``).
    """
    env = os.environ if environ is None else environ
    if path is None and env.get("ROBUSTCTL_INVENTORY"):
        path = Path(env["ROBUSTCTL_INVENTORY"])
    if path is None:
        return default_inventory()
    return load_inventory(path, environ=None if environ is None else dict(environ))


def resolve_inventory_if_given(
    path: Path | None, environ: Mapping[str, str] | None = None
) -> Inventory | None:
    """:func:`resolve_inventory` when one is named (``path`` or ``$ROBUSTCTL_INVENTORY``), else None.

    A command that can do without an inventory (``hosts``, the playbook catalog) then uses none rather
    than the embedded default.

    Args:
        path: the ``--inventory`` value (None: not given).
        environ: the environment to read (None: ``os.environ``).

    Returns:
        The inventory, or None when none is named.

    Raises:
        ConfigError / InventoryError: the file is invalid.
    """
    env = os.environ if environ is None else environ
    return resolve_inventory(path, environ) if path is not None or env.get("ROBUSTCTL_INVENTORY") else None


def load_inventory(path: Path, *, environ: dict[str, str] | None = None) -> Inventory:
    """Load and validate an inventory file.

    Args:
        path: the inventory file (YAML).
        environ: the environment whose ``ROBUSTCTL_*`` variables override the file's settings
            (None: ``os.environ``).

    Returns:
        The validated inventory: hosts in file order, jobs, settings, and ``source`` the path.

    Raises:
        ConfigError: YAML syntax, unknown key, wrong type (message ``FILE:LINE: key.path: why``).
        InventoryError: bad host range, hostile name, duplicate host, address count mismatch.
    """
    data, smap = load_yaml(path)
    if data is None:
        raise ConfigError(f"{path}: empty inventory, expected a mapping with 'hosts:'")
    if not isinstance(data, dict):
        raise ConfigError(f"{smap.where(())}: expected a mapping at the top level, got {type(data).__name__}")
    env = os.environ if environ is None else environ
    merged = apply_env(data, env)
    try:
        model = InventoryFile.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_validation_error(exc, smap, merged, env)) from None
    hosts = tuple(_resolve_hosts(model, smap))
    _refuse_unusable(model, hosts, smap)
    by_name = {h.name: h for h in hosts}
    jobs = {
        name: _resolve_job(name, spec, by_name, model.gpus_per_host, smap.where(("jobs", name)))
        for name, spec in model.jobs.items()
    }
    return Inventory(
        hosts=hosts,
        thresholds=model.thresholds,
        diagnose=model.diagnose,
        source=str(path),
        jobs=jobs,
        scheduler=model.scheduler,
        policy=model.policy,
        playbooks=_playbook_paths(model, path, smap),
        sweep=model.sweep,
        watch=model.watch,
    )


def _playbook_paths(model: InventoryFile, path: Path, smap: SourceMap) -> tuple[Path, ...]:
    """``playbooks:`` entries as paths, relative to the inventory's directory. Raises ConfigError (``~nouser``)."""
    out: list[Path] = []
    for i, p in enumerate(model.playbooks):
        try:
            out.append(path.parent / Path(p).expanduser())
        except RuntimeError as exc:
            raise ConfigError(f"{smap.where(('playbooks', i))}: playbooks[{i}]: {exc}") from None
    return tuple(out)


def _refuse_unusable(model: InventoryFile, hosts: Sequence[Host], smap: SourceMap) -> None:
    """Refuse a setting no host of the inventory can act on (it would be silently ignored).

    Args:
        model: the validated inventory file.
        hosts: every host of the inventory, expanded.
        smap: the file's line numbers, for the message.

    Raises:
        ConfigError: ``FILE:LINE: key.path: why``.
    """
    if model.diagnose.allreduce.use_nccl_tests and not any(h.gpus > 0 for h in hosts):
        loc = ("diagnose", "allreduce", "use_nccl_tests")
        raise ConfigError(
            f"{smap.where(loc)}: {dotted_path(loc)}: nccl-tests need GPUs, but no host has gpus_per_host > 0 "
            "(set gpus_per_host, or remove use_nccl_tests)"
        )


def _resolve_job(name: str, spec: JobSpec, hosts: Mapping[str, Host], gpus_per_host: int, where: str) -> Job:
    try:
        names = expand(spec.hosts)
    except InventoryError as exc:
        raise InventoryError(f"{where}: job {name}: {exc}") from None
    missing = [n for n in names if n not in hosts]
    if missing:
        raise InventoryError(f"{where}: job {name}: host {missing[0]!r} is not in the inventory")
    if len(set(names)) != len(names):
        raise InventoryError(f"{where}: job {name}: a host is listed twice in {spec.hosts!r}")
    g = spec.ranks_per_host or gpus_per_host or 1
    ws = spec.layout.world_size
    if ws != len(names) * g:
        lay = spec.layout
        raise InventoryError(
            f"{where}: job {name}: layout tp={lay.tp} cp={lay.cp} ep={lay.ep} dp={lay.dp} pp={lay.pp} "
            f"is {ws} ranks, but {len(names)} hosts x {g} ranks per host = {len(names) * g}"
        )
    dims = spec.layout.order.split("-")
    if len(set(dims)) != 5:
        raise InventoryError(f"{where}: job {name}: layout order {spec.layout.order!r} repeats a dimension")
    return Job(
        name,
        tuple(hosts[n] for n in names),
        spec.layout,
        g,
        spec.process,
        ckpt=spec.ckpt,
        launch=spec.launch,
        code=spec.code,
        progress=spec.progress,
    )


INVENTORY_ERRORS_SHOWN = 1
"""Validation errors of an inventory shown, the first by line (a value from the environment first);
the rest are counted (``(+N more errors)``). Every command that loads an inventory refuses it with one
``robustctl: error:`` line; ``playbook validate`` is the place that lists every problem of a file."""


def _validation_error(exc: ValidationError, smap: SourceMap, data: Any, environ: Mapping[str, str]) -> str:
    """One line for an inventory's validation error; a value an environment variable set names the variable."""

    def from_env(path: tuple[str | int, ...]) -> str | None:
        var = env_override_of(path, environ)
        return None if var is None else f"${var}={_short(repr(environ[var]))}"

    lines = format_validation_errors(exc, smap, data, value_source=from_env, limit=INVENTORY_ERRORS_SHOWN)
    return lines[0] if lines else f"{smap.where(())}: invalid inventory"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _merge_ssh(base: SshSettings, over: Any) -> SshSettings:
    if over is None:
        return base
    changes = {k: v for k, v in over.model_dump(exclude_unset=True).items() if v is not None}
    return base.model_copy(update=changes)


def _resolve_hosts(model: InventoryFile, smap: SourceMap) -> list[Host]:
    """Every entry's hosts, in file order; at most :data:`MAX_EXPANSION` in all, counted before expanding.

    Args:
        model: the validated inventory file.
        smap: the file's line numbers, for the messages.

    Returns:
        The hosts of every ``hosts:`` entry, ranges expanded, in file order.

    Raises:
        InventoryError: a bad range or name, a duplicate host, or more than MAX_EXPANSION hosts.
    """
    total = 0
    for i, entry in enumerate(model.hosts):
        total += count(entry.name.strip()) or 0
        if total > MAX_EXPANSION:
            where = smap.where(("hosts", i, "name"))
            raise InventoryError(f"{where}: the inventory names more than {MAX_EXPANSION} hosts")
    hosts: list[Host] = []
    seen: dict[str, str] = {}
    for i, entry in enumerate(model.hosts):
        where = smap.where(("hosts", i, "name"))
        try:
            hosts.extend(_expand_entry(entry, model))
        except InventoryError as exc:
            raise InventoryError(f"{where}: {exc}") from None
        for h in hosts[len(seen) :]:
            if h.name in seen:
                raise InventoryError(f"{where}: duplicate host {h.name!r} (also at {seen[h.name]})")
            seen[h.name] = where
    return hosts


def _expand_entry(entry: HostEntry, model: InventoryFile) -> list[Host]:
    names = [validate_name(n) for n in expand(entry.name)]
    if entry.address is None:
        addresses = list(names)
    else:
        addresses = [validate_address(a) for a in expand(entry.address)]
        if len(addresses) != len(names):
            raise InventoryError(
                f"{entry.name!r} expands to {len(names)} hosts but address {entry.address!r} "
                f"to {len(addresses)} addresses"
            )
    ssh = _merge_ssh(model.ssh, entry.ssh)
    python = entry.python or model.python
    gpus = entry.gpus_per_host if entry.gpus_per_host is not None else model.gpus_per_host
    return [
        Host(
            name=n,
            address=a if entry.transport == "ssh" else ("local" if entry.transport == "local" else n),
            transport=entry.transport,
            ssh=ssh,
            python=python,
            gpus=gpus,
            labels=dict(entry.labels),
            state=entry.state,
            probe_root=entry.probe_root,
        )
        for n, a in zip(names, addresses, strict=True)
    ]
