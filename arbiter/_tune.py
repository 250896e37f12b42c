"""`tune` and `best`: sweep regions into the records, and answer from them.

`tune` plans every region from the records first (what is already measured on this machine
is never measured again), then searches, re-times finalists and declares winners. `best`
answers from recorded numbers alone; a winner recorded on another machine (fingerprint) is
re-checked against the oracle here before it is served.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, cast

from ._api import DEFAULT_TIMEOUT, DEFAULT_TRIALS, spec_regions, usable_lanes
from ._collector import release
from ._errors import ArbiterError, LaneError, one_line
from ._fingerprint import fingerprint
from ._oracle import budget_of, checked_budget
from ._plan import Plan, plan
from ._records import VERIFY, Choice, Records, Result, choose
from ._region import Region
from ._registry import get_lane
from ._samplers import DEFAULT_SAMPLER, check_sampler
from ._search import RegionTuning, tune_region
from ._settings import settings
from ._spec import Spec
from ._values import Status
from ._worker import Worker, checked_timeout

__all__ = ["best", "best_rows", "tune"]

VERIFY_TRIES = 3


def _precision(lane: str, config: dict) -> str:
    try:
        return str(config.get("precision") or get_lane(lane).precisions[0])
    except (LaneError, IndexError):
        return "?"


def _row(region: Region, budget: float, r: Result, choice: Choice | None = None,
         **extra: Any) -> dict[str, Any]:
    config = r.config.as_dict()
    tie = bool(choice and choice.tie)
    return {
        "region": region.name or region.key, "region_key": region.key, "lane": r.lane,
        "config": config, "precision": _precision(r.lane, config),
        "latency_ms": None if r.median is None else r.median * 1e3,
        "spread_ms": None if r.spread is None else r.spread * 1e3,
        "rel_error": r.rel_error, "budget": budget, "status": "tie" if tie else "ok",
        "tie": tie,
        "runner_up": None if not (choice and choice.runner_up) else {
            "lane": choice.runner_up.lane, "config": choice.runner_up.config.as_dict(),
            "latency_ms": (None if choice.runner_up.median is None
                           else choice.runner_up.median * 1e3)},
        **extra,
    }


def tune(
    spec: str | Path | Spec | Region | Sequence[Region], *, db: str | None = None,
    trials: int = DEFAULT_TRIALS, lanes: Sequence[str] | None = None, budget: float | None = None,
    timeout: float = DEFAULT_TIMEOUT, seed: int | None = None, sampler: str = DEFAULT_SAMPLER,
    warmup: int = 3, repeats: int = 15, regions: Sequence[str] | None = None,
    progress: bool = False, refinal: bool = False,
    on_trial: Callable[[str, str, Result], None] | None = None, worker: Worker,
) -> list[dict[str, Any]]:
    """Search every region's lanes and configs, record everything, declare winners.

    `trials` is the number of distinct candidates per region to have measured on this machine
    when done (counting earlier runs), so a second run of a finished sweep measures nothing.
    Returns one row per region (see README: `arbiter tune --json`). `worker`: the
    `Worker` to run the candidates in, which the caller owns (`arbiter.tune` leases it before
    importing this module, so a new one's start-up overlaps ours).
    """
    if trials < 1:
        raise ArbiterError(f"--trials must be at least 1, got {trials}")
    timeout = checked_timeout(timeout)
    if budget is not None:
        budget = checked_budget(budget)
    check_sampler(sampler)
    # the user's input (lanes, spec, region names) is checked before anything starts
    chosen = usable_lanes(lanes)
    todo = spec_regions(spec, regions)
    url = db or settings().db
    worker.timeout = timeout
    return _sweep(todo, chosen, url, trials, worker, budget=budget, sampler=sampler, seed=seed,
                  warmup=warmup, repeats=repeats, progress=progress, refinal=refinal,
                  on_trial=on_trial)


def _sweep(todo: list[Region], chosen: list[Any], url: str, trials: int, worker: Worker, *,
           budget: float | None, sampler: str, seed: int | None, warmup: int, repeats: int,
           progress: bool, refinal: bool,
           on_trial: Callable[[str, str, Result], None] | None) -> list[dict[str, Any]]:
    with ThreadPoolExecutor(1) as pool:
        # the fingerprint waits on compiler version queries; the records open meanwhile
        fp_query = pool.submit(fingerprint)
        records = Records(url)
        fp = fp_query.result()

    def planned(region: Region) -> tuple[Region, int, int, dict[str, int], Plan]:
        region_lanes = [ln for ln in chosen if ln.applies_to(region) is None]
        region_id, env_id, lane_ids = records.ids(region, fp, region_lanes)
        return (region, region_id, env_id, lane_ids,
                plan(region, region_lanes, records, region_id, env_id, trials))

    # the regions after the first are planned one per worker window while the first is
    # searched; a progress bar's total needs them all first
    plans = [planned(r) for r in todo[:1]]
    later = list(todo[1:])
    first_window = [True]

    def plan_one() -> bool:
        """Plan the next region; False once none is left."""
        if later:
            plans.append(planned(later.pop(0)))
        return bool(later)

    def in_window() -> bool:
        if first_window:  # Optuna is imported there (`Studies.flush`)
            first_window.clear()
            return True
        return plan_one()

    shown = progress and sys.stderr.isatty()
    while shown and plan_one():
        pass
    worker.between_trials(in_window)
    bar = _bar(sum(p.needed for *_, p in plans), shown)
    rows = []
    # what exists before the sweep (modules, the caller's objects) is left out of the
    # collector's full passes while it runs: one took 45 ms of a 40-trial sweep (a freeze
    # the caller made, or another sweep's, is left as it is)
    frozen = gc.get_freeze_count() == 0
    if frozen:
        gc.freeze()
    release()  # (`arbiter.tune` held the collector off since it began)
    try:
        for i in range(len(todo)):
            while len(plans) <= i:
                plan_one()
            region, region_id, env_id, lane_ids, p = plans[i]
            b = budget_of(region, budget)
            if not p.lanes:
                rows.append(_empty(region, b, "no applicable lane"))
                continue
            bar.set_description(region.name or region.key[:12])

            def tick(lane, cfg, r, _new, _name=region.name):
                bar.update(1)
                if on_trial:
                    on_trial(_name, lane, r)

            t = tune_region(region, p, records, worker, region_id=region_id, env_id=env_id,
                            lane_ids=lane_ids, fingerprint=fp.hash, budget=b,
                            sampler=sampler, seed=seed, warmup=warmup, repeats=repeats,
                            refinal=refinal, on_trial=tick)
            rows.append(_tuned_row(region, b, t, records, region_id, env_id))
    finally:
        if frozen:
            gc.unfreeze()
        worker.between_trials(None)
        bar.close()
    return rows


class _NoBar:
    """The progress bar when none is shown (tqdm's import alone costs ~10 ms)."""

    def update(self, n: int = 1) -> None:
        pass

    def set_description(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(total: int, shown: bool) -> Any:
    if not shown:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, unit="trial", file=sys.stderr, leave=False)


def _empty(region: Region, budget: float, status: str, **extra: Any) -> dict[str, Any]:
    return {"region": region.name or region.key, "region_key": region.key, "lane": None,
            "config": None, "precision": None, "latency_ms": None, "spread_ms": None,
            "rel_error": None, "budget": budget, "status": status, "tie": False,
            "runner_up": None, **extra}


def _tuned_row(region: Region, budget: float, t: RegionTuning, records: Records,
               region_id: int, env_id: int) -> dict[str, Any]:
    counts = {"new_trials": t.new, "reused_trials": t.reused, "statuses": t.statuses}
    if t.choice is not None:
        return _row(region, budget, t.choice.winner, t.choice, **counts)
    w = records.winner(region_id, env_id, budget)
    if w is None:
        return _empty(region, budget, "no candidate within budget", **counts)
    return _from_winner(region, budget, w, **counts)


def _from_winner(region: Region, budget: float, w: dict[str, Any],
                **extra: Any) -> dict[str, Any]:
    """A row from a stored winner (`Records.winner`)."""
    row = _empty(region, budget, "tie" if w["tie"] else "ok", **extra)
    row.update(lane=w["lane"], config=w["config"], precision=_precision(w["lane"], w["config"]),
               latency_ms=w["latency_ms"], spread_ms=w["spread_ms"], rel_error=w["rel_error"],
               tie=w["tie"], runner_up=w["runner_up"])
    return row


def best(region: Region, *, budget: float | None = None, db: str | None = None,
         timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """The recorded winner for `region` on this machine under `budget` (the region's own by
    default). A budget other than the sweep's is answered from the recorded latency/error
    results; a winner recorded on another machine is re-verified here first."""
    url = db or settings().db
    records = Records(url, create=False)
    b = budget_of(region, budget)
    region_id = records.region_id(region.key)
    if region_id is None:
        raise ArbiterError(f"region {region.label!r} was never tuned in {url} "
                           "(run `arbiter tune` first)")
    fp = fingerprint()
    env_id = records.environment_id(fp.hash)
    if env_id is not None:
        w = records.winner(region_id, env_id, b)
        if w is not None:
            return _from_winner(region, b, w, source="winner", fingerprint=fp.hash)
        results = records.results(region_id, env_id)
        w = _winner_that_stands(records.winners(region_id, env_id), results, b,
                                partial(records.measured_since, region_id, env_id))
        if w is not None:
            return _from_winner(region, b, w, source="winner", fingerprint=fp.hash)
        if results:
            choice = choose(results, b)
            if choice is None:
                seen = [r.rel_error for r in results if r.median is not None and r.rel_error]
                low = f"; lowest timed error recorded {min(seen):.3g}" if seen else ""
                raise ArbiterError(f"region {region.label!r}: no recorded candidate within "
                                   f"budget {b:g}{low}")
            return _row(region, b, choice.winner, choice, source="records", fingerprint=fp.hash)
    return _reverified(region, b, records, region_id, env_id, fp, timeout)


def _winner_that_stands(winners: list[tuple[float, dict[str, Any]]], results: list[Result],
                        budget: float, since: Callable[[Any], set[int]],
                        ) -> dict[str, Any] | None:
    """A winner declared for another budget that is the answer for `budget` too: it fits
    `budget`, and every candidate that does fitted its own budget and was measured before it
    was declared, so it was chosen over all of them (the finalists' interleaved re-timing
    included; the sweep's medians alone may rank them otherwise). The tightest such budget's;
    its runner-up only if it fits too. `since(when)`: the candidates measured after `when`."""
    fits = {r.candidate_id for r in results if r.fits(budget)}
    for declared, w in sorted(winners, key=lambda bw: bw[0]):
        if w["candidate_id"] not in fits or not fits <= {
                r.candidate_id for r in results if r.fits(declared)}:
            continue
        if fits & since(w["declared_at"]):
            continue  # a later sweep (at another budget) measured one it never met
        ru = w["runner_up"]
        if ru is not None and not any(r.candidate_id in fits and r.lane == ru["lane"]
                                      and r.config.as_dict() == ru["config"] for r in results):
            w = {**w, "runner_up": None, "tie": False, "margin_ms": None}
        return w
    return None


def _reverified(region: Region, budget: float, records: Records, region_id: int,
                env_id: int | None, fp: Any, timeout: float) -> dict[str, Any]:
    # read-only until something must be checked (`best` on a database it may not write)
    here = {} if env_id is None else {
        (r.lane, r.config.key): r for r in records.results(region_id, env_id, VERIFY)}
    with Worker(timeout) as worker:  # started only if something needs checking
        for other_id, other, results in records.foreign(region_id, env_id):
            # the winner declared there first, then the fastest there
            # (cast: fits() implies a timed result, so median is set)
            fit = sorted((r for r in results if r.fits(budget)),
                         key=lambda r: cast(float, r.median))
            declared = _winner_that_stands(records.winners(region_id, other_id), results,
                                           budget, partial(records.measured_since, region_id,
                                                           other_id))
            if declared is not None:
                fit.sort(key=lambda r: r.candidate_id != declared["candidate_id"])
            tries = 0
            for r in fit:
                if tries == VERIFY_TRIES:
                    break
                try:
                    lane = get_lane(r.lane)
                except LaneError:
                    continue
                if not lane.available() or lane.applies_to(region) is not None:
                    continue
                if lane.space(region).violation(r.config) is not None:
                    continue  # not a config here (more threads than this process's CPUs)
                tries += 1
                seen = here.get((r.lane, r.config.key))
                if seen is None:
                    rid, eid, lane_ids = records.ids(region, fp, [lane])
                    m = worker.check(r.lane, region, r.config, budget, repeats=0).measurement
                    seen = here[(r.lane, r.config.key)] = records.record(
                        rid, eid, lane_ids[r.lane], r.config, m, budget, kind=VERIFY)
                if seen.status is Status.OK:
                    row = _row(region, budget, r, None, source="reverified",
                               fingerprint=fp.hash, measured_on=other)
                    row["rel_error"] = seen.rel_error
                    return row
    raise ArbiterError(f"region {region.label!r}: tuned on other machines only, and no recorded "
                       f"winner passed re-verification here (run `arbiter tune`)")


def best_rows(spec: str | Path | Spec, region_name: str | None = None, *,
              budget: float | None = None, db: str | None = None) -> list[dict[str, Any]]:
    """`arbiter best`: one row per region asked (all the spec's regions when none named)."""
    if region_name:
        return [best(r, budget=budget, db=db) for r in spec_regions(spec, [region_name])]
    rows = []
    for r in spec_regions(spec):
        try:
            rows.append(best(r, budget=budget, db=db))
        except ArbiterError as e:
            rows.append(_empty(r, budget_of(r, budget), "no answer", detail=one_line(str(e))))
    return rows
