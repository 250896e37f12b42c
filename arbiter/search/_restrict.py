"""What the user asks of the search space (`tune --config K=V --exclude K=V --where EXPR`).

A plain `K` means every lane with a tunable of that name; `lane.K` one lane. A `--where`
expression is a rule over the tunables it names, for the lanes that have them all. It is
parsed with `ast` and walked by a small interpreter that knows comparisons, arithmetic,
`and`/`or`/`not` and `in` over literals: user text is never `eval`ed.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import ArbiterError
from ..lane import Rule, Space, Tunable

__all__ = ["Restriction", "coerce", "split_item"]

MAX_WHERE = 500  # characters of one --where expression (its tree is walked recursively)
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos}


def coerce(text: str, choices: Sequence[Any]) -> Any:
    """The choice whose text is `text` (true/false in any case for a boolean)."""
    for c in choices:
        if str(c) == text or (isinstance(c, bool) and text.lower() == str(c).lower()):
            return c
    raise ValueError(text)


def split_item(item: str, flag: str = "--config") -> tuple[str, str]:
    k, sep, v = item.partition("=")
    if not sep or not k.strip():
        raise ArbiterError(f"{flag} expects K=V, got {item!r}")
    return k.strip(), v.strip()


class _Where:
    """One `--where` expression, checked when parsed: only the nodes the interpreter knows."""

    def __init__(self, text: str) -> None:
        self.text = text
        if len(text) > MAX_WHERE:
            raise ArbiterError(f"--where: {len(text)} characters, more than {MAX_WHERE}")
        try:
            self.tree = ast.parse(text.strip(), mode="eval").body
        except SyntaxError as e:
            raise ArbiterError(f"--where {text!r}: not an expression ({e.msg})") from None
        self.names = frozenset(n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name))
        self._value(self.tree, None)  # refuses what it does not know, before any sweep
        if not self.names:
            raise ArbiterError(f"--where {text!r} names no tunable")

    def check(self, values: Mapping[str, Any]) -> bool:
        try:
            return bool(self._value(self.tree, values))
        except (TypeError, ZeroDivisionError):
            return False

    def _value(self, node: ast.AST, values: Mapping[str, Any] | None) -> Any:
        """The node's value over `values`; with None, only checks the node kinds."""
        def of(n: ast.AST) -> Any:
            return self._value(n, values)

        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
            return node.value
        if isinstance(node, ast.Name):
            return None if values is None else values[node.id]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return tuple(of(e) for e in node.elts)
        if isinstance(node, ast.BoolOp):
            parts = [of(v) for v in node.values]
            if values is None:
                return None
            return all(parts) if isinstance(node.op, ast.And) else any(parts)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            v = of(node.operand)
            return None if values is None else _UNARY[type(node.op)](v)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            a, b = of(node.left), of(node.right)
            return None if values is None else _BINARY[type(node.op)](a, b)
        if isinstance(node, ast.Compare) and all(type(o) in _COMPARE for o in node.ops):
            left, rights = of(node.left), [of(c) for c in node.comparators]
            if values is None:
                return None
            for op, right in zip(node.ops, rights):
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        shown = ast.get_source_segment(self.text.strip(), node) or type(node).__name__
        raise ArbiterError(f"--where {self.text!r}: {shown!r} is not allowed (comparisons, "
                           "+ - * / // %, and/or/not, in, numbers and strings)")


