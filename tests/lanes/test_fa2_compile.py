"""Compile gate (no GPU needed): fa2 variants become gfx1151 ISA with v_wmma and no scratch
(clang++-19), and sm_90 PTX with mma.sync / ldmatrix (and cp.async for the prepass staging)
whose ptxas report shows no spills."""

from __future__ import annotations

import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from arbiter.lanes._gpu.build import INCLUDE_DIR, device_asm, isa_resources
from arbiter.lanes._gpu.detect import toolchain
from arbiter.lanes.fa2.emit import emit
from arbiter.lanes.fa2.lane import space_for

from arbiter.lane import Platform, run_tool
from arbiter.region import AttentionRegion
from tests.gate import PARTS, part_of

WORKERS = max(2, min(8, os.cpu_count() or 2))


def _region(d: int, dtype: str = "f32") -> AttentionRegion:
    # causal, seq_q != seq_k and not multiples of any tile: every masking path is compiled
    return AttentionRegion(2, 3, 100, d, seq_k=77, causal=True, scale=0.2, dtype=dtype)


def _native(platform: Platform):
    """16-bit storage: both stagings in f16 and bf16 at d64 and d128 (no conversion)."""
    out = []
    for d in (64, 128):
        for dtype in ("f16", "bf16"):
            sp = space_for(_region(d, dtype), platform)
            out.append((_region(d, dtype), sp.default))
            out.append((_region(d, dtype), sp.complete({**sp.default.as_dict(),
                                                        "staging": "prepass", "stages": 2})))
    return out


def _rocm_variants():
    """Every gfx11 config at head_dim 128 (the tightest), defaults and bf16 at 32 and 64."""
    out = [(_region(128), c) for c in space_for(_region(128), Platform.ROCM).configs()]
    for d in (80, 96):  # odd and even 16-wide tile counts beside the powers of two
        out.append((_region(d), space_for(_region(d), Platform.ROCM).default))
    for d in (32, 64):
        sp = space_for(_region(d), Platform.ROCM)
        top_left = AttentionRegion(2, 3, 100, d, seq_k=77, causal="top_left", scale=0.2)
        out += [(top_left, sp.default)]  # the other alignment's masking paths
        out += [(_region(d), sp.default),
                (_region(d), sp.complete({**sp.default.as_dict(), "precision": "bf16"})),
                (_region(d), sp.complete({**sp.default.as_dict(), "staging": "prepass",
                                          "precision": "bf16"}))]
    return out + _native(Platform.ROCM)


def _cuda_variants():
    """Defaults in f16 and bf16, and the prepass staging (2 and 3 stages), at every head_dim."""
    out = []
    for d in (32, 64, 80, 96, 128, 256):
        sp = space_for(_region(d), Platform.CUDA)
        base = sp.default.as_dict()
        for over in ({}, {"precision": "bf16"}, {"staging": "prepass", "stages": 2},
                     {"staging": "prepass", "stages": 3, "precision": "bf16"}):
            config = sp.complete({**base, **over})
            if sp.violation(config) is not None and d > 128:
                continue  # (prepass only there: the default is one)
            assert sp.violation(config) is None, (d, config, sp.violation(config))
            out.append((_region(d), config))
    return out + _native(Platform.CUDA)


@pytest.mark.skipif(toolchain().clang is None, reason="no clang++-19 / clang++ to build gfx ISA")
@pytest.mark.parametrize("part", PARTS)
def test_gfx1151_isa_has_wmma_and_no_scratch(part) -> None:
    variants = part_of(_rocm_variants(), part)

    def one(rc):
        region, config = rc
        asm = device_asm(emit(region, config, Platform.ROCM).text, Platform.ROCM, "gfx1151")
        return region, config, asm

    with ThreadPoolExecutor(WORKERS) as ex:
        results = list(ex.map(one, variants))
    bad = []
    for region, config, asm in results:
        res = isa_resources(asm)["fa2_forward"]
        wmma = len(re.findall(r"v_wmma_f32_16x16x16_(f16|bf16)", asm))
        want = "bf16" if config["precision"] == "bf16" else "f16"
        if wmma == 0 or f"v_wmma_f32_16x16x16_{want}" not in asm:
            bad.append(f"d{region.head_dim} {config}: no v_wmma_*_{want}")
        if res.get("scratch", 0) or res.get("vgpr_spills", 0) or "scratch_" in asm:
            bad.append(f"d{region.head_dim} {config}: scratch {res}")
        if re.search(r"s_swappc|s_setpc", asm.split("fa2_forward:", 1)[1].split("s_endpgm")[0]):
            bad.append(f"d{region.head_dim} {config}: the kernel calls a function")
    assert not bad, "\n".join(bad)


@pytest.mark.skipif(toolchain().nvcc is None, reason="no nvcc to build sm_90 PTX")
@pytest.mark.parametrize("part", PARTS)
def test_sm90_ptx_has_mma_and_no_spills(part) -> None:
    variants = part_of(_cuda_variants(), part)

    def one(rc):
        region, config = rc
        text = emit(region, config, Platform.CUDA).text
        ptx = device_asm(text, Platform.CUDA, "sm_90")
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "k.cu"
            src.write_text(text)
            rc_, log = run_tool(["nvcc", "-x", "cu", "-arch=sm_90", "-O3", "-cubin",
                                 "-Xptxas", "-v", f"-I{INCLUDE_DIR}", "-o",
                                 str(Path(tmp) / "k.cubin"), str(src)], timeout=300)
        return region, config, ptx, rc_, log

    with ThreadPoolExecutor(WORKERS) as ex:
        results = list(ex.map(one, variants))
    bad = []
    for region, config, ptx, rc_, log in results:
        kind = "bf16" if config["precision"] == "bf16" else "f16"
        if f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" not in ptx:
            bad.append(f"d{region.head_dim} {config}: no {kind} mma.sync in PTX")
        if "ldmatrix.sync.aligned.m8n8.x4.trans" not in ptx:
            bad.append(f"d{region.head_dim} {config}: V not read with ldmatrix.trans")
        if config["staging"] == "prepass" and "cp.async.cg.shared.global" not in ptx:
            bad.append(f"d{region.head_dim} {config}: prepass tiles not copied with cp.async")
        if rc_ != 0:
            bad.append(f"d{region.head_dim} {config}: ptxas failed\n{log}")
        section = log.split("fa2_forward", 1)[-1]
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", section)
        if m is None or m.group(1) != "0" or m.group(2) != "0":
            bad.append(f"d{region.head_dim} {config}: spills\n{section[:400]}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("platform", [Platform.ROCM, Platform.CUDA])
def test_defaults_keep_the_lanes_own_rules(platform) -> None:
    """Small and large regions (the large-region default differs on sm_90) at every head_dim;
    a default that broke a rule made applies_to refuse d256 at b2 h16 s2048 on the H200."""
    for d in (16, 32, 64, 80, 96, 128, 160, 256):
        for b, h, s in ((1, 2, 100), (2, 16, 2048), (4, 16, 4096)):
            for dtype in ("f32", "bf16"):
                r = AttentionRegion(b, h, s, d, dtype=dtype)
                space = space_for(r, platform)
                problem = space.violation(space.default)
                if platform is Platform.ROCM and d > 128:
                    assert problem is not None  # no gfx11 tiling there: the lane declines
                else:
                    assert problem is None, (platform, d, b, h, s, dtype, problem)
