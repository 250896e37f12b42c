"""The verbs behind the CLI and the Python API (`arbiter.check`, `arbiter.run`, ...)."""

from __future__ import annotations

import importlib
import math
import os
import random
import threading
import zipfile
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, get_args

import numpy as np

from ._errors import ArbiterError, InputError, LaneError, SpecError
from ._inputs import input_shapes, output_shape, random_inputs, validate_inputs
from ._lane import Lane, build_candidate
from ._oracle import budget_of
from ._region import Region
from ._registry import all_lanes, get_lane, lane_names
from ._settings import settings
from ._spec import Spec, load_spec
from ._sweep_lock import one_sweep
from ._values import ENUMERABLE, Config, Measurement, Platform

__all__ = [
    "best", "check", "lane_table", "parse_config", "run", "run_npz", "tune", "usable_lanes",
]


def lane_table() -> list[dict[str, Any]]:
    rows = []
    for name in lane_names():
        try:
            lane = get_lane(name)
            av = lane.available()
            rows.append({"name": name, "platform": lane.platform.value,
                         "available": bool(av.ok), "reason": av.reason})
        except Exception as e:  # a broken plug-in is reported, not fatal
            rows.append({"name": name, "platform": "?", "available": False,
                         "reason": f"failed to load: {type(e).__name__}: {e}"})
    return rows


def _named(names: Sequence[str] | None) -> list[Lane]:
    """The lanes named (blank names skipped; one string is read as the CLI's "a,b"), or
    every installed one; not asked whether they are available."""
    if isinstance(names, str):
        names = names.split(",")
    return all_lanes(None if names is None else [n.strip() for n in names if n.strip()])


def usable_lanes(names: Sequence[str] | None) -> list[Lane]:
    """Available lanes; explicitly named lanes must exist and be available."""
    if names is None:
        return [lane for lane in _named(None) if lane.available()]
    lanes = _named(names)
    if not lanes:
        raise LaneError("no lanes named")
    for lane in lanes:
        av = lane.available()
        if not av:
            raise LaneError(f"lane {lane.name!r} is not available here: {av.reason}")
    return lanes


DEFAULT_TRIALS = 30  # distinct candidates per region, when the caller does not say
DEFAULT_TIMEOUT = 60.0  # seconds one candidate may take to build, check and time


def spec_regions(spec: str | Path | Spec | Region | Sequence[Region],
                 names: Sequence[str] | None = None) -> list[Region]:
    """The regions of a spec (a file, a Spec, one region or a list), or the ones named."""
    if isinstance(spec, (str, Path, Spec)):
        whole = _spec(spec)
        return [whole.get(n) for n in names] if names else list(whole)
    if isinstance(spec, Region.__args__):  # type: ignore[attr-defined]
        return [spec]  # type: ignore[list-item]
    return list(spec)  # type: ignore[arg-type]


def _spec(spec: str | Path | Spec) -> Spec:
    return spec if isinstance(spec, Spec) else load_spec(spec)


def check(
    spec: str | Path | Spec, *, lanes: Sequence[str] | None = None, budget: float | None = None,
    timeout: float = 120.0,
) -> list[dict[str, Any]]:
    """Every applicable, available lane's default config on every region, against the oracle.

    Each check runs in the trial worker process, so a lane that crashes or hangs is a status
    in the table, not the end of the command.
    """
    from ._worker import Worker

    chosen = usable_lanes(lanes)
    regions = _spec(spec).regions
    rows = []
    with Worker(timeout=timeout) as worker:
        for region in regions:
            rows += _check_region(worker, region, chosen, budget_of(region, budget))
    return rows


def _check_region(worker: Any, region: Region, lanes: list[Lane], b: float) -> list[dict]:
    rows = []
    for lane in lanes:
        if lane.applies_to(region) is None:
            m = worker.check(lane.name, region, lane.space(region).default, b,
                             warmup=0, repeats=0).measurement
            detail = "" if m.status.value == "ok" else m.log.strip().splitlines()[-1:]
            rows.append({
                "region": region.name, "lane": lane.name, "status": m.status.value,
                "rel_error": m.rel_error, "max_abs": m.max_abs, "budget": b,
                "detail": detail[0] if detail else "",
            })
    return rows


