"""hip_scalar's generic f32 attention (one query row per warp): compile gate here, oracle on GPU."""

from __future__ import annotations

import secrets

import pytest
from arbiter.lanes._gpu.build import device_asm, isa_resources
from arbiter.lanes._gpu.detect import toolchain
from arbiter.lanes.hip_scalar import lane

from arbiter.check import verify
from arbiter.lane import Platform, Status
from arbiter.measure import Measurement, build_candidate
from arbiter.region import AttentionRegion

REGIONS = [
    AttentionRegion(1, 2, 37, 64, name="odd", seq_k=53),
    AttentionRegion(1, 2, 90, 32, name="causal_q_gt_k", seq_k=37, causal=True),
    AttentionRegion(2, 1, 33, 128, name="causal_q_lt_k", seq_k=301, causal=True),
    AttentionRegion(1, 3, 20, 48, name="d48_scale", seq_k=7, scale=1.7),
]


@pytest.mark.skipif(toolchain().clang is None or toolchain().nvcc is None,
                    reason="needs clang++-19 (gfx ISA) and nvcc (PTX)")
def test_builds_for_gfx1151_and_sm90() -> None:
    for region in REGIONS:
        src = lane.emit(region, lane.space(region).default)
        res = isa_resources(device_asm(src.text, Platform.ROCM, "gfx1151"))["attention_rows"]
        assert res["scratch"] == 0 and res["vgpr_spills"] == 0, res
        assert "shfl.sync" in device_asm(src.text, Platform.CUDA, "sm_90")


@pytest.mark.gpu
@pytest.mark.parametrize("warps", [2, 8])
@pytest.mark.parametrize("region", REGIONS, ids=[r.name for r in REGIONS])
def test_matches_oracle(region, warps) -> None:
    av = lane.available()
    if not av:
        pytest.skip(f"hip_scalar needs a GPU: {av.reason}")
    assert lane.applies_to(region) is None
    built = build_candidate(lane, region, lane.space(region).complete({"warps": warps}))
    assert not isinstance(built, Measurement), built.log
    runner = lane.runner(built, region)
    try:
        verdict, log = verify(runner, region, 1e-5, [secrets.randbits(31)])
        assert verdict.status is Status.OK, log
    finally:
        runner.close()
