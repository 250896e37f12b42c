"""Compile gate (no GPU needed): every hip_scalar variant for the example regions becomes real
gfx1151 ISA with Debian's clang++-19 and PTX for sm_90 with nvcc, without register spills (a
sample by default, the rest in the slow run: tests/gate.py)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from arbiter.lanes._gpu.build import device_asm, isa_resources
from arbiter.lanes._gpu.detect import toolchain
from arbiter.lanes.hip_scalar import lane

from arbiter import AttentionRegion, FusedRegion, GatedRegion, RowwiseRegion
from arbiter.lane import Platform
from arbiter.region import load_spec
from tests.gate import PARTS, part_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "regions.toml"
WORKERS = max(2, min(8, os.cpu_count() or 2))

# Rowwise regions with each reduction, so every row-kernel kind (thread/warp/block spread,
# global/regs cache, scalar/float4, max and sum all-reduces) is compiled, not only the example's
# pointwise chain.
EXTRA_ROWWISE = (
    RowwiseRegion(64, 4096, name="gate_softmax", epilogue=("bias",), reduction="softmax"),
    RowwiseRegion(64, 1000, name="gate_layer_norm", residual=True, reduction="layer_norm"),
    RowwiseRegion(64, 301, name="gate_rmsnorm", epilogue=("silu",), reduction="rmsnorm"),
)
# The gated kernel (two accumulators per cell): its default and its heaviest configs.
GATED = GatedRegion(100, 300, 70, name="gate_gated", activation="gelu", bias=True)


def _gemm_weight(config) -> int:
    bm, _, bn = str(config["tile"]).partition("x")
    tm, _, tn = str(config["micro"]).partition("x")
    threads = (int(bm) // int(tm)) * (int(bn) // int(tn))
    return int(tm) * int(tn) + (int(bm) + int(bn)) * int(config["bk"]) // threads


def _row_weight(region, config) -> int:
    from arbiter.lanes.hip_scalar.emit import items_per_thread

    return items_per_thread(region.N, config["threads"], config["vec"]) * config["rows"] ** 0


def _variants():
    """(region, config) pairs to compile.

    ARBITER_GATE_FULL=1: every config of every region's space. Default (fast, CI): every
    variant kind with its heaviest config (most registers, so the spill check bites where it
    can): each fused example region once, the GEMM configs heaviest-first, extended until every
    tile, micro-tile and bk value appears; for rowwise regions, per (strategy, cache, vec) kind
    the config holding the most row values per thread.
    """
    full = os.environ.get("ARBITER_GATE_FULL") == "1"
    # attention has its own gate: tests/lanes/test_hip_scalar_attention.py
    regions = [r for r in load_spec(EXAMPLES)
               if lane.applies_to(r) is None and not isinstance(r, AttentionRegion)]
    fused = [r for r in regions if isinstance(r, FusedRegion)]
    rowwise = [r for r in regions if isinstance(r, RowwiseRegion)] + list(EXTRA_ROWWISE)
    out = []
    if full:
        for r in regions + list(EXTRA_ROWWISE):
            out += [(r, c) for c in lane.space(r).configs()]
        return out
    if fused:
        configs = sorted(lane.space(fused[0]).configs(), key=_gemm_weight, reverse=True)
        chosen = []
        for c in configs:
            new = any(all(c[k] != o[k] for o in chosen) for k in ("tile", "micro", "bk"))
            if len(chosen) < len(fused) or new:
                chosen.append(c)
        for i in range(max(len(chosen), len(fused))):
            out.append((fused[i % len(fused)], chosen[i % len(chosen)]))
    for r in rowwise:
        best = {}
        for c in lane.space(r).configs():
            kind = (c["strategy"], c["cache"], c["vec"])
            if kind not in best or _row_weight(r, c) > _row_weight(r, best[kind]):
                best[kind] = c
        out += [(r, c) for c in best.values()]
    gated = sorted(lane.space(GATED).configs(), key=_gemm_weight)
    out += [(GATED, c) for c in [lane.space(GATED).default, *gated[-2:]]]
    return out


VARIANTS = _variants()


def _compile_all(platform: Platform, part: str) -> list[tuple[str, str, str]]:
    def one(item):
        region, config = item
        text = lane.emit(region, config).text
        return region.name, str(config), device_asm(text, platform)

    with ThreadPoolExecutor(WORKERS) as pool:
        return list(pool.map(one, part_of(VARIANTS, part)))


@pytest.fixture(scope="module", params=PARTS)
def gfx_isa(request):
    if toolchain().clang is None:
        pytest.skip("no clang++-19 / clang++ on PATH (apt install clang-19 lld-19 libamdhip64-dev)")
    return request.param, _compile_all(Platform.ROCM, request.param)


def test_variants_cover_every_kind():
    kinds = {(c.get("strategy"), c.get("cache"), c.get("vec")) for _, c in VARIANTS
             if c.get("strategy")}
    for strategy in ("thread", "warp", "block"):
        assert any(k[0] == strategy for k in kinds), strategy
    assert ("block", "regs", 4) in kinds and ("block", "global", 1) in kinds
    gemm = [c for _, c in VARIANTS if c.get("tile")]
    space = lane.space(load_spec(EXAMPLES).get("mm_relu"))
    for t in space.tunables:
        assert {c[t.name] for c in gemm} >= set(t.choices) - _unreachable(space, t.name), t.name


def _unreachable(space, name):
    valid = {c[name] for c in space.configs()}
    return {v for t in space.tunables if t.name == name for v in t.choices} - valid


def test_every_variant_compiles_to_gfx1151(gfx_isa):
    part, built = gfx_isa
    assert len(built) == len(part_of(VARIANTS, part)) > 0
    for name, config, asm in built:
        assert ".amdgcn_target \"amdgcn-amd-amdhsa--gfx1151" in asm, (name, config)
        kernels = isa_resources(asm)
        assert any("arb_poison" not in k for k in kernels), (name, config)


def test_no_spills_or_scratch(gfx_isa):
    bad = []
    for name, config, asm in gfx_isa[1]:
        for kernel, res in isa_resources(asm).items():
            if res.get("scratch", 0) or res.get("vgpr_spills", 0) or res.get("sgpr_spills", 0):
                bad.append(f"{name} [{config}] {kernel}: {res}")
    assert not bad, "register spills / scratch:\n" + "\n".join(bad)


def test_resources_are_read():
    if toolchain().clang is None:
        pytest.skip("no clang++-19 / clang++ on PATH")
    region, config = VARIANTS[0]
    res = isa_resources(device_asm(lane.emit(region, config).text, Platform.ROCM))
    gemm = next(v for k, v in res.items() if "gemm_kernel" in k)
    assert gemm["vgprs"] > 0 and gemm["lds"] > 0 and gemm["occupancy"] > 0


@pytest.mark.parametrize("part", PARTS)
def test_every_variant_compiles_to_ptx(part):
    if toolchain().nvcc is None:
        pytest.skip("no nvcc on PATH")
    for name, config, ptx in _compile_all(Platform.CUDA, part):
        assert ".target sm_90" in ptx, (name, config)
        assert ".entry" in ptx, (name, config)


def test_cli_emit_source_isa_ptx_and_errors(capsys):
    from arbiter.cli import main as cli

    spec = str(EXAMPLES)
    assert cli(["emit", spec, "mm_bias_softmax", "--lane", "hip_scalar",
                "--config", "tile=128x64", "--config", "micro=8x4"]) == 0
    text = capsys.readouterr().out
    region = load_spec(EXAMPLES).get("mm_bias_softmax")
    assert region.key in text and "tile=128x64" in text and "row_kernel" in text
    if toolchain().clang:
        assert cli(["emit", spec, "row_gelu_residual", "--lane", "hip_scalar", "--asm",
                    "--platform", "rocm", "--arch", "gfx1151"]) == 0
        assert "; NumVgprs:" in capsys.readouterr().out
    if toolchain().nvcc:
        assert cli(["emit", spec, "row_gelu_residual", "--lane", "hip_scalar", "--asm",
                    "--platform", "cuda"]) == 0
        assert ".target sm_90" in capsys.readouterr().out
    assert cli(["emit", spec, "mm_relu", "--lane", "numpy", "--asm"]) == 2
    assert cli(["emit", spec, "mm_relu", "--lane", "hip_scalar", "--config", "tile=7x7"]) == 2
    assert cli(["emit", spec, "mm_relu", "--lane", "hip_scalar", "--asm", "--platform", "rocm",
                "--arch", "gfx1151;x"]) == 2
    assert "not a rocm arch" in capsys.readouterr().err