def _coerce(text: str, choices: Sequence[Any]) -> Any:
    for c in choices:
        if str(c) == text or (isinstance(c, bool) and text.lower() == str(c).lower()):
            return c
    raise ValueError(text)


def parse_config(lane: Lane, region: Region, items: Sequence[str] | Mapping[str, Any]) -> Config:
    """`k=v` strings (or a mapping) -> a complete, valid Config for this lane and region."""
    space = lane.space(region)
    choices = {t.name: t.choices for t in space.tunables}
    values: dict[str, Any] = {}
    pairs = items.items() if isinstance(items, Mapping) else (_split(s) for s in items)
    for k, v in pairs:
        if k not in choices:
            raise ArbiterError(f"lane {lane.name}: unknown tunable {k!r} "
                               f"(known: {', '.join(choices) or 'none'})")
        try:
            values[k] = _coerce(v, choices[k]) if isinstance(v, str) else v
        except ValueError:
            raise ArbiterError(f"lane {lane.name}: {k}={v} not among "
                               f"{list(choices[k])}") from None
    config = space.complete(values)
    problem = space.violation(config)
    if problem:
        raise ArbiterError(f"lane {lane.name}: config {config} is invalid: {problem}")
    return config


def _split(item: str) -> tuple[str, str]:
    k, sep, v = item.partition("=")
    if not sep or not k.strip():
        raise ArbiterError(f"--config expects K=V, got {item!r}")
    return k.strip(), v.strip()


def tune(spec: Any, **kw: Any) -> list[dict[str, Any]]:
    """Search lanes x configs for every region, record everything, declare winners.

    See `arbiter._tune.tune` for the keywords (db, trials, lanes, budget, timeout, seed,
    sampler, ...). Returns one row per region.
    """
    from ._collector import hold, release

    hold()  # until the sweep has frozen what its start-up made (`_tune`)
    try:
        return _tune_leased(spec, kw)
    finally:
        release()


def _tune_leased(spec: Any, kw: dict[str, Any]) -> list[dict[str, Any]]:
    from ._fingerprint import fingerprint_soon
    from ._worker import lease

    given = kw.pop("worker", None)  # the caller's own, started and closed by the caller
    # leased (kept from an earlier sweep, or started now) before `_tune` imports SQLAlchemy
    # and Optuna's samplers (~0.2 s): a new worker's own start-up (numpy, the oracle)
    # overlaps ours, and so do the fingerprint's compiler queries and the first candidates'
    # compiles
    timeout = kw.get("timeout", DEFAULT_TIMEOUT)
    with lease(timeout) if given is None else nullcontext(given) as worker:
        fingerprint_soon()
        todo = spec_regions(spec, kw.pop("regions", None))
        records = _import_soon(RECORDS_IMPORTS)
        # another sweep writing to the same SQLite file: this one waits before it compiles
        with one_sweep(kw.get("db") or settings().db):
            if given is None:
                _compile_defaults_early(worker, todo, kw)
            records.join()
            from ._tune import tune as _tune

            return _tune(todo, worker=worker, **kw)


# the records' libraries, most of `_tune`'s import (~0.2 s, 0.3 s on the H200 host); none of
# them imports arbiter
RECORDS_IMPORTS = ("sqlalchemy.orm", "sqlalchemy.dialects.sqlite")


def _import_soon(names: Sequence[str]) -> threading.Thread:
    """Import `names` in a thread: it runs while this one waits on the lanes' probe compiles
    (x86_c's, ~0.15 s on the H200 host, the first time). An import error is the importer's
    to report, later, in its own words."""

    def quietly() -> None:
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001, S110
                pass

    thread = threading.Thread(target=quietly, name="import-soon", daemon=True)
    thread.start()
    return thread


