"""The records as pandas DataFrames: trials, winners, best per lane, per-region summaries.

Latencies are milliseconds here (the store keeps seconds): the decision's estimator (median
over rounds of each round's fastest call) with its 95% interval, never the plain sample median,
so a number here is the number `arbiter tune` and `arbiter best` print. Every function takes a
database URL (SQLite or any SQLAlchemy URL) and reads through the store's one session helper.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from sqlalchemy import select
from sqlalchemy.orm import aliased

from .._errors import StoreError
from ..choose import VENDOR_LANES
from ..records import (
    FINAL,
    CandidateModel,
    CeilingModel,
    EnvironmentModel,
    LaneModel,
    MeasurementModel,
    RegionModel,
    WinnerModel,
    require_current,
    session_scope,
)
from ._work import region_from_canonical, work

__all__ = [
    "TRIAL_COLUMNS",
    "VENDOR_LANES",
    "best_per_lane",
    "ceilings",
    "environment_label",
    "open_records",
    "summary",
    "trials",
    "winners",
]

TRIAL_COLUMNS = [
    "region",
    "region_key",
    "kind",
    "dtype",
    "environment",
    "lane",
    "platform",
    "config",
    "precision",
    "status",
    "latency_ms",
    "latency_low_ms",
    "latency_high_ms",
    "spread_ms",
    "unstable",
    "load",
    "rel_error",
    "max_abs",
    "budget",
    "timing_method",
    "compile_s",
    "measurement",
    "trial",
    "measured_at",
    "fingerprint",
    "candidate_id",
]


def _dtype(canonical: str) -> str:
    """A region's storage dtype from its stored canonical form (f32 when it names none)."""
    return str(json.loads(canonical).get("dtype", "f32"))


def _is_vendor(lane: str) -> bool:
    return lane in VENDOR_LANES


def environment_label(details: str | dict) -> str:
    """A short human name: the GPU when one was present, else the CPU model."""
    d = json.loads(details) if isinstance(details, str) else details
    gpu = d.get("gpu") or {}
    for name in ("rocm", "nvidia"):
        if gpu.get(name):
            return str(gpu[name][0]).split(",")[0].strip()
    return str(d.get("cpu") or "unknown machine")


def open_records(url: str) -> None:
    """Refuse, in one clear line, a database that is missing, empty or at another schema."""
    if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.is_file():
            raise StoreError(
                f"no database at {path} (run `arbiter tune SPEC` first, "
                f"or pass --db / set ARBITER_DB)"
            )
    require_current(url, create=False)
    with session_scope(url) as s:
        if s.scalars(select(MeasurementModel.id).limit(1)).first() is None:
            raise StoreError(
                f"database {url} holds no measurements yet "
                f"(run `arbiter tune SPEC --db {url}` first)"
            )


def _config_text(config: dict) -> str:
    shown = {k: v for k, v in config.items() if k != "precision"}
    return " ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "(default)"


def _ms(seconds: float | None) -> float:
    return float("nan") if seconds is None else seconds * 1e3