@dataclass(frozen=True)
class Restriction:
    """Tunables fixed to one value, values excluded, and rules added; plain strings, so it
    travels with a job."""

    fixed: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    where: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for item in self.fixed:
            split_item(item, "--config")
        for item in self.excluded:
            split_item(item, "--exclude")
        for text in self.where:
            _Where(text)

    def __bool__(self) -> bool:
        return bool(self.fixed or self.excluded or self.where)

    def names(self) -> set[str]:
        """The tunable names it speaks of (`lane.K` as written)."""
        keys = {split_item(i)[0] for i in (*self.fixed, *self.excluded)}
        return keys | {n for text in self.where for n in _Where(text).names}

    def check(self, spaces: Iterable[tuple[str, Space]]) -> None:
        """Refuse what no lane swept can honour, which would otherwise restrict nothing and
        say nothing: a name no lane has, a value no lane with that name offers, a `--where`
        over tunables no one lane has together. What one lane knows and another does not is
        fine (the other is left alone)."""
        pairs = [(lane, {t.name: t.choices for t in s.tunables}) for lane, s in spaces]
        plain = {name for _, tunables in pairs for name in tunables}
        known = plain | {f"{lane}.{name}" for lane, tunables in pairs for name in tunables}
        unknown = sorted(self.names() - known)
        if unknown:
            raise ArbiterError(f"{unknown[0]!r} is no tunable of the lanes swept (theirs: "
                               f"{', '.join(sorted(plain)) or 'none'})")
        fixed: dict[str, str] = {}
        for flag, items in (("--config", self.fixed), ("--exclude", self.excluded)):
            for item in items:
                key, text = split_item(item, flag)
                if flag == "--config" and fixed.setdefault(key, item) != item:
                    raise ArbiterError(f"--config {fixed[key]} and {item}: one value each")
                offered = [c for lane, tunables in pairs
                           for c in tunables.get(_ours(key, lane) or "", ())]
                try:
                    coerce(text, offered)
                except ValueError:
                    shown = ", ".join(dict.fromkeys(map(str, offered)))
                    raise ArbiterError(f"{flag} {item}: no lane swept offers "
                                       f"{key.rpartition('.')[2]}={text} (its values: "
                                       f"{shown})") from None
        for text in self.where:
            names = _Where(text).names
            if not any(names <= set(tunables) for _, tunables in pairs):
                raise ArbiterError(f"--where {text!r}: no lane swept has all of "
                                   f"{', '.join(sorted(names))}, so it would restrict nothing")

    def narrow(self, lane: str, space: Space) -> Space:
        """The lane's space with what the user fixed, excluded and required; its default
        the old one where that is still valid, else the first valid config."""
        if not self:
            return space
        tunables = {t.name: t for t in space.tunables}
        keep = {n: list(t.choices) for n, t in tunables.items()}
        for flag, items in (("--config", self.fixed), ("--exclude", self.excluded)):
            for item in items:
                key, text = split_item(item, flag)
                name = _ours(key, lane)
                if name not in tunables:
                    continue
                try:
                    value = coerce(text, tunables[name].choices)
                except ValueError:
                    if flag == "--exclude":
                        continue
                    raise ArbiterError(f"lane {lane}: --config {item}: not among "
                                       f"{list(tunables[name].choices)} (name one lane: "
                                       f"{lane}.{name}=...)") from None
                keep[name] = [value] if flag == "--config" else [
                    c for c in keep[name] if c != value]
                if not keep[name]:
                    raise ArbiterError(f"lane {lane}: --exclude leaves {name} no value")
        rules = list(space.rules)
        for text in self.where:
            w = _Where(text)
            if w.names <= set(tunables):
                rules.append(Rule(f"--where {text}", w.check))
        narrowed = Space(tuple(Tunable(n, tuple(keep[n]), keep[n][0]) for n in tunables),
                         tuple(rules))
        old = {n: t.default for n, t in tunables.items()}
        if all(old[n] in keep[n] for n in keep):
            narrowed = _with_default(narrowed, old)
        if narrowed.violation(narrowed.default) is not None:
            first = next(narrowed.configs(), None)
            if first is None:
                raise ArbiterError(f"lane {lane}: no config satisfies --config/--exclude/"
                                   "--where")
            narrowed = _with_default(narrowed, first.as_dict())
        return narrowed


def _ours(key: str, lane: str) -> str | None:
    """`K` -> K; `lane.K` -> K for that lane, None for another."""
    head, dot, name = key.rpartition(".")
    if not dot:
        return key
    return name if head == lane else None


def _with_default(space: Space, values: Mapping[str, Any]) -> Space:
    return Space(tuple(Tunable(t.name, t.choices, values[t.name]) for t in space.tunables),
                 space.rules)
