"""Configuration and inventory models (pydantic, strict).

Precedence, lowest first: built-in defaults < the inventory file < environment variables
(``ROBUSTCTL_*``, see :data:`ENV_VARS`) < command-line flags. Every model forbids unknown keys, and
validation errors are reported as ``FILE:LINE: key.path: message`` through
:func:`robustctl.inventory.load_inventory`.

A setting that could not take effect is refused, not ignored: ``address`` or ``ssh`` on a
``transport: local`` host, a ``scheduler.slurm``/``scheduler.kubernetes`` section under another
``kind``, ``diagnose.allreduce.use_nccl_tests`` when no host has GPUs, ``.nan``/``.inf``. Every
number has an upper bound (its description or the ``MAX_*`` constant below says why).
tests/unit/test_config_effect.py holds one case per option and mode that shows it changes what runs.

Inventory YAML (every key optional except ``hosts``)::

    ssh:                       # defaults for every host, overridable per host entry
      user: robust
      port: 22
      identity_file: ~/.ssh/id_ed25519
      known_hosts: ~/.ssh/known_hosts
      proxy_jump: bastion      # one hop, "user@host:port" or a name from ~/.ssh/config
      connect_timeout_s: 10
      command_timeout_s: 300
      use_ssh_config: true
    python: {path: python3, wrapper: [docker, exec, -i, trainer]}
    gpus_per_host: 8
    hosts:
      - name: node[001-064]
        address: 10.0.0.[1-64]   # optional; a range of the same length, or one per single host
        labels: {rack: r1}
        state: active          # active | standby | evicted
    thresholds: {...}          # robustctl.thresholds.Thresholds
    diagnose: {concurrency: 64, host_timeout_s: 120, deadline_s: 900, retries: 2}
    scheduler: {kind: inventory, timeout_s: 30}   # inventory | slurm | kubernetes (+ slurm:/kubernetes:)
    policy: {max_job_fraction: 0.5, max_cluster_fraction: 0.1, max_evictions_per_hour: 32,
             circuit_breaker_fraction: 0.3, window_s: 3600, lock_timeout_s: 30}
    playbooks: [playbooks/site-hang.yaml]   # the site's own playbooks (paths relative to this file)
"""

from __future__ import annotations

import enum
import os
import re
import string
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from robustctl.thresholds import Thresholds


class StrictModel(BaseModel):
    """Base of every config model: unknown keys are errors, instances are immutable.

    ``.nan`` and ``.inf`` (YAML floats) are refused everywhere: a NaN compares false with everything,
    so a NaN limit would silently switch its rule off.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


MAX_WORLD_SIZE = 1_000_000
"""Largest world size (tp·cp·ep·dp·pp) of a job's layout, in the inventory or a ``--layout``. The
largest training jobs run on the order of 10^5 GPUs; a bound one order above keeps every per-rank
table (groups, machines) within a few hundred MB, where an unbounded value
(``tp=99999999999999999999``) would exhaust memory."""
MAX_HOST_RANKS = 64
"""Most ranks (processes) on one machine: the bound of ``gpus_per_host`` (the largest GPU servers
hold 8-16 GPUs; a CPU-only host runs a few gloo ranks)."""
MAX_CONCURRENCY = 4096
"""Most hosts or pairs worked on at once: one thread and one connection each on the control side."""
MAX_MESSAGE_BYTES = 8 << 30
"""Largest all-reduce message (8 GiB, nccl-tests' usual ``-e 8G``): each rank holds it twice."""
MAX_MESSAGE_SIZES = 64
"""Most all-reduce message sizes per run (powers of two from 4 B to 8 GiB are 32)."""


MAX_PLAYBOOK_FILES = 256
"""Most playbook files an inventory names (``playbooks:``); a site keeps a handful."""

Seconds = Annotated[float, Field(gt=0, le=86_400)]


class SshSettings(StrictModel):
    """SSH connection settings. ``None`` means "use ~/.ssh/config, then OpenSSH's default"."""

    user: str | None = Field(None, description="Login user; default: ~/.ssh/config, else the local user.")
    port: int | None = Field(None, ge=1, le=65535, description="TCP port; default: ~/.ssh/config, else 22.")
    identity_file: str | None = Field(None, description="Private key file; agent and default keys are tried.")
    known_hosts: str | None = Field(None, description="known_hosts file; default ~/.ssh/known_hosts.")
    proxy_jump: str | None = Field(None, description="One jump host, [user@]host[:port], like ssh -J.")
    connect_timeout_s: Seconds = Field(10.0, description="TCP connect, banner and auth timeout.")
    command_timeout_s: Seconds = Field(300.0, description="Upper bound for any one remote command.")
    use_ssh_config: bool = Field(True, description="Honour ~/.ssh/config (HostName, User, Port, ...).")
    accept_new_host_keys: bool = Field(
        False, description="Trust and record unknown host keys (OpenSSH StrictHostKeyChecking=accept-new)."
    )


class SshOverrides(StrictModel):
    """Per-host-entry SSH overrides: any key of :class:`SshSettings`; unset keys inherit."""

    user: str | None = None
    port: int | None = Field(None, ge=1, le=65535)
    identity_file: str | None = None
    known_hosts: str | None = None
    proxy_jump: str | None = None
    connect_timeout_s: Seconds | None = None
    command_timeout_s: Seconds | None = None
    use_ssh_config: bool | None = None
    accept_new_host_keys: bool | None = None


class PythonSettings(StrictModel):
    """How to run Python on a host: ``wrapper + [path, "-", ...]``.

    Example wrappers: ``[docker, exec, -i, trainer]`` (``-i`` is needed: the probe is streamed on
    stdin), ``[conda, run, --no-capture-output, -n, train]``.
    """

    path: str = Field("python3", min_length=1)
    wrapper: list[str] = Field(default_factory=list)


class HostState(str, enum.Enum):
    """Service state of a host as the inventory records it."""

    ACTIVE = "active"
    STANDBY = "standby"
    EVICTED = "evicted"


class HostEntry(StrictModel):
    """One ``hosts:`` entry; ``name`` may be a range that expands to many hosts."""

    name: str = Field(min_length=1, description="Host name or range, e.g. node[001-064].")
    address: str | None = Field(None, description="Address or range of the same length; default: the name.")
    transport: Literal["ssh", "local", "srun"] = Field(
        "ssh", description="ssh, local (this machine) or srun (a Slurm node, reached through srun steps)."
    )
    labels: dict[str, str] = Field(default_factory=dict)
    state: HostState = HostState.ACTIVE
    ssh: SshOverrides | None = None
    python: PythonSettings | None = None
    gpus_per_host: int | None = Field(None, ge=0, le=MAX_HOST_RANKS)
    probe_root: str | None = Field(
        None, description="Root prefix for probes' system-file reads (e.g. /host)."
    )

    @model_validator(mode="after")
    def _local_has_no_connection(self) -> HostEntry:
        """Refuse connection settings a ``transport: local`` host would ignore (it is this machine)."""
        if self.transport == "local":
            if self.address not in (None, "local"):
                raise ValueError(
                    f"address {self.address!r} would be ignored: a transport: local host is this "
                    "machine (leave address out, or use transport: ssh)"
                )
            if self.ssh is not None:
                raise ValueError(
                    "ssh settings would be ignored: a transport: local host is reached without SSH "
                    "(remove ssh:, or use transport: ssh)"
                )
        if self.transport == "srun" and (self.address is not None or self.ssh is not None):
            raise ValueError(
                "address and ssh settings would be ignored: a transport: srun host is the Slurm node of "
                "its name, reached through srun (remove them, or use transport: ssh)"
            )
        return self


class BurnSettings(StrictModel):
    """Level 1 (GPU/CPU burn) settings."""

    seconds: Seconds = Field(10.0, description="Load duration per device.")
    size: int | None = Field(None, ge=16, le=65536, description="Matrix size N; default 4096 GPU, 1024 CPU.")
    threads: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="CPU threads for a CPU burn (torch.set_num_threads); at most 1024, more than "
        "any current server's hardware threads. A GPU burn ignores it.",
    )
    concurrency: int | None = Field(
        None,
        ge=1,
        le=MAX_CONCURRENCY,
        description="Hosts burning at once; default: diagnose.concurrency (same bound, 4096).",
    )