# regions whose defaults are named early: more compiles than a start-up hides (~0.2 s each)
EARLY_REGIONS = 8


def _compile_defaults_early(worker: Any, regions: list[Region], kw: dict[str, Any]) -> None:
    """Have the worker compile the sweep's CPU lane defaults, region after region, while this
    process starts up: the first region's are the sweep's first candidates, and the compiles
    go on into the next regions' until the first request. A hint: a mistake in the arguments
    is the sweep's to report, and a default measured before is a build-cache hit.

    The hint goes before the lanes' availability probes (x86_c compiles one, ~0.15 s on the
    H200 host): a lane that turns out unusable costs the worker a failed compile, no trial.
    The probes then run while the records' libraries import."""
    names = kw.get("lanes")
    try:
        lanes = _named(names)
        if not regions:
            return
        trials = kw.get("trials", DEFAULT_TRIALS)
        defaults = []  # a budget below the defaults: which ones it measures is the plan's
        if len(lanes) <= trials:
            defaults = [(region, ln.name, ln.space(region).default)
                        for region in regions[:EARLY_REGIONS] for ln in lanes
                        if ln.platform is Platform.CPU and ln.applies_to(region) is None]
            first = sum(1 for r, *_ in defaults if r is regions[0])
            defaults[first:first] = _listed_first(regions[0], lanes, trials, kw.get("seed"))
        worker.build_early(defaults, cases=_first_cases(regions[0]))
        usable_lanes(names)  # the probes, cached for the sweep
    except Exception:  # noqa: BLE001  the sweep reports it, in its own words
        return


# configs named after the defaults of a first region whose spaces are listed whole: more than
# the compiles a start-up hides
EARLY_LISTED = 4


def _listed_first(region: Region, lanes: list[Lane], trials: int,
                  seed: int | None) -> list[tuple[Region, str, Config]]:
    """For a first region whose every config will be measured (its lanes' spaces, counted
    without their rules, fit the trial budget: nothing is sampled), a few of its CPU lanes'
    configs besides their defaults, drawn at random (`seed`). They compile after the
    defaults while the sweep starts up, and the sweep measures them next (`named_early`):
    a single region's start-up otherwise outlasts its one default's compile."""
    lanes = [ln for ln in lanes if ln.applies_to(region) is None]
    spaces = {ln.name: ln.space(region) for ln in lanes}
    sizes = [s.combinations() for s in spaces.values()]
    if sum(sizes) > trials or max(sizes, default=0) > ENUMERABLE:
        return []
    listed = [(ln.name, c) for ln in lanes if ln.platform is Platform.CPU
              for c in spaces[ln.name].configs() if c != spaces[ln.name].default]
    picked = random.Random(seed).sample(listed, min(EARLY_LISTED, len(listed)))
    return [(region, name, config) for name, config in picked]


# Regions up to this many input and output elements have their inputs and references made
# during the sweep's start-up (~35 ms for 1.5M on 2 cores). A larger region's take seconds
# and GBs, for nothing when it turns out to be tuned already.
EARLY_CASES_MAX = 1 << 22


def _first_cases(region: Region) -> tuple[Region, list[int]] | None:
    """The first region and the seeds its checks will use, for the worker to make their
    inputs and references while this process starts up; None for a large region."""
    from ._check import fresh_seeds

    try:
        shapes = [*input_shapes(region).values(), output_shape(region)]
    except Exception:  # noqa: BLE001  not a region: the sweep says so
        return None
    small = sum(math.prod(s) for s in shapes) <= EARLY_CASES_MAX
    return (region, fresh_seeds(2)) if small else None


def best(region: Region, *, budget: float | None = None, db: str | None = None) -> dict[str, Any]:
    """The recorded winner for `region` on this machine (answered from the records)."""
    from ._tune import best as _best

    if not isinstance(region, get_args(Region)):
        raise ArbiterError(f"best() takes a region (e.g. load_spec(path).get(name)), got "
                           f"{region!r}")

    return _best(region, budget=budget, db=db)


