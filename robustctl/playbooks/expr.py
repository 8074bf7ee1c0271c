"""Safe expressions for playbook ``when:`` conditions and step arguments (no ``eval``).

An expression is one line of a small, side-effect-free language: literals (numbers, strings, ``true``/
``True``, ``false``, ``null``/``None``, lists), the names ``steps`` and ``params``, key lookup with ``.``
or ``[...]`` (``steps.diag.exit_code``, ``steps.diag["suspects"][0]``), comparisons (``== != < <= > >=
in not in``), ``and or not``, ``+ - * / %`` on numbers, ``a if c else b`` and the functions
:data:`FUNCTIONS` (``len``, ``any``, ``all``, ``min``, ``max``, ``sum``). Nothing else: no method calls,
no attribute of a Python object (``.`` looks up a key of a JSON object and nothing more), no comprehensions,
no f-strings, no ``**``.

It is parsed by Python's :mod:`ast` (a parser, not an evaluator), checked against that whitelist at load
time (:func:`compile_expr`, which also lists the steps it names), and evaluated by the ``simpleeval``
library (https://github.com/danthedeckie/simpleeval) with its attribute access replaced by key lookup and
its operators replaced by the bounded ones here.

Bounds: :data:`MAX_EXPR_CHARS` characters and :data:`MAX_EXPR_NODES` syntax nodes per expression;
arithmetic only on numbers whose magnitude stays below :data:`MAX_NUMBER` (no huge powers: there is no
``**``; ``+`` on strings or lists is refused, so nothing grows). The data an expression reads is the
steps' JSON documents, which the journal caps. Every failure, at load or at evaluation, is an
:class:`ExpressionError` (a :class:`~robustctl.errors.ConfigError`), never another exception.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from robustctl.errors import ConfigError

__all__ = [
    "FUNCTIONS",
    "MAX_EXPR_CHARS",
    "MAX_EXPR_NODES",
    "MAX_NUMBER",
    "NAMES",
    "CompiledExpr",
    "ExpressionError",
    "compile_expr",
    "evaluate",
]

MAX_EXPR_CHARS = 1000
"""Longest expression, characters: a condition on a few steps' results is one line (under 200)."""

MAX_EXPR_NODES = 200
"""Most syntax nodes in one expression (``a.b.c == 2 and len(x) > 0`` is 15)."""

MAX_NUMBER = 10**15
"""Largest magnitude an arithmetic result may have; past it the expression fails (no big-number work)."""

NAMES = ("steps", "params")
"""The names an expression can read: ``steps`` (step id → its result document) and ``params``."""


class ExpressionError(ConfigError):
    """An expression that does not parse, uses what the language does not have, or fails to evaluate."""


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _arith(op: Callable[[Any, Any], Any], sym: str) -> Callable[[Any, Any], Any]:
    def run(a: Any, b: Any) -> Any:
        if not (_num(a) and _num(b)):
            raise ExpressionError(f"{sym} needs two numbers, got {type(a).__name__} and {type(b).__name__}")
        out = op(a, b)
        if (isinstance(out, float) and not math.isfinite(out)) or abs(out) > MAX_NUMBER:
            raise ExpressionError(f"{sym}: result out of range (limit {MAX_NUMBER:.0e})")
        return out

    return run


def _neg(a: Any) -> Any:
    if not _num(a):
        raise ExpressionError(f"unary - needs a number, got {type(a).__name__}")
    return -a


def _contains(a: Any, b: Any) -> bool:
    if not isinstance(b, (list, dict, str)):
        raise ExpressionError(f"'in' needs a list, object or string on its right, got {type(b).__name__}")
    if isinstance(b, str) and not isinstance(a, str):
        raise ExpressionError("'in' a string needs a string on its left")
    return a in b


_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: _arith(operator.add, "+"),
    ast.Sub: _arith(operator.sub, "-"),
    ast.Mult: _arith(operator.mul, "*"),
    ast.Div: _arith(operator.truediv, "/"),
    ast.Mod: _arith(operator.mod, "%"),
    ast.USub: _neg,
    ast.Not: operator.not_,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: _contains,
    ast.NotIn: lambda a, b: not _contains(a, b),
}