class AllreduceSettings(StrictModel):
    """Level 2/3 (all-reduce bandwidth) settings."""

    sizes: list[Annotated[int, Field(ge=4, le=MAX_MESSAGE_BYTES)]] | None = Field(
        None,
        min_length=1,
        max_length=MAX_MESSAGE_SIZES,
        description="Message sizes in bytes: at most 64 sizes, each 4 B to 8 GiB (a rank holds a "
        "message twice, in GPU or host memory); default: the probe's sweep.",
    )
    iters: int = Field(5, ge=1, le=10_000)
    warmup: int = Field(1, ge=0, le=1_000)
    nproc: int | None = Field(
        None,
        ge=2,
        le=MAX_HOST_RANKS,
        description="Ranks per host for L2; default: GPUs, or 2 on CPU. At most 64 (one process each).",
    )
    master_port: int = Field(
        29500,
        ge=1024,
        le=65000,
        description="L3: pair i rendezvous on port master_port + 1 + i (wrapping below 65536). L2's "
        "ranks rendezvous on a free loopback port the probe picks, so L2 does not use it.",
    )
    interface: str | None = Field(
        None,
        min_length=1,
        max_length=15,
        pattern=r"^[A-Za-z0-9_.:-]+$",
        description="L3: rendezvous on the IPv4 address each host reports for this interface (e.g. ib0); "
        "default: the inventory address (or name) as is.",
    )
    use_nccl_tests: bool = Field(False, description="Run nccl-tests' all_reduce_perf for L2 where installed.")
    concurrency: int | None = Field(
        None,
        ge=1,
        le=MAX_CONCURRENCY,
        description="L2 hosts / L3 pairs at once; default: diagnose.concurrency (same bound, 4096).",
    )


class DiagnoseSettings(StrictModel):
    """Fan-out and level settings of ``robustctl diagnose``."""

    concurrency: int = Field(
        64, ge=1, le=MAX_CONCURRENCY, description="Hosts contacted at once (diagnose and stacks)."
    )
    host_timeout_s: Seconds = Field(
        120.0,
        description="Per host, per level deadline of diagnose (stacks: its --timeout plus 30 s). "
        "An SSH host's probes also stop within its ssh.command_timeout_s.",
    )
    deadline_s: Seconds = Field(
        900.0, description="Global deadline of the whole diagnose run, and of each stacks collection."
    )
    retries: int = Field(
        2, ge=0, le=10, description="Extra connection attempts on connection errors (diagnose and stacks)."
    )
    retry_backoff_s: float = Field(
        0.5, ge=0, le=60, description="Base of the jittered exponential backoff (diagnose and stacks)."
    )
    peer_confirm: bool = Field(
        True,
        description="Re-measure peer-relative outliers once, one host at a time, before naming them.",
    )
    burn: BurnSettings = Field(default_factory=BurnSettings)
    allreduce: AllreduceSettings = Field(default_factory=AllreduceSettings)


class ParallelLayout(StrictModel):
    """A job's parallel layout: W = tp × cp × ep × dp × pp ranks.

    ``order`` lists the dimensions fastest-varying first; Megatron-LM's default rank order is
    ``tp-cp-ep-dp-pp`` (``megatron/core/parallel_state.py``, ``RankGenerator``): consecutive ranks
    share a TP group, and a machine of G GPUs holds G consecutive ranks.
    """

    tp: int = Field(1, ge=1, le=MAX_WORLD_SIZE, description="Tensor-parallel size.")
    pp: int = Field(1, ge=1, le=MAX_WORLD_SIZE, description="Pipeline-parallel size.")
    dp: int = Field(1, ge=1, le=MAX_WORLD_SIZE, description="Data-parallel size.")
    cp: int = Field(1, ge=1, le=MAX_WORLD_SIZE, description="Context-parallel size.")
    ep: int = Field(1, ge=1, le=MAX_WORLD_SIZE, description="Expert-parallel size.")
    order: str = Field(
        "tp-cp-ep-dp-pp",
        pattern=r"^(tp|cp|ep|dp|pp)(-(tp|cp|ep|dp|pp)){4}$",
        description="Rank order, fastest-varying dimension first (each of tp, cp, ep, dp, pp once).",
    )

    @model_validator(mode="after")
    def _bounded_world(self) -> ParallelLayout:
        """Refuse a layout of more than :data:`MAX_WORLD_SIZE` ranks (the same cap as ``--layout``)."""
        if self.world_size > MAX_WORLD_SIZE:
            raise ValueError(
                f"tp x cp x ep x dp x pp is {self.world_size} ranks, more than the largest world size "
                f"{MAX_WORLD_SIZE}"
            )
        return self

    @property
    def world_size(self) -> int:
        """tp × cp × ep × dp × pp."""
        return self.tp * self.cp * self.ep * self.dp * self.pp


MAX_PATTERN_CHARS = 1024
"""Longest regular expression accepted in the inventory (``process.match``, ``process.rank_cmdline``,
``progress.pattern``): a process or log-line pattern is a few dozen characters; the bound keeps a pasted
file out of the compiled-pattern cache and bounds the walk of :func:`check_regex`."""
MAX_NESTABLE_REPEAT = 16
r"""A counted repeat ``{m,n}`` of more than this many times is treated like ``+`` by :func:`check_regex`:
a group holding a repeat may repeat a few times (an IPv4 address ``(\d+\.){3}``, a MAC address 5, an
IPv6 address 7), but ``(\w+,){1,1000}`` backtracks like ``(\w+,)+``."""


def _regex_parser() -> Any:
    """The standard library's regex parser: ``re._parser`` (Python 3.11+), ``sre_parse`` before."""
    import importlib

    try:
        return importlib.import_module("re._parser")
    except ImportError:  # Python 3.10: the module of that name is deprecated from 3.11 on
        return importlib.import_module("sre_parse")


