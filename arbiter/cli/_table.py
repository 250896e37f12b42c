"""Plain-text tables for people and stable JSON for scripts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import JSON_SCHEMA
from .._json import dumps

__all__ = ["json_text", "print_json", "print_table"]


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def _with_schema(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {"schema": JSON_SCHEMA, **obj}
    if isinstance(obj, list):
        return [_with_schema(o) if isinstance(o, dict) else o for o in obj]
    return obj


def json_text(rows: Any) -> str:
    """Rows (a list of objects, or one object) as JSON, each object with its `schema`."""
    return dumps(_with_schema(rows), indent=2, sort_keys=True)


def print_json(rows: Any) -> None:
    print(json_text(rows))