def trials(url: str, *, measurements: tuple[str, ...] | None = ("sweep",)) -> pd.DataFrame:
    """One row per measurement (default: the search's own, one per candidate).

    `trial` numbers the measurements of one (region, environment) in the order they were
    recorded, from 1: the x axis of a convergence plot. `measurements=None` keeps the
    finalists' re-timings and re-verifications too (column `measurement`).

    Only the columns shown are read (not the samples, not the logs), and what many rows share
    (a candidate's config, a region, a machine) is worked out once: the frame costs what its
    rows do, however many machines the records hold.
    """
    m, c = MeasurementModel, CandidateModel
    q = (
        select(m.kind, m.status, m.latency, m.latency_low, m.latency_high, m.spread, m.unstable,
               m.load, m.rel_error, m.max_abs, m.budget, m.timing_method, m.compile_seconds,
               m.created_at, c.id, c.config, c.region_id, c.environment_id, c.lane_id)
        .join(c, m.candidate_id == c.id)
        .order_by(m.created_at, m.id)
    )
    if measurements is not None:
        q = q.where(m.kind.in_(measurements))
    columns: dict[str, list] = {name: [] for name in TRIAL_COLUMNS}
    with session_scope(url) as s:
        regions = {i: (name or key, key, kind, _dtype(canon)) for i, key, name, kind, canon in
                   s.execute(select(RegionModel.id, RegionModel.key, RegionModel.name,
                                    RegionModel.kind, RegionModel.canonical))}
        envs = {i: (environment_label(details), fp) for i, fp, details in
                s.execute(select(EnvironmentModel.id, EnvironmentModel.fingerprint,
                                 EnvironmentModel.details))}
        lanes = {i: (name, platform) for i, name, platform in
                 s.execute(select(LaneModel.id, LaneModel.name, LaneModel.platform))}
        configs: dict[str, tuple[str, str]] = {}
        for (kind, status, latency, low, high, spread, unstable, load, rel, max_abs, budget,
             method, compile_s, at, cand, config, region_id, env_id, lane_id) in (
                s.connection().execute(q)):  # (rows as the driver gives them, one at a time)
            shown = configs.get(config)
            if shown is None:
                values = json.loads(config)
                shown = configs[config] = (_config_text(values),
                                           str(values.get("precision", "f32")))
            region, key, region_kind, dtype = regions[region_id]
            environment, fingerprint = envs[env_id]
            lane, platform = lanes[lane_id]
            for name, value in zip(TRIAL_COLUMNS, (
                    region, key, region_kind, dtype, environment, lane, platform, shown[0],
                    shown[1], status, _ms(latency), _ms(low), _ms(high), _ms(spread),
                    bool(unstable), load, rel, max_abs, budget, method, compile_s, kind, 0, at,
                    fingerprint, cand)):
                columns[name].append(value)
    df = pd.DataFrame(columns, columns=TRIAL_COLUMNS)
    df["rel_error"] = df["rel_error"].astype(float)
    df["max_abs"] = df["max_abs"].astype(float)
    df["load"] = df["load"].astype(float)
    df["trial"] = df.groupby(["region_key", "fingerprint"]).cumcount() + 1
    return df


WINNER_COLUMNS = [
    "region",
    "region_key",
    "environment",
    "budget",
    "lane",
    "platform",
    "config",
    "precision",
    "latency_ms",
    "latency_low_ms",
    "latency_high_ms",
    "spread_ms",
    "rel_error",
    "verdict",
    "tie",
    "unstable",
    "load",
    "runner_up",
    "runner_up_config",
    "margin_ms",
    "ratio",
    "ratio_low",
    "ratio_high",
    "declared_at",
    "fingerprint",
    "candidate_id",
]


def winners(url: str) -> pd.DataFrame:
    """Declared winners, one row per (region, environment, budget), newest first.

    `latency_ms` is the winner's own from the finalists' interleaved re-timing, the number
    `arbiter tune` and `arbiter best` print; `ratio` is runner-up / winner over paired rounds.
    """
    runner = aliased(CandidateModel)
    runner_lane = aliased(LaneModel)
    q = (
        select(
            WinnerModel,
            CandidateModel,
            LaneModel,
            RegionModel,
            EnvironmentModel,
            runner,
            runner_lane,
        )
        .join(CandidateModel, WinnerModel.candidate_id == CandidateModel.id)
        .join(LaneModel, CandidateModel.lane_id == LaneModel.id)
        .join(RegionModel, WinnerModel.region_id == RegionModel.id)
        .join(EnvironmentModel, WinnerModel.environment_id == EnvironmentModel.id)
        .outerjoin(runner, WinnerModel.runner_up_id == runner.id)
        .outerjoin(runner_lane, runner.lane_id == runner_lane.id)
        .order_by(WinnerModel.created_at.desc(), WinnerModel.id.desc())
    )
    rows = []
    with session_scope(url) as s:
        for w, c, lane, r, e, ru, ru_lane in s.execute(q):
            config = c.config_dict()
            rows.append(
                {
                    "region": r.name or r.key,
                    "region_key": r.key,
                    "environment": environment_label(e.details),
                    "budget": w.budget,
                    "lane": lane.name,
                    "platform": lane.platform,
                    "config": _config_text(config),
                    "precision": config.get("precision", "f32"),
                    "latency_ms": _ms(w.latency),
                    "latency_low_ms": _ms(w.latency_low),
                    "latency_high_ms": _ms(w.latency_high),
                    "spread_ms": _ms(w.spread),
                    "rel_error": w.rel_error,
                    "verdict": w.verdict,
                    "tie": bool(w.tie),
                    "unstable": bool(w.unstable),
                    "load": w.load,
                    "runner_up": ru_lane.name if ru_lane is not None else None,
                    "runner_up_config": _config_text(ru.config_dict()) if ru is not None else None,
                    "margin_ms": _ms(w.margin),
                    "ratio": w.ratio,
                    "ratio_low": w.ratio_low,
                    "ratio_high": w.ratio_high,
                    "declared_at": w.created_at,
                    "fingerprint": e.fingerprint,
                    "candidate_id": c.id,
                }
            )
    df = pd.DataFrame(rows, columns=WINNER_COLUMNS)
    for col in ("rel_error", "load", "ratio", "ratio_low", "ratio_high"):
        df[col] = df[col].astype(float)
    return df


