"""The report's gfx1151 view: a model of each winner on gfx1151 (intensity against its roofs,
waves per SIMD of its gfx1151 build), labelled as a model on the page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from arbiter.lanes._gpu.detect import gpu_platform, toolchain
from sqlalchemy import select

from arbiter.lane import Platform
from arbiter.records import MeasurementModel, WinnerModel, session_scope
from arbiter.region import FusedRegion
from arbiter.report import gfx1151_view, write_report

from . import report_db

BIG = FusedRegion(2048, 2048, 2048, epilogue=("gelu",), dtype="bf16", name="mm_big")
WMMA = {"block_k": 32, "block_m": 64, "block_n": 64, "group_m": 8, "precision": "bf16",
        "stages": 2, "staging": "inline", "threads": 128, "warp_m": 32, "warp_n": 32}
RECORDED = {"arch": "gfx1151", "vgprs": 133, "sgprs": 24, "lds": 18432, "scratch": 0,
            "spills": 0, "dynamic_stack": False, "waves_per_simd": 10, "kernels": []}


def _declare(s, env_id: int, cand) -> None:
    s.add(WinnerModel(region_id=cand.region_id, environment_id=env_id, budget=1e-3,
                      candidate_id=cand.id, latency=1e-3, verdict="faster", tie=False,
                      created_at=report_db.T0))


@pytest.fixture
def url(tmp_path: Path) -> str:
    """The known store plus a bf16 wmma_gemm winner whose gfx build recorded its resources."""
    url = f"sqlite:///{tmp_path / 'g.db'}"
    report_db.known(url)
    with session_scope(url) as s:
        env_id = s.scalars(select(WinnerModel.environment_id)).first()
        from arbiter.records import EnvironmentModel

        env = s.get(EnvironmentModel, env_id)
        cand = report_db._add(s, BIG, env, report_db._Lane("wmma_gemm", "rocm"), WMMA, 50,
                              ms=1.0)
        m = s.scalars(select(MeasurementModel).where(MeasurementModel.candidate_id == cand.id)
                      ).one()
        m.resources = json.dumps(RECORDED)
        _declare(s, env_id, cand)
    return url


def test_each_winner_against_the_gfx1151_roofs(url: str) -> None:
    view = gfx1151_view(url, compile_missing=False).set_index("region")
    big = view.loc["mm_big"]
    flops, nbytes = 2 * 2048**3, 2 * 3 * 2048 * 2048  # bf16 A, B and the output
    assert big["intensity"] == pytest.approx(flops / nbytes)
    assert big["compute"] == "bf16" and big["bound"] == "compute"
    assert big["ridge"] == pytest.approx(59.4e12 / 256e9)
    assert big["floor_ms"] == pytest.approx(flops / 59.4e12 * 1e3)
    assert (big["waves_per_simd"], big["vgprs"], big["occupancy_from"]) == (10, 133, "records")
    small = view.loc["mm_relu"]  # x86_c, f32: memory-bound, no gfx build
    assert small["compute"] == "f32" and small["bound"] == "memory"
    assert small["floor_ms"] == pytest.approx(small["intensity"] and
                                              (2 * 64 * 32 * 16 / small["intensity"]) / 256e9 * 1e3)
    assert pd_isna(small["waves_per_simd"]) and small["occupancy_from"] == "not recorded"


def pd_isna(v) -> bool:
    return v is None or v != v


@pytest.mark.skipif(toolchain().clang is None or gpu_platform() is not Platform.ROCM,
                    reason="needs clang++ for gfx1151 and the lanes' ROCm code path")
def test_an_unrecorded_gpu_winner_is_compiled_for_gfx1151(url: str) -> None:
    with session_scope(url) as s:
        for m in s.scalars(select(MeasurementModel).where(MeasurementModel.resources.is_not(None))):
            m.resources = None
    big = gfx1151_view(url).set_index("region").loc["mm_big"]
    assert big["occupancy_from"] == "gfx1151 compile"
    assert 1 <= big["waves_per_simd"] <= 16 and big["vgprs"] > 0 and big["lds_bytes"] > 0


def test_the_page_labels_it_a_model(url: str, tmp_path: Path) -> None:
    for fmt in ("md", "html"):
        page = write_report(url, tmp_path / fmt, fmt=fmt)["page"].read_text()
        assert "gfx1151 model (not a measurement)" in page and "mm_big" in page