def check_regex(value: str) -> re.Pattern[str]:
    r"""Compile a regular expression from the inventory, refusing one that can backtrack for ever.

    Refused: a pattern Python cannot compile, and one with nested repetition: a repeat (``*``,
    ``+``, ``{m,}``, or ``{m,n}`` with n over :data:`MAX_NESTABLE_REPEAT`; greedy, lazy or possessive)
    somewhere inside another such repeat, e.g. ``(a+)+``, ``(a*)*``, ``(?:x\s*)+``. On a subject that
    almost matches, such a pattern tries exponentially many ways to split it (the classic ReDoS), and a
    probe searching every command line of a host would spin until its command timeout. The check walks
    the parsed pattern (``re._parser`` / ``sre_parse``), so it sees through groups, alternations and
    lookarounds. Ambiguous alternation under one repeat (``(a|aa)+``) is not detected here: the probes
    bound the time a search may take (``diagnostics/stacks.py``, ``MATCH_BUDGET_S``).

    Args:
        value: the pattern (its length is bounded by the field, :data:`MAX_PATTERN_CHARS`).

    Returns:
        The compiled pattern.

    Raises:
        ValueError: one line: the pattern does not compile, or has nested repetition.
    """
    try:
        pattern = re.compile(value)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None
    parser = _regex_parser()
    repeats = {parser.MAX_REPEAT, parser.MIN_REPEAT}
    if hasattr(parser, "POSSESSIVE_REPEAT"):  # Python 3.11+
        repeats.add(parser.POSSESSIVE_REPEAT)
    unbounded = parser.MAXREPEAT

    def many(hi: int) -> bool:
        return bool(hi == unbounded or hi > MAX_NESTABLE_REPEAT)

    def nested(items: Any, inside: bool) -> bool:
        """Whether ``items`` (a parsed sub-pattern) holds a repeat of many inside a repeat of many."""
        for op, av in items:
            if op in repeats:
                _, hi, body = av
                if many(hi) and inside:
                    return True
                if nested(body, inside or many(hi)):
                    return True
            elif op == parser.SUBPATTERN:
                if nested(av[-1], inside):
                    return True
            elif op == parser.BRANCH:
                if any(nested(b, inside) for b in av[1]):
                    return True
            elif op in (parser.ASSERT, parser.ASSERT_NOT):
                if nested(av[1], inside):
                    return True
            elif op == getattr(parser, "ATOMIC_GROUP", None):
                if nested(av, inside):
                    return True
            elif op == parser.GROUPREF_EXISTS:
                if nested(av[1], inside) or (av[2] is not None and nested(av[2], inside)):
                    return True
        return False

    try:
        bad = nested(parser.parse(value), False)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None
    if bad:
        raise ValueError(
            "nested repetition (a repeat inside a repeated group, like (a+)+ or (a*)*): it can take "
            "exponential time on a line that almost matches; repeat the inner part only (a+)"
        )
    return pattern


class RankProcessSpec(StrictModel):
    """How to find a job's rank processes on a host and read each one's rank."""

    match: str = Field(
        min_length=1,
        max_length=MAX_PATTERN_CHARS,
        description="Regular expression searched in the process command line (no nested repeats).",
    )
    rank_env: str = Field("RANK", description="Environment variable holding the global rank.")
    local_rank_env: str = Field("LOCAL_RANK", description="Environment variable holding the local rank.")
    rank_cmdline: str | None = Field(
        None,
        max_length=MAX_PATTERN_CHARS,
        description=r"Regex with one group reading the rank from the command line, e.g. '--rank[= ](\d+)'.",
    )

    @field_validator("match", "rank_cmdline")
    @classmethod
    def _compiles(cls, value: str | None, info: Any) -> str | None:
        """Refuse, at load, a regular expression Python cannot compile (it would find no ranks later) or
        one with nested repetition (:func:`check_regex`: it could hold a host's probe at full CPU)."""
        if value is None:
            return None
        pattern = check_regex(value)
        if info.field_name == "rank_cmdline" and pattern.groups < 1:
            raise ValueError("the regular expression needs a group, (...), that captures the rank")
        return value


MAX_CKPT_ITERATIONS = 10_000
"""Most iteration directories a checkpoint probe lists per host (newest first): a job saving every
30 minutes for a year keeps about 17,500, and a retention policy keeps far fewer."""
MAX_CKPT_ENTRIES = 140_000
"""Most directory entries a checkpoint probe reads per host (iterations × shards). The probe reports
each shard in about 110 bytes of JSON, and a transport takes at most 16 MiB of output per command
(``robustctl.process.MAX_STDOUT_BYTES``): 140,000 entries stay under it. A shared directory
of a job of 100,000 ranks holds that many shards per iteration: list one or two (``max_iterations``)."""


class CheckpointSpec(StrictModel):
    """``jobs.NAME.ckpt``: where a job's checkpoints are and how its shards are named.

    The layout is Megatron-LM's (``megatron/training/checkpointing.py``): one directory per saved
    iteration, ``iter_NNNNNNN/`` (``iter_{:07d}``), and a tracker file,
    ``latest_checkpointed_iteration.txt``, naming the last iteration saved. Shards are
    ``iter_NNNNNNN/rank_RRRRR.pt`` (one per global rank, ``shards: rank``) or Megatron's
    ``iter_NNNNNNN/mp_rank_TT[_PPP]/model_optim_rng.pt`` (one per tensor- and pipeline-parallel rank,
    written by data-parallel rank 0, ``shards: mp_rank``). ``{host}`` in ``dir`` stands for the
    inventory name of the host read (a per-host subdirectory of one file system).
    """

    dir: str = Field(
        min_length=1,
        max_length=4096,
        pattern=r"^/",
        description="Absolute checkpoint directory as the hosts' Python sees it; {host}: the host's name.",
    )
    shared: bool = Field(
        False,
        description="One file system every host sees (read once); false: a directory local to each host.",
    )
    shards: Literal["rank", "mp_rank"] = Field(
        "rank",
        description="Shard naming: rank (iter_N/rank_RRRRR.pt) or mp_rank (iter_N/mp_rank_TT[_PPP]/model_optim_rng.pt).",
    )
    tracker: str = Field(
        "latest_checkpointed_iteration.txt",
        min_length=1,
        max_length=255,
        pattern=r"^[^/\x00]+$",
        description="Tracker file name in dir (Megatron's latest_checkpointed_iteration.txt).",
    )
    max_iterations: int = Field(
        64, ge=1, le=MAX_CKPT_ITERATIONS, description="Newest iteration directories listed per host."
    )
    max_entries: int = Field(
        100_000, ge=1, le=MAX_CKPT_ENTRIES, description="Most directory entries read per host."
    )
    timeout_s: Seconds = Field(60.0, description="The checkpoint probe's budget on one host, seconds.")

    def dir_on(self, host: str) -> str:
        """``dir`` as host ``host`` (inventory name) sees it: ``{host}`` filled in."""
        return self.dir.replace("{host}", host)

    @field_validator("dir")
    @classmethod
    def _only_host_placeholder(cls, value: str) -> str:
        """Refuse a brace other than ``{host}`` (it would be taken literally, or fail at format)."""
        if "{" in value.replace("{host}", "") or "}" in value.replace("{host}", ""):
            raise ValueError("the only placeholder dir may hold is {host}")
        return value


