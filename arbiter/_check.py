"""Check one candidate against the oracle: emit, build, run on fresh inputs, compare.

Failures of the candidate become a `Measurement` with a status; only arbiter bugs raise.
The trial worker calls `check_candidate` in its own process so a crash costs one trial.
"""

from __future__ import annotations

import math
import secrets
import traceback
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ._compare_c import squares
from ._errors import InputError
from ._inputs import output_shape, poison, random_inputs
from ._lane import Lane, Runner, build_candidate
from ._oracle import CHUNK, Verdict, compare, frobenius, reference
from ._parts import PART_MIN, side_by_side
from ._region import Region
from ._values import Artifact, Config, Measurement, Status

__all__ = ["check_candidate", "verify"]


@dataclass
class Case:
    """One seed's inputs and what the oracle says of them.

    The inputs are read-only, so an in-process lane cannot alter what the next candidate is
    checked on. `timing` is a read-only copy of them, for timing: a kernel that writes to its
    inputs while it is timed must not change them either. `out` is the output buffer every
    candidate runs into, poisoned before each run (a fresh one costs as much in page faults
    as the comparison): by the last comparison, which puts the poison back as it reads each
    element (`poisoned`), else by a fill."""

    inputs: dict[str, np.ndarray]
    reference: np.ndarray
    norm: float
    timing: dict[str, np.ndarray]
    out: np.ndarray
    poisoned: bool = False


