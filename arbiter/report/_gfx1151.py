"""The gfx1151 view: a model of each declared winner on Strix Halo, not a measurement.

For every winner: its arithmetic intensity (the region's FLOPs over its minimum bytes, as
`work` counts them) against gfx1151's published roofs (REFERENCE_MODELS["gfx1151"]), the
roofline's floor on its time there, and the waves per SIMD its gfx1151 build allows. The
occupancy comes from the candidate's records when it was built for a gfx target (ROCm
machines record the code object's resources); otherwise, for a GPU lane whose code path here
is ROCm's, from a device-only gfx1151 compile of the same config (cached). Nothing here ran
on a gfx1151.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
from sqlalchemy import select

from ..lane import Platform, get_lane
from ..records import (
    CandidateModel,
    LaneModel,
    MeasurementModel,
    RegionModel,
    WinnerModel,
    session_scope,
)
from ._work import REFERENCE_MODELS, region_from_canonical, work

__all__ = ["GFX1151_HOW", "GFX1151_TITLE", "gfx1151_view"]

GFX1151_TITLE = "gfx1151 model (not a measurement)"
GFX1151_HOW = (
    "A model, not a measurement: no gfx1151 ran these numbers. Intensity is the region's FLOPs "
    "over the least bytes it must move; the roof is gfx1151's published peak for the winner's "
    "compute type (WMMA f16/bf16 59.4 TFLOP/s, f32 29.7) and LPDDR5X 256 GB/s, and the floor "
    "is the time that roofline allows (max of FLOPs/peak, bytes/bandwidth). Waves per SIMD are "
    "what the winner's gfx1151 code object allows (VGPRs, LDS; of 16): recorded from a gfx "
    "build, or compiled for gfx1151 here; 0 means the config cannot launch there."
)
COLUMNS = ["lane", "region", "config", "compute", "intensity", "ridge", "bound",
           "roof_tflops", "floor_ms", "waves_per_simd", "vgprs", "lds_bytes", "occupancy_from"]


def _compute_type(config: dict, dtype: str) -> str:
    """What the winner multiplies in: its precision tunable, else its storage when 16-bit
    (vendor lanes compute in it), else f32."""
    precision = config.get("precision")
    return precision if precision in ("f16", "bf16", "f32") else (
        dtype if dtype in ("f16", "bf16") else "f32")


def _built_resources(lane_name: str, region: Any, config: dict) -> tuple[dict | None, str]:
    """A gfx1151 compile of the winner's config, when its lane is a GPU lane whose code path
    here is ROCm's; else why not."""
    from ..lanes._gpu.lane import GpuLane

    try:
        lane = get_lane(lane_name)
    except Exception:  # a lane not installed here
        return None, "lane not installed here"
    if not isinstance(lane, GpuLane):
        return None, "not a GPU lane"
    if lane.platform is not Platform.ROCM:
        return None, "no gfx code path on this machine (CUDA)"
    from ..lane import Config
    from ..lanes._gpu.resources import candidate_resources

    space = lane.space(region)
    cfg = Config.of(config)
    why = space.violation(cfg)
    if why is not None:
        return {"waves_per_simd": 0, "vgprs": None, "lds": None}, f"not admitted: {why}"
    try:
        return candidate_resources(lane, region, cfg, "gfx1151"), "gfx1151 compile"
    except Exception as e:  # a compiler missing or failing: the view says so and goes on
        return None, f"compile failed: {str(e).splitlines()[0]}"


def gfx1151_view(url: str, *, compile_missing: bool = True) -> pd.DataFrame:
    """One row per declared winner (newest first): its place on gfx1151's roofline and the
    occupancy of its gfx1151 build. `compile_missing=False` only reads the records."""
    model = REFERENCE_MODELS["gfx1151"]
    q = (select(WinnerModel, CandidateModel, LaneModel, RegionModel)
         .join(CandidateModel, WinnerModel.candidate_id == CandidateModel.id)
         .join(LaneModel, CandidateModel.lane_id == LaneModel.id)
         .join(RegionModel, WinnerModel.region_id == RegionModel.id)
         .order_by(WinnerModel.created_at.desc(), WinnerModel.id.desc()))
    rows = []
    with session_scope(url) as s:
        for _, c, lane, r in s.execute(q):
            recorded = s.scalars(
                select(MeasurementModel.resources)
                .where(MeasurementModel.candidate_id == c.id,
                       MeasurementModel.resources.is_not(None))
                .order_by(MeasurementModel.id.desc()).limit(1)).first()
            rows.append((r.name or r.key, lane.name, c.config_dict(), r.canonical, recorded))
    out = []
    for name, lane_name, config, canonical, recorded in rows:
        region = region_from_canonical(canonical)
        wk = work(region)
        compute = _compute_type(config, region.dtype)
        peak = model.flops[compute]
        ridge = peak / model.bandwidth
        res, source = (json.loads(recorded), "records") if recorded else (None, "")
        if res is None:
            res, source = (_built_resources(lane_name, region, config) if compile_missing
                           else (None, "not recorded"))
        out.append({
            "region": name, "lane": lane_name,
            "config": " ".join(f"{k}={v}" for k, v in sorted(config.items())) or "(default)",
            "compute": compute, "intensity": wk.intensity, "ridge": ridge,
            "bound": "compute" if wk.intensity >= ridge else "memory",
            "roof_tflops": min(peak, wk.intensity * model.bandwidth) / 1e12,
            "floor_ms": max(wk.flops / peak, wk.bytes / model.bandwidth) * 1e3,
            "waves_per_simd": None if res is None else res.get("waves_per_simd"),
            "vgprs": None if res is None else res.get("vgprs"),
            "lds_bytes": None if res is None else res.get("lds"),
            "occupancy_from": source,
        })
    return pd.DataFrame(out, columns=COLUMNS)
