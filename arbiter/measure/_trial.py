"""What the worker does with a built candidate: check it against the oracle, then time it;
and the finalists' interleaved rounds. Runs inside the worker process (`_child`)."""

from __future__ import annotations

import math
import random
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..check import Verdict, cases, changed_inputs, verify
from ..lane import Artifact, InputsChanged, Lane, Runner, Status, artifact_mismatch
from ..region import Region
from ._load import BUSY, Load
from ._measurement import Measurement
from ._stats import FASTER, ROUND_CALLS, compare_rounds, estimate

__all__ = ["Timing", "check_and_time", "finals", "timing_samples"]


@dataclass(frozen=True)
class Timing:
    """How a sweep times a candidate, and how long it may wait for a quiet machine."""

    warmup: int = 2
    rounds: int = 5  # of ROUND_CALLS calls each: a sweep's first look
    input_sets: int = 2
    wait: float = 2.0  # seconds a timing may wait for the machine to quiet down
    min_rounds: int = 10  # finalists: rounds before the first decision, doubled at each look
    max_rounds: int = 320
    max_seconds: float = 30.0  # finalists' rounds stop here, resolved or not
    band: float = 0.02  # practical-equivalence band of a tie


def timing_samples(samples: object) -> list[float] | str:
    """A runner's samples as floats, or what is wrong with them: a latency is a finite
    number of seconds above 0, and there is at least one."""
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


class _BadClock(Exception):
    pass


def _time(runner: Runner, sets: list, warmup: int, repeats: int) -> list[float]:
    got = timing_samples(runner.time(sets, warmup=warmup, repeats=repeats))
    if isinstance(got, str):
        raise _BadClock(got)
    return got


def _timed(runner: Runner, sets: list, t: Timing, load: Load) -> tuple[list[float], float | None,
                                                                      float]:
    """Time on a quiet machine where one can be had; an unstable or disturbed timing is taken
    once more, and kept alone if it came out stable (else both, flagged by their spread)."""
    _, waited = load.quiet(t.wait)
    samples = _time(runner, sets, t.warmup, t.rounds * ROUND_CALLS)
    busy = load.now()
    first = estimate(samples)
    if (first is not None and first.unstable) or (busy is not None and busy > BUSY):
        _, more_wait = load.quiet(t.wait)
        waited += more_wait
        again = _time(runner, sets, t.warmup, t.rounds * ROUND_CALLS)
        busy = load.now()
        second = estimate(again)
        samples = again if second is not None and not second.unstable else samples + again
    return samples, busy, waited


def _failed(status: Status, log: str, artifact: Artifact) -> Measurement:
    return Measurement(status, compile_seconds=artifact.compile_seconds, log=log)


def _loaded(lane: Lane, artifact: Artifact, region: Region) -> Runner | Measurement:
    """The artifact loaded, once it is checked to be what was built (its digest, just before
    dlopen runs its constructors); a LAUNCH_FAILED Measurement when it cannot be."""
    wrong = None if artifact.path is None else artifact_mismatch(artifact.path)
    if wrong is not None:
        return _failed(Status.LAUNCH_FAILED, f"not loaded: {wrong}", artifact)
    try:
        return lane.runner(artifact, region)
    except (RuntimeError, OSError) as e:
        return _failed(Status.LAUNCH_FAILED, f"load failed: {e}", artifact)


def check_and_time(lane: Lane, region: Region, artifact: Artifact, budget: float,
                   ceiling: float, seeds: list[int], t: Timing | None, load: Load) -> Measurement:
    """Verify on each seed's inputs (two fresh seeds per sweep), then time (`t` None: verify
    only). A candidate is timed when it passes, or when its error is over the budget but
    within `ceiling`, so a looser budget asked later can be answered from the records."""
    runner = _loaded(lane, artifact, region)
    if isinstance(runner, Measurement):
        return runner
    try:
        verdict, log = verify(runner, region, budget, seeds)
        timed = verdict.status is Status.OK or (
            verdict.status is Status.WRONG_RESULT and (verdict.rel_error or math.inf) <= ceiling)
        if t is None or not timed:
            return _verdict(verdict, log, artifact, runner)
        sets = [c.timing for c in cases(region, seeds)[:t.input_sets]]
        try:
            samples, busy, waited = _timed(runner, sets, t, load)
        finally:  # (the next candidate is timed on fresh ones, whatever became of this one)
            changed = changed_inputs(region, seeds, timing=True)
        if changed is not None:
            return _failed(Status.INPUTS_CHANGED, f"{log}\nwhile timed: {changed}", artifact)
        return Measurement(verdict.status, verdict.rel_error, verdict.max_abs, tuple(samples),
                           runner.timing_method, artifact.compile_seconds, log, busy, waited)
    except InputsChanged as e:  # (a GPU runner's device copies, while timed)
        return _failed(Status.INPUTS_CHANGED, str(e), artifact)
    except _BadClock as e:
        return _failed(Status.LAUNCH_FAILED, str(e), artifact)
    except RuntimeError as e:
        return _failed(Status.LAUNCH_FAILED, f"{e}\n{traceback.format_exc(limit=3)}", artifact)
    finally:
        runner.close()


