"""Reports from the records: pandas frames, matplotlib figures, an HTML/Markdown page.

Names load on first use, so importing `arbiter.report` costs nothing until a frame or a figure
is asked for (pandas and matplotlib stay out of `arbiter --help`).
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> private module that defines it
_EXPORTS = {
    "trials": "_frames",
    "winners": "_frames",
    "summary": "_frames",
    "best_per_lane": "_frames",
    "ceilings": "_frames",
    "open_records": "_frames",
    "VENDOR_LANES": "_frames",
    "latency_by_lane": "_figures",
    "latency_vs_error": "_figures",
    "convergence": "_figures",
    "speedup": "_figures",
    "roofline": "_figures",
    "build_report": "_page",
    "drawn": "_page",
    "PANELS": "_page",
    "write_report": "_page",
    "html_page": "_page",
    "winner_table": "_page",
    "FIGURES": "_page",
    "ensure_ceilings": "_ceilings",
    "measure_cpu": "_ceilings",
    "measure_gpu": "_ceilings",
    "record_ceilings": "_ceilings",
    "gfx1151_view": "_gfx1151",
    "work": "_work",
    "Work": "_work",
    "REFERENCE_MODELS": "_work",
    "ReferenceModel": "_work",
    "region_from_canonical": "_work",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