LAUNCH_PLACEHOLDERS: dict[str, type] = {
    "rank": int,
    "local_rank": int,
    "world_size": int,
    "node_rank": int,
    "nnodes": int,
    "nproc_per_node": int,
    "master_addr": str,
    "master_port": int,
    "job": str,
    "ckpt_iter": str,
}
"""The placeholders of a ``launch:`` template (``{name}``, ``str.format`` syntax) and their types.
``ckpt_iter`` is the checkpoint iteration restart picked, as text, or ``none``."""
PER_RANK_PLACEHOLDERS = frozenset({"rank", "local_rank"})
"""Placeholders only a ``per: rank`` launch can fill (a per-host process holds several ranks)."""
RANK_ENV_NAMES = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "NODE_RANK",
        "NNODES",
        "MASTER_ADDR",
        "MASTER_PORT",
    }
)
"""Variables the launcher sets itself (``launch.env`` may not set them: they would disagree)."""
MAX_LAUNCH_ARGS = 256
"""Most items of ``launch.command`` (a torchrun line with its script flags is a few dozen)."""
MAX_LAUNCH_TEXT = 4096
"""Longest item of ``launch.command``, value of ``launch.env``, ``cwd`` or ``log_dir`` (PATH_MAX)."""
MAX_LAUNCH_ENV = 256
"""Most ``launch.env`` entries."""

LaunchText = Annotated[str, Field(max_length=MAX_LAUNCH_TEXT)]

MAX_TEMPLATE_WIDTH = MAX_LAUNCH_TEXT
"""Largest width or precision of a placeholder's format spec (``{rank:05d}``, ``{job:>20}``,
``{ckpt_iter:.8}``). A template is at most :data:`MAX_LAUNCH_TEXT` characters, and a filled-in template
at least as long as its widths together is refused (:func:`check_template`): a wider field can never be
valid. The bound is checked on the spec's text, before anything is formatted, so a width of 10^9 is
refused without allocating a gigabyte."""

_FORMAT_SPEC = re.compile(
    r"(?:(?P<fill>.)?(?P<align>[<>=^]))?(?P<sign>[-+ ])?z?\#?0?(?P<width>\d+)?[,_]?"
    r"(?:\.(?P<precision>\d*)[,_]?)?(?P<type>[A-Za-z%])?",
    re.DOTALL,
)
r"""Python's format mini-language, ``[[fill]align][sign][z][#][0][width][grouping][.precision[grouping]][type]``
(``string`` module docs, "Format Specification Mini-Language"; ``z`` is 3.11's, the grouping after the
precision 3.14's): a superset of what any supported Python accepts. ``\d`` matches every Unicode
decimal digit, as ``format`` does (``format(7, "\u0665")``, ARABIC-INDIC DIGIT FIVE, pads to 5)."""


def _spec_number(digits: str) -> int:
    """The value of a run of (Unicode) decimal digits, capped at ``MAX_TEMPLATE_WIDTH + 1``.

    Never converts more than a few digits: a run of thousands of digits costs no big integer.
    """
    value = 0
    for ch in digits:
        value = value * 10 + unicodedata.decimal(ch)
        if value > MAX_TEMPLATE_WIDTH:
            return MAX_TEMPLATE_WIDTH + 1
    return value


def check_format_spec(spec: str) -> None:
    """Refuse a format spec whose width or precision is over :data:`MAX_TEMPLATE_WIDTH`, without formatting.

    The spec is parsed (:data:`_FORMAT_SPEC`), never applied: ``format(7, ">1000000000")`` would
    allocate a gigabyte before anything could look at its result. What the grammar accepts may still
    not suit the value's type (``{job:d}``); :func:`check_template` formats a sample once the numbers
    are known to be small.

    Args:
        spec: the text after the ``:`` of a placeholder (``"05d"``; ``""`` for none).

    Raises:
        ValueError: one line: the spec is not a format spec, or names a width or precision over the
            bound.
    """
    m = _FORMAT_SPEC.fullmatch(spec)
    if m is None:
        raise ValueError(
            f"{spec[:40]!r} is not a format spec ([[fill]align][sign][#][0][width][,][.precision][type])"
        )
    for what in ("width", "precision"):
        digits = m.group(what)
        if digits and _spec_number(digits) > MAX_TEMPLATE_WIDTH:
            shown = digits if len(digits) <= 12 else f"of {len(digits)} digits"
            raise ValueError(
                f"{what} {shown} is more than {MAX_TEMPLATE_WIDTH} (a launch text is at most "
                f"{MAX_LAUNCH_TEXT} characters)"
            )


def check_template(text: str, *, per: str) -> None:
    """Refuse a ``launch:`` template that cannot be filled at launch.

    Accepted: ``{name}`` and ``{name:spec}`` with ``name`` in :data:`LAUNCH_PLACEHOLDERS` (``{{``/``}}``
    for a literal brace); refused: an unknown name, a positional ``{}``, attribute or index access
    (``{rank.real}``, ``{job[0]}``), a conversion (``{job!r}``), a format spec the value's type does not
    take or whose width or precision is over :data:`MAX_TEMPLATE_WIDTH` (:func:`check_format_spec`),
    ``{rank}``/``{local_rank}`` in a ``per: host`` launch, and a template whose padded fields and text
    together are longer than :data:`MAX_LAUNCH_TEXT` characters. Nothing larger than that is ever
    allocated: the numbers of a spec are read from its text before a sample value is formatted.

    Args:
        text: the template.
        per: the launch's ``per:``, ``rank`` or ``host``.

    Raises:
        ValueError: one line naming the placeholder and why.
    """
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"bad template {text[:80]!r}: {exc}") from None
    length = 0
    for literal, name, spec, conversion in parsed:
        length += len(literal)
        if name is None:
            continue
        if name not in LAUNCH_PLACEHOLDERS:
            known = ", ".join("{" + k + "}" for k in LAUNCH_PLACEHOLDERS)
            raise ValueError(f"unknown placeholder {{{name[:40]}}} (known: {known}; write {{{{ for a brace)")
        if conversion is not None:
            raise ValueError(f"placeholder {{{name}!{conversion}}}: conversions are not supported")
        if per == "host" and name in PER_RANK_PLACEHOLDERS:
            raise ValueError(
                f"placeholder {{{name}}} needs per: rank (a per: host process holds several ranks)"
            )
        if spec and ("{" in spec or "}" in spec):
            raise ValueError(f"placeholder {{{name}:{spec[:40]}}}: nested placeholders are not supported")
        spec = spec or ""
        try:
            check_format_spec(spec)
        except ValueError as exc:
            raise ValueError(f"placeholder {{{name}:{spec[:40]}}}: {exc}") from None
        sample: object = 7 if LAUNCH_PLACEHOLDERS[name] is int else "none"
        try:
            length += len(format(sample, spec))  # at most MAX_TEMPLATE_WIDTH + a few characters
        except (ValueError, TypeError) as exc:
            raise ValueError(f"placeholder {{{name}:{spec[:40]}}}: {exc}") from None
        if length > MAX_LAUNCH_TEXT:
            raise ValueError(
                f"placeholder {{{name}:{spec[:40]}}}: filled in, the template is longer than "
                f"{MAX_LAUNCH_TEXT} characters (its widths and text together)"
            )


