"""The outcome of measuring one candidate, as it crosses from the worker to the records."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from functools import cached_property

from ..lane import Status
from ._stats import Estimate, estimate

__all__ = ["Measurement"]


@dataclass(frozen=True)
class Measurement:
    """Status, error against the oracle, and timing samples (seconds per call, in the order
    taken: rounds of `ROUND_CALLS`). Only a candidate that passed its check is timed."""

    status: Status
    rel_error: float | None = None
    max_abs: float | None = None
    samples: tuple[float, ...] = ()
    timing_method: str = ""
    compile_seconds: float = 0.0
    log: str = ""
    load: float | None = None  # others' share of this process's CPUs while it was timed
    waited: float = 0.0  # seconds the timing waited for a busy machine to quiet down
    resources: dict | None = field(default=None, compare=False)  # Artifact.resources
    timeout: float | None = None  # the seconds it was allowed (`--timeout`)
    cause: str | None = None  # the environment's part in its failure (`_faults`)
    memory_limit: int | None = None  # bytes the worker could hold (None: no limit)

    @cached_property
    def estimate(self) -> Estimate | None:
        return estimate(self.samples)

    @property
    def latency(self) -> float | None:
        return None if self.estimate is None else self.estimate.latency

    @property
    def unstable(self) -> bool:
        return self.estimate is not None and self.estimate.unstable

    @property
    def median(self) -> float | None:
        """The plain median of every sample (kept for reference; `latency` decides)."""
        return statistics.median(self.samples) if self.samples else None
