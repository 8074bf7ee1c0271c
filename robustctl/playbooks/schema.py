"""Playbook files: the schema (pydantic, strict) and the checks that make a playbook safe to run.

A playbook (YAML, read by :func:`robustctl.yamlsrc.load_yaml`: bounded, duplicate keys refused)::

    name: hang                       # lowercase, digits and '-'
    description: ...
    params:                          # given as --job J / --param k=v
      job: {required: true, description: the training job}
    policy: {apply_without_confirmation: false}   # true: destructive steps run without --yes
    steps:
      - id: stacks                   # [a-z][a-z0-9_]*: expressions read steps.stacks
        kind: stacks                 # a registered kind (robustctl.playbooks.kinds)
        args: {samples: 2}           # validated by the kind's args model
        when: steps.x.exit_code == 2 # optional: an expression on earlier steps' results
        retries: 0                   # runs again after a failure, at most this many times (0-10)
        timeout_s: 900               # the step's budget (default: the kind's)
        on_failure: abort            # abort | continue | {goto: STEP}
        next: restart                # where to go after it ran (default: the next step; 'end' stops)

How a run walks it: from the first step, each step either is skipped (its ``when:`` is false: go to the
step below it), or runs (up to ``1 + retries`` times) and succeeds (go to ``next``, else the step below)
or fails (``on_failure``: stop the run as failed, go on below, or go to the step named).

Checked before anything runs, every error one line ``FILE:LINE: where: why`` (a
:class:`PlaybookError`, exit 78): the schema (unknown keys, types, bounds), duplicated step ids, unknown
kinds, each kind's ``args``, ``when:`` and ``*_from`` expressions that do not parse or name a step that
cannot have run before (not an ancestor in the step graph), ``goto``/``next`` to an unknown step, a
cycle in the step graph (a loop is written with ``retries``, which bounds it), and a step whose kind
needs the ``job`` parameter in a playbook that does not declare it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from robustctl.errors import ConfigError
from robustctl.playbooks.expr import MAX_EXPR_CHARS, ExpressionError, compile_expr
from robustctl.playbooks.kinds import KINDS, StepArgs
from robustctl.yamlsrc import (
    SourceMap,
    dotted_path,
    format_validation_errors,
    parse_yaml,
    validation_error_lines,
)

__all__ = [
    "MAX_PLAYBOOK_BYTES",
    "MAX_STEPS",
    "Playbook",
    "PlaybookError",
    "PlaybookSpec",
    "StepSpec",
    "load_playbook",
    "parse_playbook",
]

MAX_STEPS = 64
"""Most steps in a playbook. The ByteRobust ladder (§4.2, Fig. 5) is about a dozen steps."""

MAX_RETRIES = 10
"""Most retries of one step; a retry loop is bounded by it."""

MAX_PARAMS = 32
"""Most parameters a playbook declares."""

MAX_PLAYBOOK_BYTES = 256 * 1024
"""Largest playbook file, bytes: 64 steps with long descriptions are under 32 KiB."""

END = "end"
"""The ``next:`` that ends the run."""

StepId = Field(pattern=r"^[a-z][a-z0-9_]{0,47}$")


class PlaybookError(ConfigError):
    """A playbook that cannot be used. ``errors``: one line per problem, ``FILE:LINE: where: why``."""

    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = tuple(errors)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ParamSpec(_Strict):
    """One parameter: ``required`` (no default), ``default``, ``description``."""

    required: bool = False
    default: str | None = Field(None, max_length=4096)
    description: str = Field("", max_length=1000)


class Policy(_Strict):
    """``policy:``: ``apply_without_confirmation`` (destructive steps need no ``--yes``)."""

    apply_without_confirmation: bool = False


class Goto(_Strict):
    """``on_failure: {goto: STEP}``."""

    goto: str = StepId


class StepSpec(_Strict):
    """One step (see the module docstring)."""

    id: str = StepId
    kind: str = Field(max_length=64)
    description: str = Field("", max_length=1000)
    args: dict[str, Any] = Field(default_factory=dict)
    when: str | None = Field(None, max_length=MAX_EXPR_CHARS)
    retries: int = Field(0, ge=0, le=MAX_RETRIES)
    timeout_s: float | None = Field(None, gt=0, le=86_400)
    on_failure: Literal["abort", "continue"] | Goto = "abort"
    next: str | None = Field(None, pattern=r"^([a-z][a-z0-9_]{0,47})$")

    @property
    def failure_goto(self) -> str | None:
        """The step ``on_failure`` goes to, if it is a goto."""
        return self.on_failure.goto if isinstance(self.on_failure, Goto) else None


class PlaybookSpec(_Strict):
    """A playbook file's top level."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,63}$")
    description: str = Field("", max_length=4000)
    params: dict[str, ParamSpec] = Field(default_factory=dict, max_length=MAX_PARAMS)
    policy: Policy = Field(default_factory=Policy)
    steps: list[StepSpec] = Field(min_length=1, max_length=MAX_STEPS)


