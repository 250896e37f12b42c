"""Plain-text tables for people and stable JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["print_json", "print_table"]


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


def print_json(rows: Any) -> None:
    print(json.dumps(rows, indent=2, sort_keys=True))
