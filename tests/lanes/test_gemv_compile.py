"""Compile gate (no GPU needed): gemv variants across M, storage dtypes, column widths, unrolls,
K splits and both paths become gfx1151 ISA with no scratch (clang++-19) and sm_90 PTX (nvcc)
with 16-byte loads of B on the FMA path, and WMMA / mma.sync fed by 16-byte asynchronous copies
on the MMA path; the space's defaults and declines hold on both platforms."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from arbiter.lanes._gpu import detect
from arbiter.lanes._gpu.build import device_asm, isa_resources
from arbiter.lanes._gpu.detect import toolchain
from arbiter.lanes.gemv import lane
from arbiter.lanes.gemv.emit import ELEM_BYTES, emit, load_bytes

from arbiter import FusedRegion
from arbiter.lane import AttentionRegion, Config, Platform
from tests.gate import PARTS, part_of

WORKERS = max(2, min(8, os.cpu_count() or 2))

REGIONS = (
    FusedRegion(1, 4096, 4096, name="m1_gelu", epilogue=("bias", "gelu"), dtype="bf16"),
    FusedRegion(3, 4097, 1001, name="m3_odd", prologue=("silu",), epilogue=("bias", "tanh"),
                residual=True, dtype="f16"),
    FusedRegion(8, 8192, 8192, name="m8", epilogue=("silu",), residual=True),
    FusedRegion(16, 4096, 4096, name="m16_bf16", epilogue=("bias", "gelu"), dtype="bf16"),
    FusedRegion(16, 1029, 333, name="m16_f32", prologue=("sigmoid",), epilogue=("relu",)),
)
# Axes that change the kernel text: column width (8- and 16-byte loads), unroll, threads, split.
SPREAD = ({}, {"split_k": 1}, {"unroll": 2, "threads": 128}, {"cols": 16, "unroll": 1},
          {"cols": 4, "threads": 512, "split_k": 4},
          {"path": "mma", "cols": 8, "threads": 128, "unroll": 2, "split_k": 8},
          {"path": "mma", "cols": 4, "threads": 256, "unroll": 1, "split_k": 1})


def _on(platform: Platform, monkeypatch) -> None:
    monkeypatch.setattr(detect, "gpu_platform", lambda: platform)


def _variants(platform: Platform) -> list[tuple[FusedRegion, Config]]:
    out = []
    for region in REGIONS:
        space = lane.space(region)
        for partial in SPREAD:
            config = space.complete(partial)
            if space.violation(config) is None:
                out.append((region, config))
    return out


def _vector_bytes(region: FusedRegion, config: Config) -> int:
    """Bytes per load of B the kernel should use: 0 where rows of B are not vector-aligned."""
    if config["path"] == "mma":
        return 16
    size = load_bytes(config["cols"], region.dtype)
    return size if size and region.N % (size // ELEM_BYTES[region.dtype]) == 0 else 0


def _compile_all(platform: Platform, part: str) -> list[tuple[str, Config, int, str]]:
    def one(item):
        region, config = item
        return (region.name, config, _vector_bytes(region, config),
                device_asm(emit(region, config, platform).text, platform))

    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(one, part_of(_variants(platform), part)))


@pytest.mark.parametrize("platform", [Platform.ROCM, Platform.CUDA])
def test_defaults_valid_and_axes_covered(platform, monkeypatch) -> None:
    _on(platform, monkeypatch)
    for region in REGIONS:
        space = lane.space(region)
        assert space.violation(space.default) is None, region.name
    configs = [c for _, c in _variants(platform)]
    assert len(configs) >= 12
    assert {c["split_k"] for c in configs} >= {1, 4}
    assert len({c["cols"] for c in configs}) >= 2
    assert {c["path"] for c in configs} == {"fma", "mma"}


def test_declines_what_it_does_not_compute() -> None:
    assert lane.applies_to(FusedRegion(16, 64, 64)) is None
    assert "M = 17" in lane.applies_to(FusedRegion(17, 64, 64))
    assert "softmax" in lane.applies_to(FusedRegion(4, 64, 64, reduction="softmax"))
    assert lane.applies_to(AttentionRegion(1, 1, 16, 64)) is not None
    assert set(lane.dtypes) == {"f32", "f16", "bf16"}


@pytest.mark.skipif(toolchain().clang is None, reason="clang++ (19) not installed: no gfx ISA")
@pytest.mark.parametrize("part", PARTS)
def test_gfx1151_isa_has_no_scratch(part, monkeypatch) -> None:
    _on(Platform.ROCM, monkeypatch)
    for name, config, vector, asm in _compile_all(Platform.ROCM, part):
        where = f"{name} [{config}]"
        res = isa_resources(asm)
        assert any("gemv_kernel" in k for k in res), f"{where}: no gemv_kernel in the ISA"
        for kernel, r in res.items():
            assert r.get("scratch", 0) == 0, f"{where}: {kernel} uses scratch {r}"
            assert r.get("vgpr_spills", 0) == 0, f"{where}: {kernel} spills VGPRs {r}"
        assert re.search(r"\.amdhsa_private_segment_fixed_size\s+0\b", asm), where
        if vector:
            assert re.search(rf"global_load_b{8 * vector}\b", asm), f"{where}: no vector loads"
        if config["path"] == "mma":
            assert "v_wmma_f32_16x16x16" in asm, f"{where}: no WMMA"


@pytest.mark.skipif(toolchain().nvcc is None, reason="nvcc not installed: no PTX")
@pytest.mark.parametrize("part", PARTS)
def test_sm90_ptx_loads_b_in_vectors(part, monkeypatch) -> None:
    _on(Platform.CUDA, monkeypatch)
    for name, config, vector, ptx in _compile_all(Platform.CUDA, part):
        where = f"{name} [{config}]"
        assert ".entry" in ptx and "gemv_kernel" in ptx, where
        if config["path"] == "mma":
            assert "mma.sync.aligned.m16n8k16" in ptx, f"{where}: no mma.sync"
            assert "cp.async.cg.shared.global" in ptx, f"{where}: no asynchronous copies of B"
        elif vector:
            width = "v4" if vector == 16 else "v2"
            assert re.search(rf"ld\.global(\.nc)?\.{width}\.(u32|b32|f32)", ptx), (
                f"{where}: no {vector}-byte loads of B")
        if config["split_k"] > 1:
            assert "atom.global.add.u32" in ptx or "atom.add" in ptx, f"{where}: no ticket"


def test_mma_path_only_where_it_computes() -> None:
    """The tensor-core path is offered for 16-bit storage with N and K in whole 16-byte rows,
    and its rules say why elsewhere."""
    bf16 = lane.space(FusedRegion(16, 4096, 4096, dtype="bf16"))
    assert any(c["path"] == "mma" for c in bf16.configs())
    assert bf16.violation(bf16.complete({"path": "mma", "cols": 16})) is not None
    for region, why in ((FusedRegion(16, 4096, 4096), "16-bit"),
                        (FusedRegion(16, 4100, 4096, dtype="f16"), "multiples of 8"),
                        (FusedRegion(16, 4096, 4100, dtype="bf16"), "multiples of 8")):
        space = lane.space(region)
        assert not any(c["path"] == "mma" for c in space.configs()), region
        assert why in space.violation(space.complete({"path": "mma", "cols": 8})), region
