"""How fast: candidates built in batches, checked and timed in an isolated worker process on
a quiet machine, and the statistics that decide between them."""

from __future__ import annotations

from ._builds import build_all, build_candidate
from ._faults import environment_cause, with_cause
from ._load import BUSY, Load
from ._measurement import Measurement
from ._stats import (
    EQUIVALENCE,
    FASTER,
    ROUND_CALLS,
    TIE,
    UNRESOLVED,
    Comparison,
    Estimate,
    compare_rounds,
    estimate,
    median_interval,
    round_values,
)
from ._trial import Timing, timing_samples
from ._worker import MAX_TIMEOUT, Worker, checked_timeout, memory_limit

__all__ = [
    "BUSY", "EQUIVALENCE", "FASTER", "MAX_TIMEOUT", "ROUND_CALLS", "TIE", "UNRESOLVED",
    "Comparison", "Estimate", "Load", "Measurement", "Timing", "Worker", "build_all",
    "build_candidate", "checked_timeout", "compare_rounds", "environment_cause", "estimate",
    "median_interval", "memory_limit", "round_values", "timing_samples", "with_cause",
]