@dataclass(frozen=True)
class Playbook:
    """A validated playbook.

    Attributes:
        spec: the model. args: each step's validated args, by step id. source: the file (or a name).
        text: the file's text (the journal keeps it: ``resume`` runs what was started). smap: line numbers.
    """

    spec: PlaybookSpec
    args: Mapping[str, StepArgs]
    source: str
    text: str
    smap: SourceMap

    @property
    def name(self) -> str:
        """The playbook's name."""
        return self.spec.name

    def step(self, step_id: str) -> StepSpec:
        """The step called ``step_id``. Raises KeyError."""
        for s in self.spec.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)

    def index(self, step_id: str) -> int:
        """Position of ``step_id`` in the list. Raises KeyError."""
        for i, s in enumerate(self.spec.steps):
            if s.id == step_id:
                return i
        raise KeyError(step_id)

    def successors(self, i: int) -> dict[str, int | None]:
        """Where step ``i`` can lead: ``{"skipped"|"done"|"failed": index or None (the end)}``."""
        steps = self.spec.steps
        below = i + 1 if i + 1 < len(steps) else None
        s = steps[i]
        done = below if s.next is None else (None if s.next == END else self.index(s.next))
        if s.on_failure == "abort":
            failed: int | None = None
        elif s.on_failure == "continue":
            failed = below
        else:
            failed = self.index(s.on_failure.goto) if isinstance(s.on_failure, Goto) else None
        out: dict[str, int | None] = {"done": done, "failed": failed}
        if s.when is not None:
            out["skipped"] = below
        return out

    def destructive_steps(self) -> list[str]:
        """Ids of the steps whose kind is destructive."""
        return [s.id for s in self.spec.steps if KINDS[s.kind].destructive]


