"""JSON as RFC 8259 reads it: a number that is not finite (inf, NaN) is written as null, never
as `Infinity` or `NaN`, which no strict parser accepts."""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["dumps", "finite_values"]


def finite_values(obj: Any) -> Any:
    """`obj` with every non-finite float (in dicts, lists and tuples, at any depth) as None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_values(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_values(v) for v in obj]
    return obj


def dumps(obj: Any, **options: Any) -> str:
    return json.dumps(finite_values(obj), allow_nan=False, **options)
