"""The x86 C lane: generated C compiled by gcc (-O3 -march=native -fopenmp), run via ctypes."""

from __future__ import annotations

from .lane import X86CLane, lane

__all__ = ["X86CLane", "lane"]