def _frozen(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    for a in arrays.values():
        a.flags.writeable = False
    return arrays


def _case(region: Region, seed: int) -> Case:
    arrays = _frozen(random_inputs(region, seed))
    ref = reference(region, arrays)
    return Case(arrays, ref, frobenius(ref), _frozen({k: a.copy() for k, a in arrays.items()}),
                np.empty(output_shape(region), np.float32))


# A sweep draws its seeds once, so the float64 oracle (seconds for a large region) runs once
# per region and seed in a worker, not once per candidate. The cases of the seeds last asked
# for are kept (a sweep goes region by region; a large region's take GBs).
_CASES: OrderedDict[tuple[Region, int], Case] = OrderedDict()
KEEP_CASES = 2


def cases(region: Region, seeds: list[int]) -> list[Case]:
    """Each seed's Case, made on first use. Seeds' cases are made side by side: their inputs
    are drawn at once (numpy's generators let go of the GIL; most of a rowwise region's
    time), while their references take turns (`reference` holds a lock)."""
    new = [s for s in dict.fromkeys(seeds) if (region, s) not in _CASES]
    if new:
        squares()  # the comparison's C loop builds (once) beside the references
    for seed, case in zip(new, side_by_side(lambda s: _case(region, s), new)):
        _CASES[(region, seed)] = case
    for seed in seeds:
        _CASES.move_to_end((region, seed))
    while len(_CASES) > max(KEEP_CASES, len(seeds)):
        _CASES.popitem(last=False)
    return [_CASES[(region, s)] for s in seeds]


def forget_cases() -> None:
    _CASES.clear()


def timing_sets(region: Region, seeds: list[int]) -> list[dict[str, np.ndarray]]:
    """Inputs to time on: the seeds' timing copies when their cases are made, else inputs
    drawn without a reference (re-timing needs no oracle)."""
    if all((region, s) in _CASES for s in seeds):
        return [c.timing for c in cases(region, seeds)]
    return [random_inputs(region, s) for s in seeds]


def _run_all(runner: Runner, chosen: list[Case]) -> None:
    # every output poisoned before the first run, not the second one after the first run,
    # beside the kernel's threads still spinning (a fill of 512K elements averaged 0.34 ms in
    # the 16-core host's sweeps, against ~0.1 idle)
    for case in chosen:
        if not case.poisoned:
            poison(case.out)
        case.poisoned = False
    for case in chosen:
        runner.run(case.inputs, case.out)


def _compared(case: Case, budget: float) -> Verdict:
    verdict = compare(case.out, case.reference, budget, case.norm, repoison=True)
    case.poisoned = True
    return verdict


def _judge(seeds: list[int], chosen: list[Case], budget: float) -> tuple[Verdict, str]:
    """Compare each seed's output with its reference; the first failure or the worst error.

    Outputs of a size compared on one thread are compared side by side when cores are free:
    two comparisons of 512K elements took ~3 ms a trial in the H200 host's sweeps. A larger
    one is compared in parts on those cores already; a small one costs less than a thread's
    hand-off."""
    if all(CHUNK <= c.out.size < 2 * PART_MIN for c in chosen):
        verdicts = side_by_side(lambda c: _compared(c, budget), chosen)
    else:
        verdicts = [_compared(c, budget) for c in chosen]
    worst: Verdict | None = None
    log = []
    for seed, v in zip(seeds, verdicts):
        log.append(f"seed {seed}: {v.status.value} rel_error={v.rel_error} {v.detail}".rstrip())
        if v.status is not Status.OK:
            return v, "\n".join(log)
        if worst is None or (v.rel_error or 0.0) > (worst.rel_error or 0.0):
            worst = v
    assert worst is not None
    return worst, "\n".join(log)


def verify(runner: Runner, region: Region, budget: float, seeds: list[int]) -> tuple[Verdict, str]:
    """Run on each seed's inputs into a poisoned output, then compare; the worst verdict wins."""
    chosen = cases(region, seeds)
    _run_all(runner, chosen)
    return _judge(seeds, chosen, budget)


class Gate(Protocol):
    """The trial worker's hold on timing: the parent's own work must be done before a
    candidate is timed (its `go`), and other work may start once it is timed."""

    def early(self, built: Artifact) -> bool:
        """Time before comparing? (The go has come, and there is work to overlap with the
        comparison once the candidate is timed: none in a sweep whose builds, `built` among
        them, are cache hits.)"""

    def check_in(self) -> None:
        """Read the go if it has come (it may call the check off: this raises then)."""

    def wait(self) -> None:
        """Block until the go."""

    def timed(self) -> None:
        """The candidate is timed: the next one may start building."""


def timing_samples(samples: object) -> list[float] | str:
    """A runner's timing samples as floats, or what is wrong with them: a latency is a finite
    number of seconds above 0, and there is at least one (a lane's own `time` may break the
    rule; nothing it returns is recorded as a latency then). Any sequence of real numbers
    will do (a numpy array too)."""
    try:
        values = np.asarray(samples, dtype=np.float64).ravel().tolist()
    except (TypeError, ValueError):
        return f"the runner's timing returned {samples!r}: not numbers"
    if isinstance(samples, (str, bytes)) or not values:
        return f"the runner's timing returned {samples!r}: no samples"
    bad = [x for x in values if not (math.isfinite(x) and x > 0)]
    if bad:
        return f"the runner's timing returned {bad[0]!r} among its samples: not a latency"
    return values


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
    gate: Gate | None = None,
    built: Artifact | Measurement | None = None,
) -> Measurement:
    """Build (unless `built` is given), verify on fresh random inputs (two seeds by default),
    then optionally time.

    A latency counts only for a candidate that passed: a wrong fast kernel never gets one. The
    comparison comes first, unless the `gate` says otherwise (`Gate.early`); then the
    candidate is timed first and compared while the next one builds, and a timing without a
    passing check is dropped.
    """
    if built is None:
        built = build_candidate(lane, region, config)
    if isinstance(built, Measurement):
        return built
    seeds = seeds if seeds is not None else fresh_seeds(2)
    try:
        runner = lane.runner(built, region)
    except (RuntimeError, OSError) as e:
        return Measurement(Status.LAUNCH_FAILED, compile_seconds=built.compile_seconds,
                           log=f"load failed: {e}")
    def untimed(verdict: Verdict, log: str) -> Measurement:
        return Measurement(verdict.status, verdict.rel_error, verdict.max_abs,
                           compile_seconds=built.compile_seconds,
                           timing_method=runner.timing_method, log=log)

    try:
        chosen = cases(region, seeds)
        if gate is not None:
            gate.check_in()
        _run_all(runner, chosen)
        later = repeats > 0 and gate is not None and gate.early(built)
        if not later:
            if gate is not None:
                gate.check_in()
            verdict, log = _judge(seeds, chosen, budget)
            if verdict.status is not Status.OK or repeats <= 0:
                return untimed(verdict, log)
        sets = [c.timing for c in chosen[:input_sets]]
        if gate is not None:
            gate.wait()
        try:
            samples = runner.time(sets, warmup=warmup, repeats=repeats)
        except RuntimeError:
            if later:  # a wrong result is the better answer, when it is one
                verdict, log = _judge(seeds, chosen, budget)
                if verdict.status is not Status.OK:
                    return untimed(verdict, log)
            raise
        if gate is not None:
            gate.timed()
        if later:
            verdict, log = _judge(seeds, chosen, budget)
            if verdict.status is not Status.OK:
                return untimed(verdict, log + "\ntimed before this check: the timing is dropped")
        timed = timing_samples(samples)
        if isinstance(timed, str):
            return Measurement(Status.LAUNCH_FAILED, verdict.rel_error, verdict.max_abs,
                               compile_seconds=built.compile_seconds, log=timed)
        samples = timed
        return Measurement(Status.OK, verdict.rel_error, verdict.max_abs, tuple(samples),
                           runner.timing_method, built.compile_seconds, log)
    except InputError:
        raise
    except RuntimeError as e:
        return Measurement(Status.LAUNCH_FAILED, compile_seconds=built.compile_seconds,
                           log=f"{e}\n{traceback.format_exc(limit=3)}")
    finally:
        runner.close()
