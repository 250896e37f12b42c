"""Candidates built before they are timed: a batch at a time, in parallel (the compilers are
most of a cold sweep), and never while anything is being timed."""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from .._errors import BuildError, CacheError, EmitError
from ..lane import Artifact, Config, Lane, Status, usable_cores
from ..region import Region
from ._measurement import Measurement

__all__ = ["build_all", "build_candidate"]


def build_candidate(lane: Lane, region: Region, config: Config) -> Artifact | Measurement:
    """Emit and build; a Measurement (INVALID / COMPILE_FAILED) when that fails."""
    violation = lane.space(region).violation(config)
    if violation is not None:
        return Measurement(Status.INVALID, log=f"config rejected by the lane's space: {violation}")
    try:
        source = lane.emit(region, config)
    except EmitError as e:
        return Measurement(Status.INVALID, log=f"emit refused: {e}")
    try:
        return lane.build(source)
    except BuildError as e:
        return Measurement(Status.COMPILE_FAILED, log=f"{e}\n{e.log}")
    except CacheError:  # (no candidate's failure: the sweep stops, with why)
        raise
    except Exception:  # noqa: BLE001  a plug-in's build raising is its candidate's failure
        return Measurement(Status.COMPILE_FAILED, log=traceback.format_exc(limit=8))


def build_all(items: Sequence[tuple[Lane, Region, Config]]) -> list[Artifact | Measurement]:
    """Build each (lane, region, config), as many at once as there are usable cores."""
    threads = min(len(items), usable_cores())
    if threads <= 1:
        return [build_candidate(*item) for item in items]
    with ThreadPoolExecutor(threads, thread_name_prefix="arbiter-build") as pool:
        return list(pool.map(lambda item: build_candidate(*item), items))