def load_playbook(path: Path) -> Playbook:
    """Read and validate a playbook file.

    Args:
        path: the YAML file (at most :data:`MAX_PLAYBOOK_BYTES`, a regular file).

    Returns:
        The validated playbook.

    Raises:
        ConfigError: the file cannot be read or is not YAML (``FILE:LINE``). PlaybookError: every
            problem found, one line each.
    """
    from robustctl.yamlsrc import read_regular_file

    raw = read_regular_file(path, max_bytes=MAX_PLAYBOOK_BYTES, what="playbook YAML file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise PlaybookError([f"{path}:{line}: not UTF-8 text ({exc.reason})"]) from None
    return parse_playbook(text, str(path))


def parse_playbook(text: str, source: str) -> Playbook:
    """Validate playbook ``text`` named ``source`` in messages. See :func:`load_playbook`."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_PLAYBOOK_BYTES:
        raise PlaybookError([f"{source}: larger than the {MAX_PLAYBOOK_BYTES}-byte limit of a playbook"])
    try:
        data, smap = parse_yaml(text, source)
    except ConfigError as exc:
        raise PlaybookError([str(exc)]) from None
    if data is None:
        raise PlaybookError([f"{source}: empty playbook, expected a mapping with 'name:' and 'steps:'"])
    if not isinstance(data, dict):
        raise PlaybookError(
            [f"{smap.where(())}: expected a mapping at the top level, got {type(data).__name__}"]
        )
    try:
        spec = PlaybookSpec.model_validate(data)
    except ValidationError as exc:
        raise PlaybookError(format_validation_errors(exc, smap, data)) from None
    errors: list[tuple[int, str]] = []
    args = _check(spec, smap, errors)
    if errors:
        errors.sort(key=lambda e: e[0])
        raise PlaybookError([e for _, e in errors])
    return Playbook(spec, args, source, text, smap)


def _check(spec: PlaybookSpec, smap: SourceMap, errors: list[tuple[int, str]]) -> dict[str, StepArgs]:
    def add(loc: tuple[str | int, ...], msg: str) -> None:
        errors.append((smap.line_of(loc) or 0, f"{smap.where(loc)}: {dotted_path(loc)}: {msg}"))

    steps = spec.steps
    index: dict[str, int] = {}
    for i, s in enumerate(steps):
        if s.id in index:
            add(("steps", i, "id"), f"duplicate step id {s.id!r} (first at steps[{index[s.id]}])")
        else:
            index[s.id] = i
    for name, p in spec.params.items():
        if not name.isidentifier() or name.startswith("_"):
            add(("params", name), f"parameter name {name[:40]!r} is not an identifier")
        if p.required and p.default is not None:
            add(("params", name, "default"), "a required parameter has no default")
    args: dict[str, StepArgs] = {}
    for i, s in enumerate(steps):
        k = KINDS.get(s.kind)
        if k is None:
            add(
                ("steps", i, "kind"), f"unknown step kind {s.kind[:40]!r} (kinds: {', '.join(sorted(KINDS))})"
            )
            continue
        if k.needs_job and "job" not in spec.params:
            add(("steps", i, "kind"), f"kind {s.kind} acts on a job: declare the 'job' parameter in params")
        try:
            args[s.id] = k.args.model_validate(s.args)
        except ValidationError as exc:
            errors.extend(validation_error_lines(exc, smap, s.args, prefix=("steps", i, "args")))
        jumps: list[tuple[str | None, tuple[str | int, ...]]] = [
            (s.next, ("steps", i, "next")),
            (s.failure_goto, ("steps", i, "on_failure", "goto")),
        ]
        for target, loc in jumps:
            if target is not None and target != END and target not in index:
                add(loc, f"no step called {target!r}")
            elif target == s.id:
                add(loc, "a step cannot go to itself (use retries)")
    if errors:
        return args
    cycle = _cycle(spec, index)
    if cycle is not None:
        i = index[cycle[-2]]
        s = steps[i]
        field = "next" if s.next == cycle[-1] else "on_failure"
        add(("steps", i, field), "cycle in the steps: " + " → ".join(cycle) + " (bound a loop with retries)")
        return args
    ancestors = _ancestors(spec, index)
    for i, s in enumerate(steps):
        exprs: list[tuple[tuple[str | int, ...], str]] = []
        if s.when is not None:
            exprs.append((("steps", i, "when"), s.when))
        a = args.get(s.id)
        for name in type(a).expressions if a is not None else ():
            value = getattr(a, name)
            if value is not None:
                exprs.append((("steps", i, "args", name), value))
        for loc, text in exprs:
            try:
                c = compile_expr(text)
            except ExpressionError as exc:
                add(loc, f"{exc} in {_short(text)!r}")
                continue
            for ref in c.steps:
                if ref not in index:
                    add(loc, f"names step {ref!r}, which is not a step of this playbook")
                elif ref not in ancestors[s.id]:
                    add(loc, f"names step {ref!r}, which cannot have run before step {s.id!r}")
    return args


def _edges(spec: PlaybookSpec, index: Mapping[str, int]) -> dict[str, list[str]]:
    steps = spec.steps
    out: dict[str, list[str]] = {}
    for i, s in enumerate(steps):
        below = steps[i + 1].id if i + 1 < len(steps) else None
        targets: list[str] = []
        if s.next is None:
            targets.append(below or "")
        elif s.next != END:
            targets.append(s.next)
        if s.when is not None or s.on_failure == "continue":
            targets.append(below or "")
        if s.failure_goto is not None:
            targets.append(s.failure_goto)
        out[s.id] = [t for t in dict.fromkeys(targets) if t and t in index]
    return out


def _cycle(spec: PlaybookSpec, index: Mapping[str, int]) -> list[str] | None:
    """A cycle of the step graph as a path ``[a, b, ..., a]``, or None (iterative DFS)."""
    edges = _edges(spec, index)
    color: dict[str, int] = dict.fromkeys(edges, 0)
    for root in edges:
        if color[root]:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        path: list[str] = [root]
        color[root] = 1
        while stack:
            node, k = stack[-1]
            if k < len(edges[node]):
                stack[-1] = (node, k + 1)
                nxt = edges[node][k]
                if color[nxt] == 1:
                    return [*path[path.index(nxt) :], nxt]
                if color[nxt] == 0:
                    color[nxt] = 1
                    stack.append((nxt, 0))
                    path.append(nxt)
            else:
                color[node] = 2
                stack.pop()
                path.pop()
    return None


def _ancestors(spec: PlaybookSpec, index: Mapping[str, int]) -> dict[str, set[str]]:
    """For each step, the steps that can run before it on some path from the first step (a DAG)."""
    edges = _edges(spec, index)
    preds: dict[str, set[str]] = {s: set() for s in edges}
    for a, outs in edges.items():
        for b in outs:
            preds[b].add(a)
    memo: dict[str, set[str]] = {}
    order = _topo(edges)
    for node in order:
        acc: set[str] = set()
        for p in preds[node]:
            acc |= memo[p] | {p}
        memo[node] = acc
    return memo


def _topo(edges: Mapping[str, list[str]]) -> list[str]:
    indeg = dict.fromkeys(edges, 0)
    for outs in edges.values():
        for b in outs:
            indeg[b] += 1
    ready = [n for n, d in indeg.items() if d == 0]
    out: list[str] = []
    while ready:
        n = ready.pop()
        out.append(n)
        for b in edges[n]:
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
    return out


def _short(text: str, limit: int = 80) -> str:
    text = text if text.isprintable() else repr(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
