"""Arrows point one way (docs/architecture.md): every import between robustctl's packages, module-level
or inside a function, goes down the layer list or sideways without a cycle.

Type-only imports (inside ``if TYPE_CHECKING:``) are not counted. The edges that still break the rule
are listed in :data:`KNOWN`, each with why; a new one fails the test, and so does a listed one that is
gone (take it off the list: the map in docs/architecture.md shrinks with it).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "robustctl"

LAYERS: dict[str, int] = {
    "__main__": 8,
    "agent": 0,  # the in-job half: imported by training scripts, imports nothing of robustctl
    "cli": 7,
    "report": 6,
    "commands": 5,
    **dict.fromkeys(
        (
            "playbooks", "actions", "watch", "sweep", "diagnose", "stacks", "sdc", "ckpt", "jobcode",
            "jobs", "analysis", "checks", "testing",
        ),
        4,
    ),
    "transport": 3,
    "schedulers": 3,
    **dict.fromkeys(
        (
            "models", "errors", "exit_codes", "config", "inventory", "store", "watchstore", "yamlsrc",
            "inputfile", "timefmt", "probes", "pidlock", "interrupts", "suspects", "thresholds", "process", "__init__",
            "__version__",
        ),
        1,
    ),
}  # fmt: skip
"""Each package's (or top-level module's) layer: an import may point to a lower or equal number."""

KNOWN: dict[tuple[str, str], str] = {}
"""The edges that still break the rule (issue 23 removes them), each with why it exists."""


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _type_only(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            ids.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return ids


def edges() -> dict[tuple[str, str], list[str]]:
    """``{(from package, to package): [file:line, ...]}`` over every robustctl import."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(ROOT.parent)
        module = ".".join(rel.with_suffix("").parts).removesuffix(".__init__")
        src = _package(module) if module != "robustctl" else "__init__"
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_only(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "robustctl":
                    targets = [a.name for a in node.names]
                elif node.module.startswith("robustctl."):
                    targets = [_package(node.module)]
            elif isinstance(node, ast.Import):
                targets = [_package(a.name) for a in node.names if a.name.startswith("robustctl.")]
            for dst in targets:
                if dst != src:
                    out[(src, dst)].append(f"{rel}:{node.lineno}")
    return out


def _cycles(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Edges that lie on a cycle (both ends in one strongly connected component)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comp: dict[str, int] = {}

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            while True:
                w = stack.pop()
                on.discard(w)
                comp[w] = index[v]
                if w == v:
                    break

    for v in list(graph):
        if v not in index:
            visit(v)
    return {(a, b) for a, bs in graph.items() for b in bs if comp.get(a) == comp.get(b)}


def test_every_package_has_a_layer() -> None:
    found = {s for s, _ in edges()} | {d for _, d in edges()}
    assert found <= set(LAYERS), f"packages without a layer in LAYERS: {sorted(found - set(LAYERS))}"


def test_imports_point_down_or_sideways_without_a_cycle() -> None:
    all_edges = edges()
    graph: dict[str, set[str]] = defaultdict(set)
    for s, d in all_edges:
        graph[s].add(d)
    on_cycle = _cycles(graph)
    bad = {
        e: where
        for e, where in all_edges.items()
        if LAYERS.get(e[0], 0) < LAYERS.get(e[1], 0) or e in on_cycle
    }
    new = {e: w[:3] for e, w in bad.items() if e not in KNOWN}
    assert not new, "imports that point up or close a cycle (docs/architecture.md):\n" + "\n".join(
        f"  {s} -> {d}: {', '.join(w)}" for (s, d), w in sorted(new.items())
    )
    gone = sorted(set(KNOWN) - set(bad))
    assert not gone, f"no longer broken, take them off KNOWN (and the map's table): {gone}"


def test_the_agent_imports_nothing_of_robustctl_and_nothing_imports_it() -> None:
    """``robustctl.agent`` runs inside training jobs (standard library only): it imports no other
    robustctl package, and no robustctl package imports it (the control side reads its files)."""
    all_edges = edges()
    assert not [e for e in all_edges if e[0] == "agent"], "the agent imports robustctl's control side"
    assert not {e: w for e, w in all_edges.items() if e[1] == "agent"}, (
        "a robustctl package imports the agent"
    )


def test_the_cycle_finder_finds_cycles_and_only_them() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == {("a", "b"), ("b", "c"), ("c", "a")}
    assert _cycles({"x": {"y"}}) == set()