def _seq(x: Any, fn: str) -> list[Any]:
    if isinstance(x, dict):
        return list(x)
    if not isinstance(x, (list, str)):
        raise ExpressionError(f"{fn}() needs a list, object or string, got {type(x).__name__}")
    return list(x)


def _len(x: Any) -> int:
    if not isinstance(x, (list, dict, str)):
        raise ExpressionError(f"len() needs a list, object or string, got {type(x).__name__}")
    return len(x)


def _sum(x: Any) -> Any:
    items = _seq(x, "sum")
    if not all(_num(v) for v in items):
        raise ExpressionError("sum() needs a list of numbers")
    return _arith(lambda a, b: a + b, "sum")(sum(items), 0)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "len": _len,
    "any": lambda x: any(_seq(x, "any")),
    "all": lambda x: all(_seq(x, "all")),
    "min": lambda x: min(_seq(x, "min")),
    "max": lambda x: max(_seq(x, "max")),
    "sum": _sum,
}
"""The functions an expression may call, each taking one list (or object/string)."""

_CONSTANTS = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}

_ALLOWED = (
    ast.Expression,
    ast.BoolOp,
    ast.And,
    ast.Or,
    ast.UnaryOp,
    ast.BinOp,
    ast.Compare,
    ast.IfExp,
    ast.Call,
    ast.Name,
    ast.Load,
    ast.Attribute,
    ast.Subscript,
    ast.Constant,
    ast.List,
    ast.Tuple,
    *_OPERATORS,
)


@dataclass(frozen=True)
class CompiledExpr:
    """A checked expression.

    Attributes:
        text: as written. tree: its syntax tree. steps: the step ids it names (``steps.X`` / ``steps["X"]``),
        in order of appearance.
    """

    text: str
    tree: ast.Expression
    steps: tuple[str, ...]


def compile_expr(text: str, *, known_steps: frozenset[str] | None = None) -> CompiledExpr:
    """Parse and check ``text`` (see the module docstring).

    Args:
        text: the expression (at most :data:`MAX_EXPR_CHARS` characters).
        known_steps: the step ids that may be named (None: any).

    Returns:
        The checked expression, with the step ids it reads.

    Raises:
        ExpressionError: too long or large, a syntax error, a construct outside the language, an unknown
            name or function, a ``steps`` reference that is not a plain step id, an unknown step.
    """
    if not isinstance(text, str):
        raise ExpressionError(f"expected an expression string, got {type(text).__name__}")
    if len(text) > MAX_EXPR_CHARS:
        raise ExpressionError(f"expression is {len(text)} characters long; the limit is {MAX_EXPR_CHARS}")
    if not text.strip():
        raise ExpressionError("empty expression")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"does not parse: {exc.msg} (column {exc.offset or 0})") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # NUL bytes, absurd nesting
        raise ExpressionError(f"does not parse: {type(exc).__name__}") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_EXPR_NODES:
        raise ExpressionError(f"expression has {len(nodes)} syntax nodes; the limit is {MAX_EXPR_NODES}")
    called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
    for node in nodes:
        if not isinstance(node, _ALLOWED):
            raise ExpressionError(f"{_what(node)} is not allowed in an expression")
        if isinstance(node, ast.Constant) and not (
            node.value is None or isinstance(node.value, (bool, int, float, str))
        ):
            raise ExpressionError(f"constant {type(node.value).__name__} is not allowed")
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and abs(node.value) > MAX_NUMBER:
            raise ExpressionError(f"number out of range (limit {MAX_NUMBER:.0e})")
        if (
            isinstance(node, ast.Name)
            and id(node) not in called
            and node.id not in NAMES
            and node.id not in _CONSTANTS
        ):
            if node.id in FUNCTIONS:
                raise ExpressionError(f"{node.id} is a function: call it, {node.id}(...)")
            raise ExpressionError(f"unknown name {node.id!r} (names: {', '.join(NAMES)}; true, false, null)")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise ExpressionError(f"key {node.attr!r}: keys starting with '_' cannot be read with '.'")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                raise ExpressionError(
                    f"only these functions can be called: {', '.join(FUNCTIONS)} (no methods)"
                )
            if node.keywords or len(node.args) != 1:
                raise ExpressionError(f"{node.func.id}() takes exactly one argument")
    steps = _step_refs(tree)
    if known_steps is not None:
        for s in steps:
            if s not in known_steps:
                raise ExpressionError(f"names step {s!r}, which is not a step of this playbook")
    return CompiledExpr(text, tree, tuple(dict.fromkeys(steps)))