class LaunchSpec(StrictModel):
    """``jobs.NAME.launch``: how the ``inventory`` back end starts the job itself (``robustctl restart``).

    ``per: rank`` starts ``command`` once per rank on its machine, with ``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``NODE_RANK``, ``NNODES``, ``MASTER_ADDR``, ``MASTER_PORT`` in
    its environment (the variables torchrun gives its workers); ``per: host`` starts it once per
    machine (a torchrun-style launcher that starts the machine's ranks), with ``NODE_RANK``, ``NNODES``,
    ``MASTER_ADDR``, ``MASTER_PORT``. ``MASTER_ADDR`` is the address of the job's machine 0.
    A leading ``~`` in ``cwd`` and ``log_dir`` is the home of the user robustctl logs in as.
    ``command`` items, ``env`` values, ``cwd`` and ``log_dir`` may hold the placeholders of
    :data:`LAUNCH_PLACEHOLDERS` (checked at load: :func:`check_template`). Each process is started
    detached (its own session, standard input ``/dev/null``) with its output appended to
    ``log_dir/JOB-rankRRRRR.log`` (per rank) or ``log_dir/JOB-nodeNNNN.log`` (per host).
    """

    command: list[LaunchText] = Field(
        min_length=1, max_length=MAX_LAUNCH_ARGS, description="argv template; at most 256 items."
    )
    per: Literal["host", "rank"] = Field("rank", description="One process per rank, or one per host.")
    env: dict[str, LaunchText] = Field(
        default_factory=dict, max_length=MAX_LAUNCH_ENV, description="Extra environment (templates)."
    )
    cwd: LaunchText | None = Field(None, description="Working directory (template); default the login's.")
    log_dir: LaunchText = Field(
        "~/.robustctl/logs/{job}",
        min_length=1,
        description="Directory of the log files on each host (template; ~ is the host user's home).",
    )
    master_port: int = Field(29500, ge=1024, le=65535, description="MASTER_PORT (rendezvous of rank 0).")
    stop_grace_s: float = Field(
        30.0, gt=0, le=3600, description="Seconds between SIGTERM and SIGKILL when stopping the job."
    )
    start_timeout_s: float = Field(
        300.0, gt=0, le=86_400, description="Seconds to wait until every rank runs after a launch."
    )

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        """Refuse a variable name a shell could not export, or one the launcher sets itself."""
        for key in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", key):
                raise ValueError(f"environment variable name {key[:40]!r} is not a valid name")
            if key in RANK_ENV_NAMES:
                raise ValueError(f"{key} is set by the launcher (per rank/host); remove it from env")
        return value

    @model_validator(mode="after")
    def _templates(self) -> LaunchSpec:
        """Check every template against the placeholder whitelist (see :func:`check_template`)."""
        for i, item in enumerate(self.command):
            try:
                check_template(item, per=self.per)
            except ValueError as exc:
                raise ValueError(f"command[{i}]: {exc}") from None
        for key, item in self.env.items():
            try:
                check_template(item, per=self.per)
            except ValueError as exc:
                raise ValueError(f"env.{key}: {exc}") from None
        for field_name in ("cwd", "log_dir"):
            item = getattr(self, field_name)
            if item is not None:
                try:
                    check_template(item, per=self.per)
                except ValueError as exc:
                    raise ValueError(f"{field_name}: {exc}") from None
        return self


MAX_PROGRESS_FILES = 4096
"""Most heartbeat files read per host in one progress reading (one per rank: a host runs at most
:data:`MAX_HOST_RANKS` ranks, so 4096 leaves room for per-thread or per-worker files)."""
MAX_TAIL_BYTES = 16 << 20
"""Most bytes read from the end of a job's log per host (16 MiB; the default 64 KiB holds the last few
hundred lines of a Megatron log, which prints one line per iteration)."""


class CodeSpec(StrictModel):
    """``jobs.NAME.code``: where the job's code lives, for hot update and rollback (ByteRobust §6.1).

    The code is a git work tree at ``path`` on every host of the job (``{host}`` in the path is
    replaced by the inventory host name, for work trees kept side by side on a shared file system).
    A version becomes *stable* once, after a restart, the job's progress signal shows it ran for
    ``stable_after_s`` seconds or ``stable_after_steps`` steps (whichever comes first; at least one is
    set); ``rollback`` goes back to the last stable version. A change staged without ``--urgent``
    waits for the next restart, and is forced once ``update_window_s`` passed since it was staged.
    """

    path: str = Field(
        min_length=1,
        max_length=4096,
        description="The git work tree of the job's code on every host ({host}: the host's name).",
    )
    stable_after_s: float | None = Field(
        1800.0,
        gt=0,
        le=30 * 86_400,
        description="Seconds of progress after a restart that make a version stable (at most 30 days).",
    )
    stable_after_steps: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Training steps after a restart that make a version stable (at most 10^7).",
    )
    update_window_s: float = Field(
        86_400.0,
        gt=0,
        le=30 * 86_400,
        description="A staged (lazy) update is forced when this long passed since staging (at most 30 days).",
    )

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        """Refuse a relative path or one with a NUL (a remote ``git -C`` would resolve it in the login
        directory, which differs between hosts)."""
        if "\x00" in value or not value.startswith("/"):
            raise ValueError("must be an absolute path (e.g. /srv/train/code)")
        return value

    @model_validator(mode="after")
    def _some_criterion(self) -> CodeSpec:
        """Refuse a spec under which no version could ever become stable."""
        if self.stable_after_s is None and self.stable_after_steps is None:
            raise ValueError("set stable_after_s or stable_after_steps: otherwise no version is ever stable")
        return self


