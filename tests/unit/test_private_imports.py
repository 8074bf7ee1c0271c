"""No robustctl module uses another robustctl module's private names (issue 23).

Every module under ``robustctl/`` is parsed with :mod:`ast` (nothing is imported) and each reach into
another module's ``_name`` fails the test, at module level and inside functions alike:

* ``from robustctl.x import _name`` (also relative: ``from .x import _name``);
* ``import robustctl.x._y`` / ``from robustctl.x._y import z`` (a private module of another package);
* ``x._name`` where ``x`` is bound to a robustctl module by an import in the file (``import
  robustctl.x as x``, ``from robustctl import x``, ``import robustctl.x`` then ``robustctl.x._name``),
  unless a function parameter or local assignment of that name hides the import.

Dunder names (``__version__``, ``__all__``) and ``from __future__`` are not private. A module may use
its own private names. ``robustctl/_probes`` and ``robustctl/_playbooks`` are links to the probe
scripts (``diagnostics/``, run on the hosts as standalone scripts) and the shipped playbook YAML: data
read through :mod:`importlib.resources`, not robustctl modules, so they are not walked.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "robustctl"

ALLOWED: dict[tuple[str, str], str] = {}
"""``(importing module, "module.name" used)`` → why that use of a private name stays for now."""


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules() -> dict[str, Path]:
    """Dotted name → file of every robustctl module (packages by their ``__init__``), links not followed."""
    out: dict[str, Path] = {}
    for top, dirs, files in os.walk(PACKAGE):  # followlinks=False: _probes/_playbooks are data links
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not os.path.islink(os.path.join(top, d)))
        rel = Path(top).relative_to(PACKAGE.parent)
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            parts = rel.parts if f == "__init__.py" else (*rel.parts, f[:-3])
            out[".".join(parts)] = Path(top) / f
    return out


MODULES = _modules()


@dataclass(frozen=True)
class Use:
    """One private name of another module, used at ``line`` of ``module``."""

    module: str
    line: int
    target: str  # "robustctl.x._name" or the private module "robustctl.x._y"

    def __str__(self) -> str:
        return f"{MODULES[self.module].relative_to(PACKAGE.parent)}:{self.line}: uses {self.target}"


def _owner(module: str) -> str:
    """The package a module's relative imports start from."""
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = _owner(module).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _private_module(module: str, target: str) -> str | None:
    """The first private component of dotted ``target`` outside ``module``'s own package, if any."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if _is_private(part):
            private = ".".join(parts[: i + 1])
            own = _owner(module)
            if own == private.rpartition(".")[0] or module == private or module.startswith(private + "."):
                return None  # a package's own private submodule
            return private
    return None


class _Finder(ast.NodeVisitor):
    """Collects :class:`Use` s of one module; tracks names bound to robustctl modules per scope."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.uses: list[Use] = []
        self.scopes: list[dict[str, str | None]] = [{}]  # name → module it is bound to (None: hidden)

    def _use(self, line: int, target: str) -> None:
        self.uses.append(Use(self.module, line, target))

    def _bind(self, name: str, module: str | None) -> None:
        self.scopes[-1][name] = module

    def _lookup(self, name: str) -> str | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not alias.name.startswith("robustctl"):
                continue
            if private := _private_module(self.module, alias.name):
                self._use(node.lineno, private)
            if alias.asname:
                self._bind(alias.asname, alias.name)
            else:
                self._bind(alias.name.partition(".")[0], alias.name.partition(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        source = _absolute(self.module, node)
        if not source.startswith("robustctl"):
            return
        if private := _private_module(self.module, source):
            self._use(node.lineno, private)
        for alias in node.names:
            if alias.name == "*":
                continue
            full = f"{source}.{alias.name}"
            if _is_private(alias.name) and source != self.module:
                if full in MODULES:
                    if private := _private_module(self.module, full):
                        self._use(node.lineno, private)
                else:
                    self._use(node.lineno, full)
            self._bind(alias.asname or alias.name, full if full in MODULES else None)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        for d in getattr(node, "decorator_list", []):
            self.visit(d)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.visit(default)
        scope: dict[str, str | None] = {}
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None:
                scope[arg.arg] = None
        body = node.body if isinstance(node.body, list) else [node.body]
        for stmt in body:  # local assignments hide a module of the same name in the whole function
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    scope[sub.id] = None
        self.scopes.append(scope)
        for stmt in body:
            self.visit(stmt)
        self.scopes.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function
    visit_Lambda = _function

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain: list[str] = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name) and (mod := self._lookup(base.id)) is not None:
            for attr in reversed(chain):
                if f"{mod}.{attr}" in MODULES:
                    mod = f"{mod}.{attr}"
                    continue
                if _is_private(attr) and mod != self.module:
                    self._use(node.lineno, f"{mod}.{attr}")
                break
            self.visit(base)
            return  # the whole chain is judged here, not once per link
        self.generic_visit(node)


def _uses(module: str) -> list[Use]:
    finder = _Finder(module)
    finder.visit(ast.parse(MODULES[module].read_text(encoding="utf-8"), str(MODULES[module])))
    return finder.uses


def _violations() -> list[Use]:
    return [u for m in MODULES for u in _uses(m) if (u.module, u.target) not in ALLOWED]


def test_the_walk_sees_the_package_and_skips_the_data_links() -> None:
    assert {"robustctl", "robustctl.store", "robustctl.transport.srun", "robustctl.jobcode.records"} <= set(
        MODULES
    )
    assert not any(m.startswith(("robustctl._probes", "robustctl._playbooks")) for m in MODULES)


def test_no_module_uses_another_modules_private_names() -> None:
    found = _violations()
    assert not found, "private names of other modules used:\n" + "\n".join(map(str, found))


def test_every_allowed_entry_is_still_needed() -> None:
    used = {(u.module, u.target) for m in MODULES for u in _uses(m)}
    assert not (set(ALLOWED) - used), f"ALLOWED entries no longer used: {sorted(set(ALLOWED) - used)}"


def _uses_of(source: str, module: str = "robustctl.store") -> list[str]:
    finder = _Finder(module)
    finder.visit(ast.parse(source))
    return [f"{u.line}: {u.target}" for u in finder.uses]


def test_the_finder_catches_each_kind_of_reach() -> None:
    src = (
        "from __future__ import annotations\n"  # 1: never private
        "from robustctl.errors import _x, Public, __version__\n"  # 2
        "import robustctl.schedulers.slurm as sl\n"  # 3
        "import robustctl.transport.srun\n"  # 4
        "from robustctl import config\n"  # 5
        "def f(slurm):\n"  # 6
        "    from robustctl.schedulers.slurm import _collect\n"  # 7: inside a function
        "    sl._collect([])\n"  # 8
        "    robustctl.transport.srun._argv\n"  # 9
        "    config._load\n"  # 10
        "    slurm._collect\n"  # 11: a parameter, not the module
        "    _private_of_my_own()\n"  # 12
        "    from robustctl.store import _clean\n"  # 13: its own name
        "from .errors import _y\n"  # 14: relative, robustctl.store → robustctl.errors
        "def g():\n"  # 15
        "    config = object()\n"  # 16
        "    config._load\n"  # 17: a local, not the module
    )
    assert _uses_of(src) == [
        "2: robustctl.errors._x",
        "7: robustctl.schedulers.slurm._collect",
        "8: robustctl.schedulers.slurm._collect",
        "9: robustctl.transport.srun._argv",
        "10: robustctl.config._load",
        "14: robustctl.errors._y",
    ]


def test_the_finder_catches_a_private_module_of_another_package() -> None:
    assert _uses_of("import robustctl.checks._impl\nfrom robustctl.sdc._impl import x\n") == [
        "1: robustctl.checks._impl",
        "2: robustctl.sdc._impl",
    ]
    assert _uses_of("from robustctl.checks._impl import x\n", "robustctl.checks.host") == []
