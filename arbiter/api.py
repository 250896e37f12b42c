"""The verbs behind the CLI and the Python API: `tune`, `best`, `check`, `run`, `lanes`."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

import numpy as np

from . import JSON_SCHEMA
from ._errors import ArbiterError, LaneError
from ._progress import Progress
from .check import budget_of, checked_budget, fresh_seeds
from .lane import (
    Config,
    Lane,
    Status,
    all_lanes,
    get_lane,
    lane_names,
    refusal,
    validate_inputs,
)
from .measure import (
    Measurement,
    Timing,
    Worker,
    build_candidate,
    checked_timeout,
    memory_limit,
)
from .region import Region, Spec, is_real, load_spec, numpy_dtype, output_shape
from .settings import settings

__all__ = ["DEFAULT_TIMEOUT", "DEFAULT_TRIALS", "TuneSettings", "answer", "best", "empty_row",
           "nearest", "parse_config", "run", "spec_regions", "sweep_regions", "tune",
           "tune_settings", "usable_lanes"]

DEFAULT_TRIALS = 30  # distinct candidates per region, when the caller does not say
DEFAULT_TIMEOUT = 60.0  # seconds one candidate may take to be checked and timed
VERIFY_TRIES = 3  # winners recorded elsewhere re-checked here before giving up
# Candidates are timed when their error is inside this ceiling, not only inside the sweep's
# budget, so a looser budget asked later can be answered from the records.
CEILING_FACTOR, CEILING_FLOOR = 10.0, 1e-2


def usable_lanes(names: Sequence[str] | str | None) -> list[Lane]:
    """Available lanes; explicitly named lanes (a list, or the CLI's "a,b") must exist and be
    available."""
    if names is None:  # every installed lane that can run here; a broken plug-in is said
        usable = []
        for name in lane_names():
            try:
                lane = get_lane(name)
            except LaneError as e:
                print(f"arbiter: {e}: left out", file=sys.stderr)
                continue
            if lane.available():
                usable.append(lane)
        return usable
    if isinstance(names, str):
        names = names.split(",")
    lanes = all_lanes([n.strip() for n in names if n.strip()])
    if not lanes:
        raise LaneError("no lanes named")
    for lane in lanes:
        av = lane.available()
        if not av:
            raise LaneError(f"lane {lane.name!r} is not available here: {av.reason}")
    return lanes


def spec_regions(spec: str | Path | Spec | Region | Sequence[Region],
                 names: Sequence[str] | None = None) -> list[Region]:
    """The regions of a spec (a file, a Spec, one region or a list), or the ones named."""
    if isinstance(spec, (str, Path, Spec)):
        whole = spec if isinstance(spec, Spec) else load_spec(spec)
        return [whole.get(n) for n in names] if names else list(whole)
    if isinstance(spec, get_args(Region)):
        return [spec]  # type: ignore[list-item]
    return list(spec)  # type: ignore[arg-type]


def _precision(lane: str, config: dict[str, Any]) -> str:
    try:
        return str(config.get("precision") or get_lane(lane).precisions[0])
    except (LaneError, IndexError):
        return "?"


def empty_row(region: Region, budget: float, status: str, **extra: Any) -> dict[str, Any]:
    """A region's row with no winner in it: the keys every row of `tune` and `best` has."""
    return {"schema": JSON_SCHEMA, "region": region.name or region.key, "region_key": region.key,
            "dtype": region.dtype, "lane": None,
            "config": None, "precision": None, "latency_ms": None, "latency_low_ms": None,
            "latency_high_ms": None, "spread_ms": None, "rel_error": None, "budget": budget,
            "status": status, "tie": False, "verdict": None, "unstable": False, "load": None,
            "runner_up": None, **extra}


def _winner_row(region: Region, budget: float, w: dict[str, Any], **extra: Any) -> dict:
    """A row from a declared winner (`Records.winners`): the same numbers everywhere."""
    status = w["verdict"] if w["verdict"] in ("tie", "unresolved") else (
        "tie" if w["tie"] else "ok")
    row = empty_row(region, budget, status, **extra)
    row.update({k: w[k] for k in ("lane", "config", "latency_ms", "latency_low_ms",
                                  "latency_high_ms", "spread_ms", "rel_error", "tie", "verdict",
                                  "unstable", "load")},
               precision=_precision(w["lane"], w["config"]))
    ru = w["runner_up"]
    row["runner_up"] = None if ru is None else {k: v for k, v in ru.items()
                                                if k != "candidate_id"}
    return row


def _result_row(region: Region, budget: float, r: Any, runner_up: Any,
                **extra: Any) -> dict[str, Any]:
    """A row from a recorded result that no sweep declared."""
    def ms(x: float | None) -> float | None:
        return None if x is None else x * 1e3

    row = empty_row(region, budget, "ok", **extra)
    config = r.config.as_dict()
    row.update(lane=r.lane, config=config, precision=_precision(r.lane, config),
               latency_ms=ms(r.latency), latency_low_ms=ms(r.latency_low),
               latency_high_ms=ms(r.latency_high), spread_ms=ms(r.spread),
               rel_error=r.rel_error, unstable=r.unstable, load=r.load)
    if runner_up is not None:
        row["runner_up"] = {"lane": runner_up.lane, "config": runner_up.config.as_dict(),
                            "latency_ms": ms(runner_up.latency)}
    return row


def tune(spec: Any, *, db: str | None = None, trials: int = DEFAULT_TRIALS,
         lanes: Sequence[str] | str | None = None, budget: float | None = None,
         timeout: float = DEFAULT_TIMEOUT, seed: int | None = None, sampler: str = "tpe",
         regions: Sequence[str] | None = None, timing: Timing | None = None,
         equivalence: float | None = None, refinal: bool = False, progress: bool = False,
         config: Sequence[str] = (), exclude: Sequence[str] = (), where: Sequence[str] = (),
         on_trial: Callable[[str, str, Any], None] | None = None,
         on_region: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Search every region's lanes and configs, record everything, declare winners.

    `trials` is the number of distinct candidates per region to have measured on this machine
    when done (counting earlier runs), so a second run of a finished sweep measures nothing.
    `equivalence` is the practical-equivalence band of a tie (default 2%). `config`, `exclude`
    ("K=V" or "lane.K=V") and `where` (expressions over tunables, e.g. "threads <= 2") narrow
    every lane's space. Returns one row per region (README: `arbiter tune --json`);
    `on_region(row)` is called with each one as its region is declared, before the next
    starts (to time regions, or act on a winner while the sweep goes on)."""
    from .records import holder_id, one_sweep

    how = tune_settings(trials=trials, budget=budget, timeout=timeout, seed=seed,
                        sampler=sampler, timing=timing, equivalence=equivalence,
                        refinal=refinal, config=config, exclude=exclude, where=where)
    chosen = usable_lanes(lanes)
    todo = spec_regions(spec, regions)
    url = db or settings().db

    def declared(_region: Region, row: dict[str, Any], _lease: Any) -> None:
        if on_region is not None:
            on_region(row)

    with one_sweep(url), Worker(how.timeout) as worker:
        return sweep_regions(url, todo, chosen, how, worker, holder=holder_id(),
                             progress=progress, on_trial=on_trial, on_region=declared)


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    """The checked options of one `tune` (the same for `tune --workers` and a job)."""

    trials: int
    budget: float | None
    timeout: float
    options: Any  # sweep.Options


def tune_settings(*, trials: int = DEFAULT_TRIALS, budget: float | None = None,
                  timeout: float = DEFAULT_TIMEOUT, seed: int | None = None,
                  sampler: str = "tpe", timing: Timing | None = None,
                  equivalence: float | None = None, refinal: bool = False,
                  config: Sequence[str] = (), exclude: Sequence[str] = (),
                  where: Sequence[str] = ()) -> TuneSettings:
    from .search import Restriction, check_sampler
    from .sweep import Options

    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ArbiterError(f"--trials must be at least 1, got {trials}")
    timeout = checked_timeout(timeout)
    if budget is not None:
        budget = checked_budget(budget)
    check_sampler(sampler)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                             or not 0 <= seed < 2**32):
        raise ArbiterError(f"--seed must be an integer in [0, 2**32), got {seed!r}")
    timing = timing or Timing()
    if equivalence is not None:
        if not is_real(equivalence) or not 0 <= equivalence < 1:
            raise ArbiterError(f"--equivalence must be in [0, 1), got {equivalence!r}")
        timing = dataclasses.replace(timing, band=float(equivalence))
    texts = {"config": config, "exclude": exclude, "where": where}
    for flag, items in texts.items():
        if isinstance(items, str) or not all(isinstance(i, str) for i in items):
            raise ArbiterError(f"{flag}: expected a list of strings, got {items!r}")
    restrict = Restriction(tuple(config), tuple(exclude), tuple(where))
    return TuneSettings(trials, budget, timeout,
                        Options(sampler, seed, timing, bool(refinal), restrict))


def sweep_regions(url: str, todo: Sequence[Region], chosen: Sequence[Lane], how: TuneSettings,
                  worker: Worker, *, holder: str, job_id: int | None = None,
                  lease_seconds: float | None = None, progress: bool = False,
                  on_trial: Callable[[str, str, Any], None] | None = None,
                  on_region: Callable[[Region, dict[str, Any], Any], None] | None = None,
                  ) -> list[dict[str, Any]]:
    """Sweep each region under its lease (waiting while another process holds it), in order;
    `on_region(region, row, lease)` runs before the lease is let go."""
    from .records import LEASE_SECONDS, Lease, Records, fingerprint
    from .search import plan
    from .sweep import BusyNotice, sweep_region

    restrict = how.options.restrict
    check_restriction(restrict, todo, chosen)
    busy = BusyNotice(how.options.timing)
    records = Records(url)
    fp = fingerprint()
    work = []
    for region in todo:
        region_lanes = [ln for ln in chosen if refusal(ln, region) is None]
        region_id, env_id, lane_ids = records.ids(region, fp, region_lanes)
        p = plan(region, region_lanes, records.results(region_id, env_id), how.trials, restrict,
                 how.timeout, memory_limit(region))
        work.append((region, region_id, env_id, lane_ids, p))
    rows = []
    shown = Progress([p.needed for *_, p in work], progress)
    try:
        for region, region_id, env_id, lane_ids, p in work:
            b = budget_of(region, how.budget)
            lease = Lease(url, region_id, env_id, holder, job_id=job_id,
                          seconds=lease_seconds or LEASE_SECONDS)
            _wait_for(lease, region)
            with lease.kept():
                # what another holder measured meanwhile counts
                p = plan(region, list(p.lanes.values()), records.results(region_id, env_id),
                         how.trials, restrict, how.timeout, memory_limit(region))
                shown.region(region.label)
                if not p.lanes:
                    row = empty_row(region, b, "no applicable lane")
                else:

                    def tick(lane: str, r: Any, name: str = region.name) -> None:
                        shown.trial(r)
                        if on_trial:
                            on_trial(name, lane, r)

                    held = records.guarded(lease.hold)
                    done = sweep_region(region, p, held, worker, region_id=region_id,
                                        env_id=env_id, lane_ids=lane_ids, budget=b,
                                        ceiling=max(b * CEILING_FACTOR, CEILING_FLOOR),
                                        opts=how.options, busy=busy, on_trial=tick)
                    counts = {"new_trials": done.new, "reused_trials": done.reused,
                              "statuses": done.statuses}
                    declared = records.winners(region_id, env_id, b)
                    row = (_winner_row(region, b, declared[0], **counts) if declared
                           else empty_row(region, b, "no candidate within budget", **counts))
                shown.region_done(row)
                if on_region:
                    on_region(region, row, lease)
            rows.append(row)
    finally:
        shown.close()
    return rows


def check_restriction(restrict: Any, todo: Sequence[Region], chosen: Sequence[Lane]) -> None:
    """Refuse a `--config/--exclude/--where` (`search.Restriction`) that the lanes applying
    to `todo` cannot honour, or that leaves one of their spaces empty, before anything runs."""
    if not restrict:
        return
    spaces = [(ln.name, ln.space(region)) for region in todo for ln in chosen
              if refusal(ln, region) is None]
    restrict.check(spaces)
    for lane, space in spaces:
        restrict.narrow(lane, space)


def _wait_for(lease: Any, region: Region) -> None:
    """Take the region's lease, waiting (and saying so once) while another process holds it."""
    import time

    told = False
    while (who := lease.take()) is not None:
        if not told:
            print(f"arbiter: region {region.label} is being swept by {who} on this database: "
                  f"waiting for it (or for its lease to go {lease.seconds:g} s silent)",
                  file=sys.stderr, flush=True)
            told = True
        time.sleep(min(1.0, lease.seconds / 4))


def best(region: Region, *, budget: float | None = None, db: str | None = None,
         timeout: float = DEFAULT_TIMEOUT, verify: bool = False) -> dict[str, Any]:
    """The recorded winner for `region` on this machine under `budget` (the region's own by
    default), answered from the records. A budget other than the sweep's is answered by a
    declared winner that stands for it, else from the recorded results; a winner recorded
    only on another machine is re-checked here first. A shape never tuned is answered by the
    nearest tuned shape of its op chain (`source: nearest`), checked against the oracle at
    this shape first when `verify`."""
    from .records import Records, fingerprint

    if not isinstance(region, get_args(Region)):
        raise ArbiterError(f"best() takes a region (e.g. load_spec(path).get(name)), got "
                           f"{region!r}")
    url = db or settings().db
    records = Records(url, create=False)
    b = budget_of(region, budget)
    region_id = records.region_id(region.key)
    fp = fingerprint()
    env_id = records.environment_id(fp.hash)
    row = None if region_id is None or env_id is None else answer(
        records, region, region_id, env_id, b, fp.hash)
    if row is not None:
        return row
    if region_id is not None and records.foreign(region_id, env_id):
        return _reverified(region, b, records, region_id, env_id, fp, timeout)
    near = None
    if env_id is not None:
        with Worker(timeout) as worker:  # (started only if a check is asked for)
            near = nearest(records, region, env_id, b, fp.hash,
                           verify=(worker, fp) if verify else None)
    if near is not None:
        return near
    raise ArbiterError(f"region {region.label!r} was never tuned in {url}, nor a shape of its "
                       "op chain near it (run `arbiter tune` first)")


def nearest(records: Any, region: Region, env_id: int, budget: float, fingerprint: str, *,
            verify: tuple[Worker, Any] | None = None) -> dict[str, Any] | None:
    """The answer for a shape never tuned: the winner of the nearest tuned shape of the same
    op chain in this environment (`choose.neighbours`), where its lane applies and its config
    is valid at this shape. Its latency was measured at the neighbour's shape: the row gives
    it under `neighbour`, not as this region's. With `verify` (a worker), the config is first
    checked against the oracle at this shape (recorded as a verification), and a neighbour
    whose config fails is passed over. `verify`: a worker and this machine's Fingerprint."""
    from .choose import neighbours
    from .records import VERIFY
    from .region import region_from_canonical

    tuned = [(rid, region_from_canonical(c).with_name(name))
             for rid, name, c in records.tuned(region.kind, env_id)]
    for distance, rid, other in neighbours(region, tuned):
        try:
            row = answer(records, other, rid, env_id, budget, fingerprint)
        except ArbiterError:  # nothing of its within this budget
            continue
        if row is None:
            continue
        try:
            lane = get_lane(row["lane"])
            if not lane.available() or refusal(lane, region) is not None:
                continue
            config = parse_config(lane, region, row["config"])
        except ArbiterError:  # not a config at this shape
            continue
        out = empty_row(region, budget, "nearest", source="nearest", fingerprint=fingerprint)
        out.update(lane=lane.name, config=config.as_dict(), precision=row["precision"],
                   neighbour={"region": other.name, "region_key": other.key,
                              "distance": round(distance, 3), "latency_ms": row["latency_ms"],
                              "rel_error": row["rel_error"]})
        if verify is not None:
            worker, fp = verify
            built = build_candidate(lane, region, config)
            m = built if isinstance(built, Measurement) else worker.check(
                lane.name, region, built, budget, seeds=fresh_seeds(), timing=None)
            if not records.read_only:  # (a database this process may only read: not kept)
                rid_here, eid, lane_ids = records.ids(region, fp, [lane])
                records.record(rid_here, eid, lane_ids[lane.name], config, m, budget,
                               kind=VERIFY)
            if m.status is not Status.OK:
                continue
            out.update(rel_error=m.rel_error, verified=True)
        return out
    return None


def answer(records: Any, region: Region, region_id: int, env_id: int, budget: float,
           fingerprint: str) -> dict[str, Any] | None:
    """`best`'s answer from one environment's records, or None when it has none for this
    region (`arbiter serve` answers with this too: it never runs a kernel)."""
    from .choose import choose, winner_that_stands
    from .records import FINAL

    here = {"source": "winner", "fingerprint": fingerprint}
    declared = records.winners(region_id, env_id)
    exact = [w for w in declared if w["budget"] == budget]
    results = records.results(region_id, env_id)
    w = exact[0] if exact else winner_that_stands(declared, results, budget)
    if w is not None:
        return _winner_row(region, budget, w, **here)
    if not results:
        return None
    # a finalist counts with the latency its rounds gave (the one every other answer shows
    # for it); one that failed its re-check or re-timing does not count
    final = {r.candidate_id: r for r in records.results(region_id, env_id, FINAL)}
    results = [f for f in (final.get(r.candidate_id, r) for r in results)
               if f.candidate_id not in final or f.status is Status.OK]
    choice = choose(results, budget)
    if choice is None:
        seen = [r.rel_error for r in results if r.latency is not None and r.rel_error]
        low = f"; lowest timed error recorded {min(seen):.3g}" if seen else ""
        raise ArbiterError(f"region {region.label!r}: no recorded candidate within "
                           f"budget {budget:g}{low}")
    return _result_row(region, budget, choice.winner, choice.runner_up, source="records",
                       fingerprint=fingerprint)


def _reverified(region: Region, budget: float, records: Any, region_id: int,
                env_id: int | None, fp: Any, timeout: float) -> dict[str, Any]:
    """A winner recorded only under other fingerprints, checked against the oracle here
    first: the one declared there first, then the fastest there."""
    from .choose import winner_that_stands
    from .records import VERIFY

    here = {} if env_id is None else {
        (r.lane, r.config.key): r for r in records.results(region_id, env_id, VERIFY)}
    with Worker(timeout) as worker:  # started only if something needs checking
        for other_id, other, results in records.foreign(region_id, env_id):
            fit = sorted((r for r in results if r.fits(budget)), key=lambda r: r.latency)
            declared = winner_that_stands(records.winners(region_id, other_id), results, budget)
            if declared is not None:
                fit.sort(key=lambda r: r.candidate_id != declared["candidate_id"])
            tries = 0
            for r in fit:
                try:
                    lane = get_lane(r.lane)
                except LaneError:
                    continue
                if (not lane.available() or refusal(lane, region) is not None
                        or lane.space(region).violation(r.config) is not None):
                    continue  # not a candidate here (more threads than this process's CPUs)
                if tries == VERIFY_TRIES:
                    break
                tries += 1
                seen = here.get((r.lane, r.config.key))
                if seen is None:
                    built = build_candidate(lane, region, r.config)
                    m = built if isinstance(built, Measurement) else worker.check(
                        r.lane, region, built, budget, seeds=fresh_seeds(), timing=None)
                    seen = here[(r.lane, r.config.key)] = m  # (a read-only database: not kept)
                    if not records.read_only:
                        rid, eid, lane_ids = records.ids(region, fp, [lane])
                        seen = here[(r.lane, r.config.key)] = records.record(
                            rid, eid, lane_ids[r.lane], r.config, m, budget, kind=VERIFY)
                if seen.status is Status.OK:
                    row = _result_row(region, budget, r, None, source="reverified",
                                      fingerprint=fp.hash, measured_on=other)
                    row["rel_error"] = seen.rel_error
                    return row
    raise ArbiterError(f"region {region.label!r}: tuned on other machines only, and no recorded "
                       f"winner passed re-verification here (run `arbiter tune`)")


def parse_config(lane: Lane, region: Region, items: Sequence[str] | Mapping[str, Any]) -> Config:
    """`k=v` strings (or a mapping) -> a complete, valid Config for this lane and region."""
    from .search import coerce, split_item

    space = lane.space(region)
    choices = {t.name: t.choices for t in space.tunables}
    values: dict[str, Any] = {}
    pairs = items.items() if isinstance(items, Mapping) else (split_item(s) for s in items)
    for k, v in pairs:
        if k not in choices:
            raise ArbiterError(f"lane {lane.name}: unknown tunable {k!r} "
                               f"(known: {', '.join(choices) or 'none'})")
        try:
            values[k] = coerce(v, choices[k]) if isinstance(v, str) else v
        except ValueError:
            raise ArbiterError(f"lane {lane.name}: {k}={v} not among "
                               f"{list(choices[k])}") from None
    config = space.complete(values)
    problem = space.violation(config)
    if problem:
        raise ArbiterError(f"lane {lane.name}: config {config} is invalid: {problem}")
    return config


def run(region: Region, *, lane: str | None = None,
        config: Mapping[str, Any] | Sequence[str] | None = None, db: str | None = None,
        **arrays: np.ndarray) -> np.ndarray:
    """Compute `region` on `arrays` with one lane (the default config unless given); with no
    lane, the recorded winner's lane and config for this machine."""
    if lane is None:
        if config:
            raise ArbiterError("a config needs a lane; without one the recorded winner runs")
        w = best(region, db=db)
        lane, config = w["lane"], w["config"]
    assert lane is not None
    ln = get_lane(lane)
    av = ln.available()
    if not av:
        raise LaneError(f"lane {lane!r} is not available here: {av.reason}")
    why = refusal(ln, region)
    if why is not None:
        raise LaneError(f"lane {lane!r} does not apply to {region.label}: {why}")
    cfg = parse_config(ln, region, config or {})
    inputs = validate_inputs(region, arrays)
    built = build_candidate(ln, region, cfg)
    if isinstance(built, Measurement):
        raise ArbiterError(f"lane {lane!r} could not build {region.label}: "
                           f"{built.status.value}: {built.log.strip().splitlines()[0]}")
    out = np.empty(output_shape(region), numpy_dtype(region.dtype))
    try:  # (in a sweep, the worker records what a lane raises here as launch_failed)
        runner = ln.runner(built, region)
        try:
            runner.run(inputs, out)
        finally:
            runner.close()
    except ArbiterError:
        raise
    except Exception as e:
        raise LaneError(f"lane {lane!r} could not run {region.label}: {type(e).__name__}: "
                        f"{e}") from e
    return out