class ProgressSpec(StrictModel):
    r"""``jobs.NAME.progress``: the job's progress signal, read on every host of the job.

    Either ``files``: a glob of heartbeat files per host, each one JSON object with the step under
    ``step_field`` and, optionally, its UNIX time under ``time_field`` (else the file's mtime), e.g.
    ``/run/train/progress/rank*.json``; or ``log`` + ``pattern``: the job's log file per host and a
    regular expression with a named group ``step`` (``iteration\s+(?P<step>\d+)``, Megatron's
    ``iteration N/ M`` line), searched in the last ``tail_bytes`` of the log; the newest match is the
    host's step and the log's mtime its time. ``{host}`` in a path is the inventory host name.
    """

    files: str | None = Field(
        None, min_length=1, max_length=4096, description="Glob of heartbeat JSON files per host."
    )
    step_field: str = Field("step", min_length=1, max_length=128, description="JSON key holding the step.")
    time_field: str | None = Field(
        "time", min_length=1, max_length=128, description="JSON key holding the UNIX time; else the mtime."
    )
    max_files: int = Field(
        64, ge=1, le=MAX_PROGRESS_FILES, description="Most heartbeat files read per host (at most 4096)."
    )
    log: str | None = Field(None, min_length=1, max_length=4096, description="The job's log file per host.")
    pattern: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_PATTERN_CHARS,
        description="Regular expression with a named group step, searched in the log's last lines.",
    )
    tail_bytes: int = Field(
        65_536, ge=1024, le=MAX_TAIL_BYTES, description="Bytes read from the end of the log (at most 16 MiB)."
    )
    timeout_s: Seconds = Field(30.0, description="Deadline of one progress reading on one host.")

    @field_validator("pattern")
    @classmethod
    def _step_group(cls, value: str | None) -> str | None:
        """Compile the pattern at load: it must compile, have no nested repetition
        (:func:`check_regex`: it is searched in every line of the log's tail) and have a named group
        ``step``."""
        if value is None:
            return None
        compiled = check_regex(value)
        if "step" not in compiled.groupindex:
            raise ValueError("the regular expression needs a named group (?P<step>...) capturing the step")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ProgressSpec:
        """Exactly one source: ``files``, or ``log`` with ``pattern``; refuse settings of the other."""
        if (self.files is None) == (self.log is None):
            raise ValueError("set either files (heartbeat files) or log + pattern, not both and not neither")
        if self.log is not None and self.pattern is None:
            raise ValueError("log needs pattern: a regular expression with a named group step")
        if self.files is not None and self.pattern is not None:
            raise ValueError("pattern would be ignored: it applies to log, not to heartbeat files")
        for name in ("files", "log"):
            value = getattr(self, name)
            if value is not None and ("\x00" in value or not value.startswith("/")):
                raise ValueError(f"{name} must be an absolute path")
        return self


class JobSpec(StrictModel):
    """A training job: where its ranks run and how they are laid out."""

    hosts: str = Field(
        min_length=1, description="Host range in rank order: machine k holds ranks k·G … k·G+G-1."
    )
    layout: ParallelLayout = Field(default_factory=ParallelLayout)
    ranks_per_host: int | None = Field(
        None,
        ge=1,
        le=MAX_HOST_RANKS,
        description="Ranks (GPUs) per machine; default gpus_per_host. At most 64, as gpus_per_host.",
    )
    process: RankProcessSpec | None = None
    ckpt: CheckpointSpec | None = Field(None, description="Where the job's checkpoints are (ckpt status).")
    launch: LaunchSpec | None = Field(
        None, description="How the inventory back end starts the job (robustctl restart); needs process:."
    )
    code: CodeSpec | None = Field(None, description="The job's git work tree, for update and rollback.")
    progress: ProgressSpec | None = Field(None, description="The job's progress signal (heartbeats or log).")

    @model_validator(mode="after")
    def _launch_needs_process(self) -> JobSpec:
        """Refuse ``launch:`` without ``process:``: stop and the start check find the ranks by it."""
        if self.launch is not None and self.process is None:
            raise ValueError(
                "launch: needs a process: section (restart stops the job and checks its ranks started "
                "by process.match)"
            )
        return self


class SlurmSettings(StrictModel):
    """``scheduler.slurm``: settings of the Slurm back end (robustctl.schedulers.slurm)."""

    conf: str | None = Field(None, description="slurm.conf path (SLURM_CONF); default: Slurm's own lookup.")
    bin_dir: str | None = Field(None, description="Directory of scontrol/sinfo/squeue; default: PATH.")
    requeue_settle_s: float = Field(
        1.5,
        ge=0,
        le=60,
        description="Pause between a requeue and StartTime=now (sooner, slurmd refuses the revoked credential).",
    )


_K8S_KEY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
"""A Kubernetes label or taint key: an optional DNS-subdomain prefix and ``/``, a name of ≤ 63 characters."""


class KubernetesSettings(StrictModel):
    """``scheduler.kubernetes``: settings of the Kubernetes back end (robustctl.schedulers.kubernetes).

    The evict taint's effect defaults to ``NoSchedule``: robustctl then removes the node's pods itself
    through the Eviction API, which honours PodDisruptionBudgets. ``NoExecute`` makes the kubelet's
    taint manager delete every pod that does not tolerate it at once, PodDisruptionBudgets or not.
    """

    kubeconfig: str | None = Field(
        None, description="kubeconfig path; default $KUBECONFIG, ~/.kube/config, else in-cluster."
    )
    context: str | None = Field(None, description="kubeconfig context; default its current-context.")
    namespace: str = Field(
        "default", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", description="Namespace of the jobs' pods."
    )
    evict_taint_key: str = Field(
        "robustctl.io/evicted", pattern=_K8S_KEY, description="Taint key of evicted nodes."
    )
    evict_taint_effect: Literal["NoSchedule", "NoExecute"] = Field(
        "NoSchedule", description="Effect of the evict taint (NoExecute bypasses PodDisruptionBudgets)."
    )
    standby_taint_key: str = Field(
        "robustctl.io/standby", pattern=_K8S_KEY, description="Taint key (NoSchedule) of standbys."
    )
    state_label: str = Field(
        "robustctl.io/state", pattern=_K8S_KEY, description="Node label robustctl sets: evicted|standby."
    )
    job_label: str = Field(
        "robustctl.io/job",
        pattern=_K8S_KEY,
        description="Label naming the job on its pods (selects them) and on its nodes (pins them).",
    )
    index_label: str = Field(
        "batch.kubernetes.io/job-completion-index",
        pattern=_K8S_KEY,
        description="Pod label (or annotation) holding the pod's index in rank order (Indexed Job).",
    )
    pods_per_host: int = Field(1, ge=1, le=64, description="Pods of one job on each machine.")
    eviction_timeout_s: float = Field(
        120.0, gt=0, le=86_400, description="How long to retry evictions a PodDisruptionBudget refuses (429)."
    )
    eviction_retry_s: float = Field(
        5.0, gt=0, le=600, description="Pause between eviction retries (kubectl: 5 s)."
    )
    grace_period_s: int | None = Field(
        None, ge=0, le=86_400, description="deleteOptions.gracePeriodSeconds of evictions; default the pod's."
    )


class SchedulerSettings(StrictModel):
    """``scheduler:``: which back end takes machines out of service and puts them back.

    ``kind: inventory`` (default) keeps every state in robustctl's own store; ``slurm`` and
    ``kubernetes`` drive the real scheduler with the settings of the sub-section of that name.
    """

    kind: Literal["inventory", "slurm", "kubernetes"] = Field(
        "inventory", description="Back end: inventory (embedded, the store only), slurm or kubernetes."
    )
    timeout_s: Seconds = Field(30.0, description="Deadline of any one scheduler command or API call.")
    slurm: SlurmSettings | None = None
    kubernetes: KubernetesSettings | None = None

    @model_validator(mode="after")
    def _section_of_kind(self) -> SchedulerSettings:
        """Refuse a back end's sub-section when ``kind`` names another back end (it would be ignored)."""
        for name in ("slurm", "kubernetes"):
            if getattr(self, name) is not None and self.kind != name:
                raise ValueError(
                    f"scheduler.{name} would be ignored: scheduler.kind is {self.kind!r} "
                    f"(set kind: {name}, or remove the {name}: section)"
                )
        return self