def _what(node: ast.AST) -> str:
    names = {
        ast.Pow: "'**'",
        ast.ListComp: "a comprehension",
        ast.Lambda: "lambda",
        ast.JoinedStr: "an f-string",
    }
    return names.get(type(node), type(node).__name__)


def _step_refs(tree: ast.AST) -> list[str]:
    """Step ids named as ``steps.ID`` or ``steps["ID"]``. Raises ExpressionError for ``steps`` used otherwise."""
    out: list[str] = []
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "steps":
            parent = parents.get(id(node))
            if isinstance(parent, ast.Attribute) and parent.value is node:
                out.append(parent.attr)
            elif (
                isinstance(parent, ast.Subscript)
                and parent.value is node
                and isinstance(parent.slice, ast.Constant)
                and isinstance(parent.slice.value, str)
            ):
                out.append(parent.slice.value)
            else:
                raise ExpressionError("'steps' must be followed by a step id: steps.ID or steps[\"ID\"]")
    return out


def evaluate(expr: CompiledExpr, names: Mapping[str, Any]) -> Any:
    """Evaluate ``expr`` with ``names`` (``steps``, ``params``: plain JSON-like data).

    Args:
        expr: a checked expression (:func:`compile_expr`).
        names: what the expression's names read, name → plain JSON-like data.

    Returns:
        The value (JSON-like: a dict, list, string, number, bool or None).

    Raises:
        ExpressionError: a key that is not there, an operation on the wrong types, a number out of range.
    """
    from simpleeval import SimpleEval

    class _Eval(SimpleEval):  # type: ignore[misc]
        def _eval_attribute(self, node: ast.Attribute) -> Any:
            value = self._eval(node.value)
            if not isinstance(value, dict):
                raise ExpressionError(f".{node.attr}: {_kind(value)} has no keys")
            if node.attr not in value:
                raise ExpressionError(f"no key {node.attr!r} (keys: {_keys(value)})")
            return value[node.attr]

        def _eval_subscript(self, node: ast.Subscript) -> Any:
            value = self._eval(node.value)
            key = self._eval(node.slice)
            if isinstance(value, dict):
                if not isinstance(key, str) or key not in value:
                    raise ExpressionError(f"no key {str(key)[:40]!r} (keys: {_keys(value)})")
                return value[key]
            if isinstance(value, (list, str)):
                if not isinstance(key, int) or isinstance(key, bool):
                    raise ExpressionError("a list index must be a whole number")
                if not -len(value) <= key < len(value):
                    raise ExpressionError(f"index {key} out of range (length {len(value)})")
                return value[key]
            raise ExpressionError(f"[...]: {_kind(value)} cannot be indexed")

        def _eval_list(self, node: ast.List | ast.Tuple) -> list[Any]:
            return [self._eval(e) for e in node.elts]

    ev = _Eval(operators=dict(_OPERATORS), functions=dict(FUNCTIONS), names={**_CONSTANTS, **names})
    ev.nodes[ast.List] = ev._eval_list
    ev.nodes[ast.Tuple] = ev._eval_list
    try:
        return ev._eval(expr.tree.body)
    except ExpressionError:
        raise
    except (TypeError, ValueError, ArithmeticError, RecursionError, MemoryError, LookupError) as exc:
        raise ExpressionError(f"cannot evaluate: {type(exc).__name__}: {str(exc)[:200]}") from None
    except Exception as exc:  # simpleeval's own errors (InvalidExpression and its kin)
        raise ExpressionError(f"cannot evaluate: {str(exc)[:200]}") from None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null"}.get(
        type(value), f"a {type(value).__name__}"
    )


def _keys(value: Mapping[str, Any]) -> str:
    keys = sorted(str(k) for k in value)
    return ", ".join(keys[:20]) + (", ..." if len(keys) > 20 else "") if keys else "none"
