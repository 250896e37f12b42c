"""Compile gates split in two: the default run compiles a sample of each gate's variants (every
`EVERY`-th, the first included), and the `slow` run (CI's second step) compiles the rest, so
every variant is still compiled in CI while the default run stays short."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TypeVar

import pytest

T = TypeVar("T")

EVERY = 6
PARTS = [pytest.param("sample", id="sample"),
         pytest.param("rest", id="rest", marks=pytest.mark.slow)]


def part_of(variants: Sequence[T], part: str) -> list[T]:
    """The variants a gate compiles in `part` ("sample" or "rest")."""
    assert part in ("sample", "rest"), part
    return [v for i, v in enumerate(variants) if (i % EVERY == 0) == (part == "sample")]


def marked(ids: Sequence[str], sample: Collection[str] | None = None) -> list:
    """Parameters for per-variant tests: `sample` (else every `EVERY`-th) run by default, the
    rest marked slow."""
    keep = set(sample) if sample is not None else set(ids[::EVERY])
    return [pytest.param(v, id=v) if v in keep
            else pytest.param(v, id=v, marks=pytest.mark.slow) for v in ids]