def best_per_lane(trial_frame: pd.DataFrame) -> pd.DataFrame:
    """Each lane's fastest passing config per (region, environment), by its sweep latency."""
    ok = trial_frame[(trial_frame["status"] == "ok") & trial_frame["latency_ms"].notna()]
    idx = ok.groupby(["region_key", "fingerprint", "lane"])["latency_ms"].idxmin()
    best = ok.loc[idx].sort_values(["region", "environment", "latency_ms"])
    best = best.assign(vendor=[_is_vendor(n) for n in best["lane"]])
    cols = [
        "region",
        "region_key",
        "environment",
        "fingerprint",
        "lane",
        "platform",
        "vendor",
        "config",
        "precision",
        "latency_ms",
        "latency_low_ms",
        "latency_high_ms",
        "spread_ms",
        "unstable",
        "rel_error",
        "budget",
        "candidate_id",
    ]
    return best[cols].reset_index(drop=True)


# summary.vendor_timing: where the vendor side of a speed-up was measured. In the winner's
# own interleaved rounds both sides saw the same machine state; a sweep number did not.
SAME_ROUNDS, SWEEP_TIMING = "same rounds", "sweep"

SUMMARY_COLUMNS = [
    "region",
    "region_key",
    "kind",
    "dtype",
    "environment",
    "trials",
    "ok",
    "lanes",
    "budget",
    "winner",
    "platform",
    "precision",
    "winner_config",
    "winner_ms",
    "winner_low_ms",
    "winner_high_ms",
    "winner_rel_error",
    "declared",
    "verdict",
    "tie",
    "unstable",
    "vendor",
    "vendor_ms",
    "vendor_timing",
    "speedup",
    "flops",
    "bytes",
    "gflops",
    "gbytes_s",
    "fingerprint",
]


def _vendor(
    lanes_best: list[dict], finals: dict[int, list[dict]] | None, declared_at: Any,
    platform: str | None,
) -> dict | None:
    """The vendor lane a winner is compared with (one on its platform if any, the fastest),
    at its finalist's latest re-timing up to the declaration when `finals` (each candidate's
    re-timings, in order) holds one that passed, else its sweep."""
    options = []
    for v in lanes_best:
        if not v["vendor"]:
            continue
        option = {
            "lane": v["lane"],
            "platform": v["platform"],
            "vendor_ms": v["latency_ms"],
            "vendor_timing": SWEEP_TIMING,
        }
        # its finals were recorded before the declaration; later ones belong to no winner
        mine = [f for f in (finals or {}).get(v["candidate_id"], ())
                if f["measured_at"] <= declared_at]
        if mine:
            last = mine[-1]  # trials() lists measurements in the order they were taken
            if last["status"] == "ok" and pd.notna(last["latency_ms"]):
                option.update(vendor_ms=last["latency_ms"], vendor_timing=SAME_ROUNDS)
        options.append(option)
    if not options:
        return None
    same = [o for o in options if o["platform"] == platform] or options
    return min(same, key=lambda o: o["vendor_ms"])


def _by_group(frame: pd.DataFrame, key: str | tuple[str, ...]) -> dict[Any, list[dict]]:
    """The frame's rows as dicts, in order, by `key` (a column, or several)."""
    out: dict[Any, list[dict]] = {}
    for row in frame.to_dict("records"):
        k = tuple(row[c] for c in key) if isinstance(key, tuple) else row[key]
        out.setdefault(k, []).append(row)
    return out