def _recorded(region: Region, db: str | None) -> tuple[str, dict[str, Any]]:
    w = best(region, db=db)
    return w["lane"], w["config"]


def run(
    region: Region,
    *,
    lane: str | None = None,
    config: Mapping[str, Any] | Sequence[str] | None = None,
    db: str | None = None,
    **arrays: np.ndarray,
) -> np.ndarray:
    """Compute `region` on `arrays` with one lane (the default config unless given); with no
    lane, the recorded winner's lane and config for this machine."""
    if lane is None:
        if config:
            raise ArbiterError("a config needs a lane; without one the recorded winner runs")
        lane, config = _recorded(region, db)
    ln = get_lane(lane)
    av = ln.available()
    if not av:
        raise LaneError(f"lane {lane!r} is not available here: {av.reason}")
    why = ln.applies_to(region)
    if why is not None:
        raise LaneError(f"lane {lane!r} does not apply to {region.label}: {why}")
    cfg = parse_config(ln, region, config or {})
    inputs = validate_inputs(region, arrays)
    built = build_candidate(ln, region, cfg)
    if isinstance(built, Measurement):
        raise ArbiterError(f"lane {lane!r} could not build {region.label}: "
                           f"{built.status.value}: {built.log.strip().splitlines()[0]}")
    runner = ln.runner(built, region)
    try:
        out = np.empty(output_shape(region), np.float32)
        runner.run(inputs, out)
    finally:
        runner.close()
    return out


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.exists():
        return {}
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded as z:
                return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise InputError(f"{path}: not a readable .npz file ({e})") from None
    raise InputError(f"{path}: one array (.npy), not an .npz file of named arrays")


def run_npz(
    spec: str | Path | Spec, region_name: str, *, lane: str | None, config: Sequence[str],
    inputs: str, output: str, seed: int = 0, db: str | None = None,
) -> dict[str, Any]:
    """`arbiter run`: inputs from an npz (missing ones drawn and saved), result to an npz.
    Without a lane the recorded winner runs."""
    region = _spec(spec).get(region_name)
    recorded = lane is None
    if lane is None:
        if config:
            raise ArbiterError("--config needs --lane; without one the recorded winner runs")
        lane, winner = _recorded(region, db)
        config = [f"{k}={v}" for k, v in winner.items()]
    in_path, out_path = Path(inputs), Path(output)
    for path, what in ((in_path, "inputs"), (out_path, "output")):
        if path.suffix != ".npz":  # (np.savez would add one to a name without it)
            raise SpecError(f"{path}: {what} file must end in .npz")
        written = path is out_path or not path.exists()  # (drawn inputs are saved)
        if written and (not path.parent.is_dir() or not os.access(path.parent, os.W_OK)):
            raise InputError(f"{path}: its directory does not exist or cannot be written")
    arrays = _load_npz(in_path)
    # "out": the output file of an earlier run, given as the inputs of this one
    unknown = sorted(set(arrays) - set(input_shapes(region)) - {"out"})
    if unknown:
        raise InputError(f"{in_path}: {', '.join(unknown)} not among the inputs of "
                         f"{region.label} ({', '.join(input_shapes(region))})")
    drawn = random_inputs(region, seed)
    missing = [n for n in input_shapes(region) if n not in arrays]
    for n in missing:
        arrays[n] = drawn[n]
    # Any: the stubs would let a name fill run()'s lane/db or savez's allow_pickle; input names
    # (A, B, X, bias, residual, q, k, v) never do
    named: dict[str, Any] = {n: arrays[n] for n in input_shapes(region)}
    out = run(region, lane=lane, config=config, **named)
    try:
        if missing and not in_path.exists():
            np.savez(in_path, **named)
        np.savez(out_path, out=out, **named)
    except OSError as e:
        raise InputError(f"{e.filename or out_path}: cannot be written ({e.strerror or e})") \
            from None
    ln = get_lane(lane)
    return {"lane": lane, "shape": out.shape, "drawn": missing, "recorded": recorded,
            "config": str(parse_config(ln, region, config))}
