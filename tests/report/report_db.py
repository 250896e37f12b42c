"""Record stores with known contents for the report tests, written through the store's models."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import numpy as np
from sqlalchemy import select

from arbiter.lane import Config
from arbiter.records import (
    CandidateModel,
    CeilingModel,
    EnvironmentModel,
    LaneModel,
    MeasurementModel,
    RegionModel,
    WinnerModel,
    session_scope,
    upgrade,
)
from arbiter.region import FusedRegion, RowwiseRegion, load_spec

T0 = datetime(2026, 1, 1, 12, 0, 0)
FINGERPRINT = "f" * 16

MM = FusedRegion(64, 32, 16, epilogue=("bias", "relu"), name="mm_relu")
ROW = RowwiseRegion(8, 128, epilogue=("gelu",), name="row_gelu")


class _Lane:
    def __init__(self, name: str, platform: str = "cpu") -> None:
        self.name, self.version = name, "1"
        self.platform = type("P", (), {"value": platform})()


def _add(
    s,
    region,
    env,
    lane,
    config: dict,
    when: int,
    *,
    status="ok",
    ms=None,
    interval_ms=None,
    spread_ms=None,
    rel=None,
    max_abs=None,
    budget=1e-3,
    kind="sweep",
    unstable=False,
    load=None,
    median_ms=None,
) -> CandidateModel:
    """One measurement: latency `ms` within `interval_ms` (default: ms ± 5%); the plain
    `median_ms` (default: ms) is reference only and must never show up as a latency."""
    cfg = Config.of(config)
    reg = RegionModel.find_or_add(s, region)
    ln = LaneModel.find_or_add(s, lane)
    cand = s.scalars(
        select(CandidateModel).where(
            CandidateModel.region_id == reg.id,
            CandidateModel.environment_id == env.id,
            CandidateModel.lane_id == ln.id,
            CandidateModel.config_key == cfg.key,
        )
    ).first()
    if ms is not None and interval_ms is None:
        interval_ms = (ms * 0.95, ms * 1.05)
    if ms is not None and median_ms is None:
        median_ms = ms
    if cand is None:
        cand = CandidateModel(
            region_id=reg.id,
            environment_id=env.id,
            lane_id=ln.id,
            config_key=cfg.key,
            config=cfg.to_json(),
        )
        s.add(cand)
        s.flush()
    s.add(
        MeasurementModel(
            candidate_id=cand.id,
            kind=kind,
            status=status,
            budget=budget,
            rel_error=rel,
            max_abs=max_abs,
            latency=None if ms is None else ms * 1e-3,
            latency_low=None if ms is None else interval_ms[0] * 1e-3,
            latency_high=None if ms is None else interval_ms[1] * 1e-3,
            median=None if median_ms is None else median_ms * 1e-3,
            spread=None if spread_ms is None else spread_ms * 1e-3,
            unstable=unstable,
            load=load,
            samples=json.dumps([] if ms is None else [ms * 1e-3] * 3),
            timing_method="monotonic_ns" if ms is not None else "",
            compile_seconds=0.5,
            log="" if status == "ok" else f"{status} log",
            created_at=T0 + timedelta(seconds=when),
        )
    )
    s.flush()
    return cand


def known(url: str) -> None:
    """Two regions on one machine, values chosen so every frame cell is known exactly.

    mm_relu: numpy 2.0 ms (its plain median a bimodal 20 ms); x86_c 4x8 1.0 ms; x86_c 8x8
    wrong_result at 0.5 ms; x86_c 2x8 compile_failed. Finals, interleaved: x86_c 4x8 0.9 ms
    (0.88-0.93), numpy 1.8 ms; x86_c 4x8 declared the winner at 0.9 ms, faster than numpy by
    2.0x (1.9-2.1). row_gelu: numpy 0.4 ms, x86_c 0.1 ms (unstable); no winner declared yet.
    Ceilings 10 GB/s, 100 GFLOP/s.
    """
    upgrade(url)
    numpy_lane, c_lane = _Lane("numpy"), _Lane("x86_c")
    with session_scope(url) as s:
        env = EnvironmentModel.find_or_add(s, FINGERPRINT, {"cpu": "Test CPU", "gpu": {}})
        vendor = _add(
            s,
            MM,
            env,
            numpy_lane,
            {},
            1,
            ms=2.0,
            median_ms=20.0,
            spread_ms=0.1,
            rel=1e-7,
            max_abs=1e-6,
        )
        win = _add(
            s,
            MM,
            env,
            c_lane,
            {"tile": "4x8"},
            2,
            ms=1.0,
            spread_ms=0.05,
            rel=2e-7,
            max_abs=2e-6,
            load=0.25,
        )
        _add(
            s,
            MM,
            env,
            c_lane,
            {"tile": "8x8"},
            3,
            status="wrong_result",
            ms=0.5,
            spread_ms=0.01,
            rel=5e-2,
            max_abs=1.0,
        )
        _add(s, MM, env, c_lane, {"tile": "2x8"}, 4, status="compile_failed")
        _add(s, ROW, env, numpy_lane, {}, 5, ms=0.4, spread_ms=0.02, rel=1e-7, max_abs=1e-6)
        _add(
            s,
            ROW,
            env,
            c_lane,
            {},
            6,
            ms=0.1,
            spread_ms=0.03,
            rel=3e-7,
            max_abs=3e-6,
            unstable=True,
        )
        _add(
            s,
            MM,
            env,
            c_lane,
            {"tile": "4x8"},
            7,
            ms=0.9,
            interval_ms=(0.88, 0.93),
            spread_ms=0.04,
            rel=2e-7,
            kind="final",
        )
        _add(s, MM, env, numpy_lane, {}, 8, ms=1.8, spread_ms=0.1, rel=1e-7, kind="final")
        s.add(
            WinnerModel(
                region_id=win.region_id,
                environment_id=env.id,
                budget=1e-3,
                candidate_id=win.id,
                runner_up_id=vendor.id,
                latency=0.9e-3,
                latency_low=0.88e-3,
                latency_high=0.93e-3,
                spread=0.04e-3,
                rel_error=2e-7,
                margin=0.9e-3,
                ratio=2.0,
                ratio_low=1.9,
                ratio_high=2.1,
                verdict="faster",
                tie=False,
                unstable=False,
                load=0.05,
                created_at=T0 + timedelta(seconds=9),
            )
        )
        CeilingModel.put(s, env.id, "copy_bandwidth", 10e9, "B/s", "test")
        CeilingModel.put(s, env.id, "matmul_f32", 100e9, "FLOP/s", "test")


def rich(url: str, spec: str, seed: int = 0, trials: int = 24) -> None:
    """Every region of a spec with plausible, noisy numbers: for drawing figures quickly."""
    upgrade(url)
    rng = np.random.default_rng(seed)
    lanes = [_Lane("numpy"), _Lane("x86_c")]
    when = 0
    with session_scope(url) as s:
        env = EnvironmentModel.find_or_add(s, "e" * 16, {"cpu": "Synthetic CPU", "gpu": {}})
        for region in load_spec(spec):
            base = float(rng.uniform(0.05, 2.0))
            _add(s, region, env, lanes[0], {}, when, ms=base, spread_ms=base * 0.03, rel=1e-7)
            best = None
            for i in range(trials):
                when += 1
                ms = base * float(rng.uniform(0.25, 1.6)) * (1 + 1.5 / (i + 1))
                rel = float(10 ** rng.uniform(-7.5, -1.5))
                status = "ok" if rel <= 1e-3 else "wrong_result"
                cand = _add(
                    s,
                    region,
                    env,
                    lanes[1],
                    {"tile": f"{i}x8"},
                    when,
                    status=status,
                    ms=ms,
                    spread_ms=ms * 0.05,
                    rel=rel,
                )
                if status == "ok" and (best is None or ms < best[1]):
                    best = (cand, ms, rel)
            if best is not None:
                cand, ms, rel = best
                final = ms * 0.95  # the finals' interleaved re-timing of winner and vendor
                when += 1
                _add(
                    s,
                    region,
                    env,
                    lanes[1],
                    {"tile": cand.config_dict()["tile"]},
                    when,
                    ms=final,
                    spread_ms=final * 0.05,
                    rel=rel,
                    kind="final",
                )
                _add(s, region, env, lanes[0], {}, when, ms=base * 0.97, rel=1e-7, kind="final")
                s.add(
                    WinnerModel(
                        region_id=cand.region_id,
                        environment_id=env.id,
                        budget=1e-3,
                        candidate_id=cand.id,
                        latency=final * 1e-3,
                        latency_low=final * 0.97e-3,
                        latency_high=final * 1.04e-3,
                        spread=final * 5e-5,
                        rel_error=rel,
                        margin=None,
                        verdict="faster",
                        tie=False,
                        unstable=bool(rng.uniform() < 0.3),
                    )
                )
        CeilingModel.put(s, env.id, "copy_bandwidth", 20e9, "B/s", "synthetic")
        CeilingModel.put(s, env.id, "matmul_f32", 80e9, "FLOP/s", "synthetic")
