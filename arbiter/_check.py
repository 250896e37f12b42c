"""Check one candidate against the oracle: emit, build, run on fresh inputs, compare.

Failures of the candidate become a `Measurement` with a status; only arbiter bugs raise.
The trial worker calls `check_candidate` in its own process so a crash costs one trial.
"""

from __future__ import annotations

import secrets
import traceback
from collections.abc import Callable
from functools import lru_cache

import numpy as np

from ._errors import BuildError, EmitError, InputError
from ._inputs import output_shape, poison, random_inputs
from ._lane import Lane, Runner
from ._oracle import Verdict, compare, frobenius, reference
from ._region import Region
from ._values import Artifact, Config, Measurement, Status

__all__ = ["build_candidate", "check_candidate", "verify"]


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


@lru_cache(maxsize=6)
def cached_inputs(region: Region, seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs, read-only so an in-process lane cannot alter what the next is checked on."""
    arrays = random_inputs(region, seed)
    for a in arrays.values():
        a.flags.writeable = False
    return arrays


@lru_cache(maxsize=4)
def cached_reference(region: Region, seed: int) -> np.ndarray:
    # A sweep draws its seeds once, so the float64 oracle (seconds for a large region) runs
    # once per region and seed in a worker, not once per candidate.
    return reference(region, cached_inputs(region, seed))


@lru_cache(maxsize=4)
def cached_norm(region: Region, seed: int) -> float:
    return frobenius(cached_reference(region, seed))


def verify(runner: Runner, region: Region, budget: float, seeds: list[int]) -> tuple[Verdict, str]:
    """Run on each seed's inputs into a poisoned output; the worst verdict wins."""
    worst: Verdict | None = None
    log = []
    for seed in seeds:
        inputs = cached_inputs(region, seed)
        out = np.empty(output_shape(region), np.float32)
        poison(out)
        runner.run(inputs, out)
        v = compare(out, cached_reference(region, seed), budget, cached_norm(region, seed))
        log.append(f"seed {seed}: {v.status.value} rel_error={v.rel_error} {v.detail}".rstrip())
        if v.status is not Status.OK:
            return v, "\n".join(log)
        if worst is None or (v.rel_error or 0.0) > (worst.rel_error or 0.0):
            worst = v
    assert worst is not None
    return worst, "\n".join(log)


def fresh_seeds(n: int) -> list[int]:
    return [secrets.randbits(31) for _ in range(n)]


def check_candidate(
    lane: Lane,
    region: Region,
    config: Config,
    budget: float,
    *,
    seeds: list[int] | None = None,
    warmup: int = 0,
    repeats: int = 0,
    input_sets: int = 2,
    before_timing: Callable[[], None] | None = None,
) -> Measurement:
    """Build, verify on fresh random inputs (two seeds by default), then optionally time.

    Timing only happens for a candidate that passed: a wrong fast kernel never gets a latency.
    """
    built = build_candidate(lane, region, config)
    if isinstance(built, Measurement):
        return built
    seeds = seeds if seeds is not None else fresh_seeds(2)
    try:
        runner = lane.runner(built, region)
    except (RuntimeError, OSError) as e:
        return Measurement(Status.LAUNCH_FAILED, compile_seconds=built.compile_seconds,
                           log=f"load failed: {e}")
    try:
        verdict, log = verify(runner, region, budget, seeds)
        if verdict.status is not Status.OK or repeats <= 0:
            return Measurement(verdict.status, verdict.rel_error, verdict.max_abs,
                               compile_seconds=built.compile_seconds,
                               timing_method=runner.timing_method, log=log)
        # inputs of their own: a kernel that writes to its inputs while it is timed must
        # not change what the next candidates are checked on
        sets = [cached_inputs(region, s + 7919) for s in seeds[:input_sets]]
        if before_timing is not None:
            before_timing()
        samples = runner.time(sets, warmup=warmup, repeats=repeats)
        return Measurement(Status.OK, verdict.rel_error, verdict.max_abs, tuple(samples),
                           runner.timing_method, built.compile_seconds, log)
    except InputError:
        raise
    except RuntimeError as e:
        return Measurement(Status.LAUNCH_FAILED, compile_seconds=built.compile_seconds,
                           log=f"{e}\n{traceback.format_exc(limit=3)}")
    finally:
        runner.close()