def _verdict(v: Verdict, log: str, artifact: Artifact, runner: Runner) -> Measurement:
    return Measurement(v.status, v.rel_error, v.max_abs, timing_method=runner.timing_method,
                       compile_seconds=artifact.compile_seconds, log=log)


def finals(entries: list[tuple[Lane, Artifact]], region: Region, budget: float,
           seeds: list[int], t: Timing, load: Load) -> list[Measurement]:
    """Check each finalist again, then time them in interleaved rounds (each round in a new
    random order, each finalist's turn a warm-up call and `ROUND_CALLS` timed ones) until the
    two fastest are told apart (`compare_rounds`), or the rounds or seconds run out. Every
    finalist's samples line up round by round."""
    out: list[Measurement | None] = [None] * len(entries)
    loaded: dict[int, Runner] = {}
    try:
        verdicts: dict[int, Verdict] = {}
        for i, (lane, artifact) in enumerate(entries):
            runner = _loaded(lane, artifact, region)
            if isinstance(runner, Measurement):
                out[i] = runner
                continue
            loaded[i] = runner
            try:
                v, log = verify(runner, region, budget, seeds)
            except RuntimeError as e:
                v, log = Verdict(Status.LAUNCH_FAILED, None, None), str(e)
            if v.status is not Status.OK:
                out[i] = _verdict(v, log, artifact, runner)
            else:
                verdicts[i] = v
        while True:
            timed = {i: loaded[i] for i in verdicts if out[i] is None}
            sets = [c.timing for c in cases(region, seeds)[:t.input_sets]]
            samples, busy, waited = _rounds(timed, sets, t, load, out, entries)
            if changed_inputs(region, seeds, timing=True) is None or not _wrote_inputs(
                    timed, region, seeds, t, out, entries):
                break  # (rounds taken on inputs one of them changed are taken again)
        for i, v in verdicts.items():
            if out[i] is None:
                out[i] = Measurement(Status.OK, v.rel_error, v.max_abs, tuple(samples[i]),
                                     loaded[i].timing_method, log="interleaved finalist",
                                     load=busy, waited=waited)
    finally:
        for runner in loaded.values():
            runner.close()
    return [m for m in out if m is not None]


def _wrote_inputs(runners: dict[int, Runner], region: Region, seeds: list[int], t: Timing,
                  out: list[Measurement | None], entries: list) -> bool:
    """Which finalists write into the timing inputs (found by timing each alone on fresh
    ones), each then `inputs_changed`; False when none does by itself."""
    found = False
    for i, runner in runners.items():
        if out[i] is not None:
            continue
        sets = [c.timing for c in cases(region, seeds)[:t.input_sets]]
        try:
            _time(runner, sets, 0, ROUND_CALLS)
            what = changed_inputs(region, seeds, timing=True)
        except (_BadClock, RuntimeError) as e:
            what = changed_inputs(region, seeds, timing=True) or (
                str(e) if isinstance(e, InputsChanged) else None)
        if what is not None:
            out[i] = _failed(Status.INPUTS_CHANGED, f"finalist re-timing: {what}", entries[i][1])
            found = True
    return found


def _rounds(runners: dict[int, Runner], sets: list, t: Timing, load: Load,
            out: list[Measurement | None], entries: list,
            ) -> tuple[dict[int, list[float]], float | None, float]:
    """Each live finalist's samples, the highest load over a round, the seconds waited."""
    samples: dict[int, list[float]] = {i: [] for i in runners}
    live = set(runners)  # still timed
    start = time.monotonic()
    # a lone finalist has no one to be told apart from: its rounds end at the sweep's count
    rounds, look, waited, busy = 0, t.min_rounds if len(runners) > 1 else t.rounds, 0.0, None
    rng = random.Random()
    while live:
        waited += load.quiet(t.wait / 4)[1]
        order = sorted(live)
        rng.shuffle(order)
        for i in order:
            try:
                samples[i] += _time(runners[i], sets, 1, ROUND_CALLS)
            except (_BadClock, RuntimeError) as e:
                status = (Status.INPUTS_CHANGED if isinstance(e, InputsChanged)
                          else Status.LAUNCH_FAILED)
                out[i] = _failed(status, f"finalist re-timing failed: {e}", entries[i][1])
                del samples[i]
                live.discard(i)
        now = load.now()
        busy = now if busy is None or (now is not None and now > busy) else busy
        rounds += 1
        if rounds >= t.max_rounds or time.monotonic() - start > t.max_seconds:
            break
        if rounds >= look:  # few looks (10, 20, 40, ... rounds): each one is a test
            if _decided(samples, live, t.band):
                break
            look *= 2
    return samples, busy, waited


def _decided(samples: dict[int, list[float]], live: set[int], band: float) -> bool:
    """Is the fastest told apart from every finalist still timed? Those it is clearly faster
    than leave the rounds (a vendor library far behind costs no more rounds); a tie with the
    runner-up also ends them."""
    ranked = sorted(live, key=_latency(samples))
    for i in ranked[1:]:
        c = compare_rounds(samples[ranked[0]], samples[i], band)
        if c.verdict == FASTER:
            live.discard(i)
        elif i == ranked[1] and c.resolved:
            return True
    return len(live) < 2


def _latency(samples: dict[int, list[float]]) -> Callable[[int], float]:
    def key(i: int) -> float:
        e = estimate(samples[i])
        return math.inf if e is None else e.latency
    return key
