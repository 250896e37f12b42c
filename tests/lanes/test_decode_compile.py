"""Compile gate (no GPU needed): decode variants become gfx1151 ISA with no scratch and no
calls (clang++-19), and sm_90 code whose ptxas report shows no spills, for every storage dtype,
both causal alignments and the head_dims whose rows pad a lane group."""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from arbiter.lanes._gpu.build import INCLUDE_DIR, device_asm, isa_resources
from arbiter.lanes._gpu.detect import toolchain
from arbiter.lanes.decode import lane
from arbiter.lanes.decode.emit import emit
from arbiter.lanes.decode.lane import space_for

from arbiter.lane import Platform, run_tool
from arbiter.region import AttentionRegion
from tests.gate import PARTS, part_of

WORKERS = max(2, min(8, os.cpu_count() or 2))
KERNELS = ("dec_split", "dec_combine")


def _region(d: int, sq: int = 5, causal: bool | str = True) -> AttentionRegion:
    # seq_k a multiple of no split, 5 queries (a padded query group): every masking path
    return AttentionRegion(2, 3, sq, d, seq_k=1001, causal=causal, scale=0.2)


def _stored(region: AttentionRegion, dtype: str) -> AttentionRegion:
    return region if dtype == "f32" else dataclasses.replace(region, dtype=dtype)


def _variants(platform: Platform):
    """Per dtype: the default at d128 (both alignments, one query and five), the configs
    holding the most registers, and head_dims 8, 24, 200, 256."""
    out = []
    for dtype in lane.dtypes:
        for sq, causal in ((1, False), (5, True), (5, "top_left"), (16, True)):
            r = _stored(_region(128, sq, causal), dtype)
            sp = space_for(r, platform)
            out.append((r, sp.default))
        r = _stored(_region(128, 16), dtype)
        sp = space_for(r, platform)
        configs = list(sp.configs())
        heavy = sorted(configs, key=lambda c: -c["queries_per_block"] * 8
                       - c["keys_per_thread"])[:2]
        out += [(r, c) for c in heavy]
        for d in (8, 24, 200, 256):
            r = _stored(_region(d), dtype)
            out.append((r, space_for(r, platform).default))
    return out


def _label(region, config) -> str:
    return f"{region.describe()}:{getattr(region, 'dtype', 'f32')} {config}"


@pytest.mark.skipif(toolchain().clang is None, reason="no clang++-19 / clang++ to build gfx ISA")
@pytest.mark.parametrize("part", PARTS)
def test_gfx1151_isa_has_no_scratch(part) -> None:
    def one(rc):
        region, config = rc
        asm = device_asm(emit(region, config, Platform.ROCM).text, Platform.ROCM, "gfx1151")
        return region, config, asm

    with ThreadPoolExecutor(WORKERS) as ex:
        results = list(ex.map(one, part_of(_variants(Platform.ROCM), part)))
    bad = []
    for region, config, asm in results:
        res = isa_resources(asm)
        for k in KERNELS:
            if k not in res:
                bad.append(f"{_label(region, config)}: no {k} in the ISA")
                continue
            if res[k].get("scratch", 0) or res[k].get("vgpr_spills", 0):
                bad.append(f"{_label(region, config)}: {k} scratch {res[k]}")
            body = asm.split(f"{k}:", 1)[1].split("s_endpgm")[0]
            if re.search(r"s_swappc|s_setpc", body):
                bad.append(f"{_label(region, config)}: {k} calls a function")
        if "global_load_b128" not in asm:
            bad.append(f"{_label(region, config)}: K/V not read with 16-byte loads")
    assert not bad, "\n".join(bad)


@pytest.mark.skipif(toolchain().nvcc is None, reason="no nvcc to build sm_90 code")
@pytest.mark.parametrize("part", PARTS)
def test_sm90_has_wide_loads_and_no_spills(part) -> None:
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
        results = list(ex.map(one, part_of(_variants(Platform.CUDA), part)))
    bad = []
    for region, config, ptx, rc_, log in results:
        if "ld.global.nc.v4" not in ptx:
            bad.append(f"{_label(region, config)}: K/V not read with 16-byte loads")
        if rc_ != 0:
            bad.append(f"{_label(region, config)}: ptxas failed\n{log}")
        for k in KERNELS:
            section = log.split(f"Function properties for {k}", 1)[-1]
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", section)
            if m is None or m.group(1) != "0" or m.group(2) != "0":
                bad.append(f"{_label(region, config)}: {k} spills\n{section[:300]}")
    assert not bad, "\n".join(bad)