def summary(
    url: str, trial_frame: pd.DataFrame | None = None, winner_frame: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per (region, environment): winner, vendor lane, speed-up, achieved rates.

    A declared winner's latency and interval are its `winners` row's, the numbers `arbiter
    best` prints. The finals always include each vendor lane's fastest, so the vendor's
    latency is taken from the same interleaved rounds where it was re-timed there
    (`vendor_timing` "same rounds"), else from its sweep ("sweep"). `declared` is False when no
    winner was recorded yet: the fastest passing sweep trial stands in, against the vendor's
    sweep. Each (region, environment) is looked up, never searched for: the cost follows the
    rows, not rows times regions times machines.
    """
    t = trials(url) if trial_frame is None else trial_frame
    w = winners(url) if winner_frame is None else winner_frame
    group = ("region_key", "fingerprint")
    finals = _by_group(trials(url, measurements=(FINAL,)), "candidate_id")
    best = _by_group(best_per_lane(t), group)
    # newest first: the first of each (region, environment) is its declaration
    declared = {(d["region_key"], d["fingerprint"]): d
                for d in w.drop_duplicates(list(group)).to_dict("records")}
    with session_scope(url) as s:
        canon = dict(s.execute(select(RegionModel.key, RegionModel.canonical)).all())
    counted = (
        t.assign(_ok=t["status"] == "ok")
        .groupby(list(group), sort=False)
        .agg(region=("region", "first"), kind=("kind", "first"), dtype=("dtype", "first"),
             environment=("environment", "first"), trials=("status", "size"),
             ok=("_ok", "sum"), lanes=("lane", "nunique"), budget=("budget", "last"))
        .reset_index()
    )
    rows = []
    for row in counted.to_dict("records"):
        row.update(ok=int(row["ok"]), declared=False, tie=False, unstable=False)
        key = (row["region_key"], row["fingerprint"])
        lanes_best = best.get(key, [])
        d = declared.get(key)
        if d is not None:
            row.update(
                budget=d["budget"],
                winner=d["lane"],
                winner_config=d["config"],
                platform=d["platform"],
                precision=d["precision"],
                winner_ms=d["latency_ms"],
                winner_low_ms=d["latency_low_ms"],
                winner_high_ms=d["latency_high_ms"],
                winner_rel_error=d["rel_error"],
                verdict=d["verdict"],
                declared=True,
                tie=bool(d["tie"]),
                unstable=bool(d["unstable"]),
            )
        elif lanes_best:
            win = lanes_best[0]
            row.update(
                winner=win["lane"],
                winner_config=win["config"],
                platform=win["platform"],
                precision=win["precision"],
                winner_ms=win["latency_ms"],
                winner_low_ms=win["latency_low_ms"],
                winner_high_ms=win["latency_high_ms"],
                winner_rel_error=win["rel_error"],
                unstable=bool(win["unstable"]),
            )
        vendor = _vendor(lanes_best, finals if d is not None else None,
                         None if d is None else d["declared_at"], row.get("platform"))
        if row.get("winner") is not None and vendor is not None:
            row.update(
                vendor=vendor["lane"],
                vendor_ms=vendor["vendor_ms"],
                vendor_timing=vendor["vendor_timing"],
            )
        rows.append(row)
    df = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    df["speedup"] = df["vendor_ms"] / df["winner_ms"]
    works = {k: work(region_from_canonical(canon[k])) for k in set(df["region_key"])}
    df["flops"] = [works[k].flops for k in df["region_key"]]
    df["bytes"] = [works[k].bytes for k in df["region_key"]]
    seconds = df["winner_ms"] * 1e-3
    df["gflops"] = (df["flops"] / seconds / 1e9).where(df["flops"] > 0)
    df["gbytes_s"] = df["bytes"] / seconds / 1e9
    return df.sort_values(["environment", "region"]).reset_index(drop=True)


def ceilings(url: str) -> pd.DataFrame:
    """Measured ceilings per environment (value in the stored unit: B/s or FLOP/s)."""
    q = (
        select(CeilingModel, EnvironmentModel)
        .join(EnvironmentModel, CeilingModel.environment_id == EnvironmentModel.id)
        .order_by(EnvironmentModel.id, CeilingModel.name)
    )
    with session_scope(url) as s:
        rows = [
            {
                "environment": environment_label(e.details),
                "fingerprint": e.fingerprint,
                "name": c.name,
                "value": c.value,
                "unit": c.unit,
                "method": c.method,
                "measured_at": c.measured_at,
            }
            for c, e in s.execute(q)
        ]
    return pd.DataFrame(
        rows,
        columns=["environment", "fingerprint", "name", "value", "unit", "method", "measured_at"],
    )
