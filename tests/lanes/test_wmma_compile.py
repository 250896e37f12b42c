"""Compile gate (no GPU needed): wmma_gemm variants for the example regions become gfx1151 ISA
with v_wmma_f32_16x16x16_* and no scratch (clang++-19), and sm_90 PTX with mma.sync (nvcc)."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from arbiter.lanes._gpu.build import device_asm, isa_resources
from arbiter.lanes._gpu.detect import toolchain
from arbiter.lanes.wmma_gemm import lane
from arbiter.lanes.wmma_gemm.emit import emit

from arbiter import FusedRegion
from arbiter.lane import Config, Platform
from arbiter.region import load_spec
from tests.gate import PARTS, part_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "regions.toml"
WORKERS = max(2, min(8, os.cpu_count() or 2))

# A spread over the axes that change the kernel text: staging, precision, tile shapes, stages.
SPREAD = (
    {},
    {"precision": "bf16"},
    {"staging": "prepass", "stages": 3},
    {"staging": "prepass", "precision": "bf16", "block_m": 128, "block_n": 128, "block_k": 32,
     "warp_m": 64, "warp_n": 32, "threads": 256, "stages": 4},
    {"block_m": 128, "block_n": 64, "block_k": 32, "warp_m": 32, "warp_n": 32, "threads": 256,
     "stages": 1},
    {"staging": "prepass", "block_m": 64, "block_n": 128, "block_k": 64, "warp_m": 32,
     "warp_n": 64, "threads": 128, "stages": 2, "group_m": 1},
)
# Odd shapes: scalar (unaligned) loads, edge tiles, a prologue.
EXTRA = (
    FusedRegion(33, 65, 31, name="gate_odd", prologue=("silu",), epilogue=("bias", "gelu"),
                residual=True),
)


def _variants() -> list[tuple[FusedRegion, Config]]:
    regions = [r for r in load_spec(EXAMPLES) if lane.applies_to(r) is None] + list(EXTRA)
    out = []
    for i, region in enumerate(regions):
        space = lane.space(region)
        for j, partial in enumerate(SPREAD):
            if (i + j) % 3:  # every region sees a third of the spread, every config 2+ regions
                continue
            config = space.complete(partial)
            if space.violation(config) is None:
                out.append((region, config))
    return out + _native()


def _native() -> list[tuple[FusedRegion, Config]]:
    """16-bit storage: both stagings, direct async copies (aligned, no prologue) and the
    conversion pass (odd shapes, a prologue), a reduction over f32 rows."""
    regions = (
        FusedRegion(256, 256, 128, name="bf16_aligned", epilogue=("bias", "gelu"), dtype="bf16"),
        FusedRegion(33, 65, 31, name="f16_odd", prologue=("silu",), epilogue=("bias",),
                    residual=True, dtype="f16"),
        FusedRegion(17, 129, 24, name="bf16_softmax", epilogue=("bias",), reduction="softmax",
                    dtype="bf16"),
    )
    out = []
    for region in regions:
        space = lane.space(region)
        for partial in ({}, {"staging": "prepass", "stages": 3}):
            config = space.complete({**space.default.as_dict(), **partial})
            if space.violation(config) is None:
                out.append((region, config))
    return out


VARIANTS = _variants()


def _compile_all(platform: Platform, part: str) -> list[tuple[str, str, str]]:
    def one(item):
        region, config = item
        return region.name, str(config), device_asm(emit(region, config, platform).text, platform)

    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(one, part_of(VARIANTS, part)))


def test_gate_covers_the_axes() -> None:
    configs = [c for _, c in VARIANTS]
    assert len(VARIANTS) >= 8
    assert {c["staging"] for c in configs} == {"inline", "prepass"}
    assert {c["precision"] for c in configs} == {"f16", "bf16"}


@pytest.mark.skipif(toolchain().clang is None, reason="clang++ (19) not installed: no gfx ISA")
@pytest.mark.parametrize("part", PARTS)
def test_gfx1151_isa_has_wmma_and_no_scratch(part) -> None:
    for name, config, asm in _compile_all(Platform.ROCM, part):
        where = f"{name} [{config}]"
        kind = "bf16" if "precision=bf16" in config else "f16"
        assert re.search(rf"\bv_wmma_f32_16x16x16_{kind}\b", asm), f"{where}: no v_wmma_*_{kind}"
        res = isa_resources(asm)
        gemm = [v for k, v in res.items() if "gemm_kernel" in k]
        assert gemm, f"{where}: no gemm_kernel in the ISA"
        for kernel, r in res.items():
            assert r.get("scratch", 0) == 0, f"{where}: {kernel} uses scratch {r}"
            assert r.get("vgpr_spills", 0) == 0, f"{where}: {kernel} spills VGPRs {r}"
        assert re.search(r"\.amdhsa_private_segment_fixed_size\s+0\b", asm), where


@pytest.mark.skipif(toolchain().nvcc is None, reason="nvcc not installed: no PTX")
@pytest.mark.parametrize("part", PARTS)
def test_sm90_ptx_has_mma(part) -> None:
    for name, config, ptx in _compile_all(Platform.CUDA, part):
        kind = "bf16" if "precision=bf16" in config else "f16"
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" in ptx, name
        assert "ldmatrix.sync.aligned" in ptx, f"{name} [{config}]: no ldmatrix"
        if "staging=prepass" in config:
            assert "cp.async.cg.shared.global" in ptx, f"{name} [{config}]: no cp.async"


@pytest.mark.parametrize("platform", [Platform.ROCM, Platform.CUDA])
def test_defaults_keep_the_lanes_own_rules_at_every_shape(platform) -> None:
    class On(type(lane)):  # the same lane, seen from the other platform
        pass

    On.platform = platform  # type: ignore[assignment]
    seen = On()
    for m in (1, 3, 16, 33, 512, 4096):
        for dtype in ("f32", "bf16"):
            region = FusedRegion(m, 4096, 4096, epilogue=("bias", "gelu"), dtype=dtype)
            space = seen.space(region)
            assert space.violation(space.default) is None, (platform, m, dtype)