Fraction = Annotated[float, Field(gt=0, le=1)]


class PolicySettings(StrictModel):
    """``policy:``: the safety rails of destructive actions (:mod:`robustctl.actions.rails`).

    Defaults and where they come from:

    * ``max_job_fraction`` 0.5: at most half of a job's machines evicted per window (an over-evicted PP
      group of a PP=2 job is half the job). Cluster API MachineHealthCheck ``maxUnhealthy`` plays this
      role per machine set.
    * ``max_cluster_fraction`` 0.1: at most 10% of the inventory's hosts evicted per window.
    * ``max_evictions_per_hour`` 32: a rate limit, like kube-controller-manager's
      ``--node-eviction-rate`` (0.1 node/s by default; a training cluster wants far fewer).
    * ``circuit_breaker_fraction`` 0.3: refuse when more than 30% of the hosts look bad at once
      (suspect, evicted, or targeted): more likely an observer fault (Kubernetes stops evicting in a zone
      past ``--unhealthy-zone-threshold`` 0.55; Google's Diskerase post-mortem: an empty target set read
      as "everything" erased a fleet).
    * ``window_s`` 3600: the sliding window of the fraction limits.
    * ``lock_timeout_s`` 30: how long an action waits for another robustctl holding the store's lock.
    * ``standby_repair_window_days`` 1.0 and ``standby_quantile`` 0.99: standby pool sizing
      (ByteRobust, arXiv 2509.16293, Table 5).
    """

    max_job_fraction: Fraction = Field(0.5, description="Max share of a job's machines evicted per window.")
    max_cluster_fraction: Fraction = Field(0.1, description="Max share of all hosts evicted per window.")
    max_evictions_per_hour: int = Field(32, ge=1, le=100_000, description="Max machines evicted per hour.")
    circuit_breaker_fraction: Fraction = Field(
        0.3, description="Refuse when more than this share of hosts look bad at once."
    )
    window_s: Seconds = Field(3600.0, description="Sliding window of the fraction limits, seconds.")
    lock_timeout_s: float = Field(30.0, ge=0, le=3600, description="Wait for another robustctl's lock, s.")
    standby_repair_window_days: float = Field(1.0, gt=0, le=365, description="Days a failed machine is out.")
    standby_quantile: float = Field(0.99, gt=0, lt=1, description="Quantile of failures the pool covers.")


class SweepSettings(StrictModel):
    """``sweep:``: history retention, debounce per check class, what ``--act`` does, lemon thresholds.

    Defaults and where they come from (:mod:`robustctl.sweep.policy` classifies the checks):

    * ``retention_days`` 400: more than a year of state changes, so ``lemons --since 365d`` works.
    * ``flap_count`` 2 within ``flap_window_s`` 300: a network check (NIC, InfiniBand port) names a host
      only when it fails twice within 5 minutes (ByteRobust, arXiv 2509.16293 §4.1: flapping NICs are
      tolerated until they repeat). High-confidence hardware events (a critical XID such as 79 or 48, a
      GPU missing, uncorrectable ECC, remapping failures) name the host at once.
    * ``sustained_s`` 900: a thermal, clock or load finding (temperature, throttling, clock offset,
      memory, load) names a host only when it held for 15 minutes of sweeps (three 5-minute sweeps).
    * ``act`` suspect: ``--act`` records confirmed hosts as suspect; ``drain`` also drains them through the
      scheduler back end (``robustctl evict``, with its rails and audit record).
    * ``lemon_failures`` 3 in ``lemon_days`` 30, or ``lemon_returns`` 2 (evicted and returned twice in
      that window): a lemon (Kokolis et al., "Revisiting Reliability in Large-Scale ML Research
      Clusters", HPCA 2025: nodes that fail repeatedly; taking them out cut the failure rate of
      512+-GPU jobs from 14% to 4%). ``lemon_no_standby``: a lemon is never picked as a standby.
    """

    retention_days: float = Field(
        400.0, gt=0, le=3650, description="Days of sweep history kept (≤ 10 years)."
    )
    flap_count: int = Field(
        2, ge=1, le=16, description="Network failures within flap_window_s that name a host."
    )
    flap_window_s: Seconds = Field(300.0, description="Window of the network flap rule, seconds.")
    sustained_s: float = Field(
        900.0, ge=0, le=86_400, description="How long a thermal/clock/load finding must hold, seconds."
    )
    act: Literal["suspect", "drain"] = Field("suspect", description="What --act does with a confirmed host.")
    lemon_failures: int = Field(
        3, ge=1, le=10_000, description="Failures within lemon_days that make a lemon."
    )
    lemon_returns: int = Field(2, ge=1, le=10_000, description="Evict-and-return cycles within lemon_days.")
    lemon_days: float = Field(30.0, gt=0, le=3650, description="Window of the lemon rules, days.")
    lemon_no_standby: bool = Field(False, description="Never pick a lemon as the standby to activate.")


class SignalClass(str, enum.Enum):
    """What a signal says about a job; each class but ``unknown`` maps to a playbook (issue 22,
    "Decisions"). The one list of classes: the watch's rules and decisions, the store's incidents
    and events, the ETTR ledger and the inventory's ``watch.playbooks`` keys all use it."""

    CRASH = "crash"
    """A rank exited, or its log shows an explicit fatal error (the verdict's ``cause`` says which)."""
    HANG = "hang"
    """No new step for ``stall_after_s`` while every rank is alive."""
    FAIL_SLOW = "fail-slow"
    """A lasting rise of the step time over its own baseline."""
    NAN_LOSS = "nan-loss"
    """A NaN/Inf loss or a loss spike."""
    HOST_CRITICAL = "host-critical"
    """A critical finding (lost GPU, hardware XID, NIC down) on a host of the job."""
    UNKNOWN = "unknown"
    """The rule could not tell: a source unreadable, liveness unknown, clocks disagreeing. Never acted
    on, never an incident."""


WATCH_CLASSES: tuple[str, ...] = tuple(c.value for c in SignalClass if c is not SignalClass.UNKNOWN)
"""The signal classes ``robustctl watch`` acts on (every :class:`SignalClass` but ``unknown``), each
mapped to a playbook by ``watch.playbooks``."""

WatchClass = Literal["crash", "hang", "fail-slow", "nan-loss", "host-critical"]

DEFAULT_WATCH_PLAYBOOKS: dict[str, str] = {
    "crash": "job-failed",
    "hang": "hang",
    "fail-slow": "fail-slow",
    "nan-loss": "nan-loss",
    "host-critical": "gpu-lost",
}
"""The shipped playbook of each signal class (issue 22's table; the playbooks in ``robustctl/_playbooks``)."""

MAX_WATCH_NOTIFY_ARGS = 64
"""Most items of ``watch.notify`` (an argv; a notifier takes a URL and a few flags)."""


class WatchSettings(StrictModel):
    """``watch:``: what ``robustctl watch`` reads, when it judges a signal, and the rails of acting.

    ``robustctl watch`` reads it (:func:`robustctl.commands.watch.run_watch_once`, and the loop
    :func:`robustctl.commands.watch.run_watch_loop` reads ``interval_s``).

    Defaults and where they come from (each rule's own docstring in :mod:`robustctl.watch.rules` gives
    the detail):

    * ``stall_after_s`` unset: derived from the job's own step time, max(10 × p99 step time, 120 s),
      and 600 s while no step time has been measured (PyTorch's default NCCL collective timeout,
      10 minutes, the wait this replaces).
    * ``slow_factor`` 1.2 over ``persist_steps`` 10: a fail-slow change point must hold a step time 20%
      above the job's own baseline for 10 steps (Greyhound's released detector confirms a change
      after 10 samples).
    * ``spike_factor`` 5 over ``loss_window`` 50: a loss at least 5 × the rolling median of the last 50
      is a spike.
    * ``cooldown_s`` 600 and ``max_recoveries_per_hour`` 3: after a recovery the watcher waits 10
      minutes before the next one for the same job, and past three recoveries in an hour it stops
      acting, records why and runs ``notify`` (a crash loop wants a person).
    * ``playbooks``: the playbook run for each signal class (:data:`DEFAULT_WATCH_PLAYBOOKS`); a class
      left out keeps its default.
    * ``interval_s`` 30: the loop (``robustctl watch`` without ``--once``,
      :func:`robustctl.commands.watch.run_watch_loop`) evaluates every 30 s. A hang is judged after
      ``stall_after_s`` (at least 120 s when derived), so 30 s adds at most a quarter of the shortest
      derived stall to the detection time while one evaluation (a few bounded reads per host) stays a
      small load; 1 s is the floor (one evaluation's reads take about that), 1 h the ceiling (a slower
      watcher is a cron job: use ``--once``).
    """

    interval_s: float = Field(
        30.0, ge=1, le=3600, description="Seconds between evaluations of the watch loop (not --once)."
    )

    stall_after_s: float | None = Field(
        None, ge=10, le=7 * 86400, description="No new step for this long is a hang (default: derived)."
    )
    slow_factor: float = Field(
        1.2, gt=1, le=100, description="Step-time rise over the baseline that is fail-slow."
    )
    persist_steps: int = Field(10, ge=1, le=32, description="Steps a fail-slow rise must hold.")
    spike_factor: float = Field(
        5.0, gt=1, le=1e6, description="Loss over the rolling median that is a spike."
    )
    loss_window: int = Field(50, ge=5, le=10_000, description="Losses in the spike rule's rolling median.")
    cooldown_s: float = Field(
        600.0, ge=0, le=86_400, description="Wait after a recovery before the next one, s."
    )
    max_recoveries_per_hour: int = Field(
        3, ge=1, le=100, description="Recoveries per job per hour, then stop."
    )
    playbooks: dict[WatchClass, Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        default_factory=dict, description="Playbook per signal class (default: the shipped table)."
    )
    notify: list[Annotated[str, Field(min_length=1, max_length=4096)]] | None = Field(
        None,
        min_length=1,
        max_length=MAX_WATCH_NOTIFY_ARGS,
        description="Command (argv, no shell) run when the watcher stops acting; the decision as JSON on stdin.",
    )

    def playbook_for(self, signal_class: str) -> str:
        """The playbook of ``signal_class``: the inventory's, else the shipped default.

        Args:
            signal_class: one of :data:`WATCH_CLASSES`.

        Returns:
            The playbook's name.

        Raises:
            KeyError: not one of :data:`WATCH_CLASSES`.
        """
        default = DEFAULT_WATCH_PLAYBOOKS[signal_class]
        own: dict[str, str] = {str(k): v for k, v in self.playbooks.items()}
        return own.get(signal_class, default)


class InventoryFile(StrictModel):
    """Top level of an inventory file."""

    ssh: SshSettings = Field(default_factory=SshSettings)
    python: PythonSettings = Field(default_factory=PythonSettings)
    gpus_per_host: int = Field(
        0, ge=0, le=MAX_HOST_RANKS, description="Expected GPUs per host (0: CPU-only hosts); at most 64."
    )
    hosts: list[HostEntry] = Field(min_length=1)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    diagnose: DiagnoseSettings = Field(default_factory=DiagnoseSettings)
    jobs: dict[str, JobSpec] = Field(default_factory=dict, description="Training jobs by name.")
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    playbooks: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        default_factory=list,
        max_length=MAX_PLAYBOOK_FILES,
        description="The inventory's own playbook files (relative to the inventory); at most 256.",
    )
    sweep: SweepSettings = Field(default_factory=SweepSettings)
    watch: WatchSettings = Field(default_factory=WatchSettings)


ENV_VARS: dict[str, str] = {
    "ROBUSTCTL_INVENTORY": "inventory file used when -i is not given",
    "ROBUSTCTL_STATE": "state store (SQLite) used when --state is not given",
    "ROBUSTCTL_CONCURRENCY": "diagnose.concurrency",
    "ROBUSTCTL_HOST_TIMEOUT": "diagnose.host_timeout_s",
    "ROBUSTCTL_DEADLINE": "diagnose.deadline_s",
    "ROBUSTCTL_SSH_USER": "ssh.user",
    "ROBUSTCTL_SSH_IDENTITY": "ssh.identity_file",
    "ROBUSTCTL_SSH_KNOWN_HOSTS": "ssh.known_hosts",
}
"""Environment variables read by robustctl and the setting each one overrides."""

_ENV_PATHS: dict[str, tuple[str, str]] = {
    "ROBUSTCTL_CONCURRENCY": ("diagnose", "concurrency"),
    "ROBUSTCTL_HOST_TIMEOUT": ("diagnose", "host_timeout_s"),
    "ROBUSTCTL_DEADLINE": ("diagnose", "deadline_s"),
    "ROBUSTCTL_SSH_USER": ("ssh", "user"),
    "ROBUSTCTL_SSH_IDENTITY": ("ssh", "identity_file"),
    "ROBUSTCTL_SSH_KNOWN_HOSTS": ("ssh", "known_hosts"),
}


def apply_env(data: dict[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Return a copy of raw inventory ``data`` with ``ROBUSTCTL_*`` overrides applied.

    A section the file gives as something other than a mapping (``diagnose: 5``) is left as it is,
    so validation reports the file's error at its line rather than failing here.
    """
    env = os.environ if environ is None else environ
    out = dict(data)
    for var, (section, key) in _ENV_PATHS.items():
        if var in env and env[var] != "":
            current = out.get(section)
            if current is not None and not isinstance(current, dict):
                continue
            sect = dict(current or {})
            sect[key] = env[var]
            out[section] = sect
    return out


def env_override_of(loc: Sequence[str | int], environ: Mapping[str, str] | None = None) -> str | None:
    """The ``ROBUSTCTL_*`` variable that set the setting at ``loc`` (a validation error's location), if any.

    Used to blame a bad value on the variable that holds it, not on the inventory file.
    """
    env = os.environ if environ is None else environ
    for var, path in _ENV_PATHS.items():
        if tuple(loc[:2]) == path and env.get(var, "") != "":
            return var
    return None


def expand_user(path: str | None) -> Path | None:
    """``~``-expand a configured path; None stays None."""
    return Path(path).expanduser() if path else None
