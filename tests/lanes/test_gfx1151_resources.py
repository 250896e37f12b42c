"""Resources per candidate on gfx1151, no GPU needed: the code object's metadata read from a
device-only compile (the shared object's flags) and from a linked shared object agree; the
occupancy model agrees with clang's own; the lanes' predicted LDS and threads are what the
code objects say; admitted configs fit (a sample here, all of them under -m slow);
`arbiter emit --resources` prints one JSON object."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from arbiter.lanes._gpu.build import rocm_shared_object
from arbiter.lanes._gpu.detect import gpu_platform, toolchain
from arbiter.lanes._gpu.resources import (
    GFX1151,
    candidate_resources,
    device_code,
    dynamic_lds,
    launch_problems,
    parse_metadata,
    so_resources,
    summary,
    waves_per_simd,
)
from arbiter.lanes.fa2.emit import smem_bytes as fa2_smem
from arbiter.lanes.gemv.emit import plan
from arbiter.lanes.wmma_gemm.emit import smem_bytes as wmma_smem

from arbiter.lane import Platform, get_lane, refusal
from arbiter.region import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPECS = {p.stem: load_spec(p) for p in sorted((ROOT / "examples").glob("*.toml"))}
GPU_LANES = ("wmma_gemm", "fa2", "hip_scalar", "decode", "gemv")

pytestmark = [
    pytest.mark.skipif(toolchain().clang is None, reason="no clang++ for gfx1151"),
    pytest.mark.skipif(gpu_platform() is not Platform.ROCM,
                       reason="the lanes take their CUDA spaces on this machine"),
]


def _region(spec: str, name: str):
    return SPECS[spec].get(name)


def _kernel(res: dict, part: str) -> dict:
    return next(k for k in res["kernels"] if part in k["name"])


def test_the_model_follows_the_numbers_it_cites():
    assert waves_per_simd(1, 0, 64) == GFX1151.max_waves_per_simd == 16
    assert waves_per_simd(233, 0, 128) == 6  # 240 allocated (granule 24): 1536 // 240
    assert waves_per_simd(256, 0, 128) == 5  # 264 allocated
    # LDS: two 55 KiB workgroups of 4 waves share a WGP's 128 KiB over its 4 SIMDs
    assert waves_per_simd(64, 55296, 128) == 2
    assert waves_per_simd(64, 64 * 1024 + 1, 128) == 0  # over a workgroup's LDS: no launch
    assert waves_per_simd(16, 0, 1025) == 0


def test_occupancy_model_agrees_with_clang():
    """clang-19 prints its own occupancy for each kernel; where the kernel's LDS is known at
    compile time the model must say the same."""
    seen = set()
    for name, region_name in (("hip_scalar", "mm_relu"), ("wmma_gemm", "mm_bias_softmax")):
        lane, region = get_lane(name), _region("regions", region_name)
        source = lane.emit(region, lane.space(region).default)
        asm = device_code(source.text, "gfx1151", source.options, lane.name)
        clang = [int(v) for v in re.findall(r"^; Occupancy: (\d+)", asm, re.M)]
        kernels = parse_metadata(asm)
        assert len(clang) == len(kernels) >= 2
        for k, theirs in zip(kernels, clang, strict=True):
            assert waves_per_simd(k.vgprs, k.lds, k.max_threads) == theirs, k
            seen.add(theirs)
    assert len(seen) >= 2  # a register-limited kernel among them, not only the cap


@pytest.mark.slow
def test_a_linked_shared_object_says_what_the_device_compile_says(tmp_path):
    """What a ROCm build records (read from the .so's code object) is what `emit
    --resources` shows (device-only compile): the same device code."""
    lane, region = get_lane("fa2"), _region("regions", "attn_causal")
    config = lane.space(region).default
    source = lane.emit(region, config)
    so = tmp_path / "fa2.so"
    rocm_shared_object(source.text, so, "gfx1151", source.options)
    kernels = so_resources(so, "gfx1151")
    if kernels is None:
        pytest.skip("no llvm-objcopy / clang-offload-bundler / llvm-readelf")
    recorded = summary(kernels, dynamic_lds(source.text, lane.launch_lds))
    assert recorded == candidate_resources(lane, region, config, "gfx1151")
    assert _kernel(recorded, "fa2_forward")["lds"] == fa2_smem(Platform.ROCM, 64, config) > 0


# (lane, spec, region, kernel, predicted LDS bytes, predicted threads) for the config that
# asks for the most LDS in the space: the rules' own formulas against the code objects
def _largest(lane, region, lds):
    return max(lane.space(region).configs(), key=lambda c: lds(c.as_dict()))


PREDICTIONS = {
    "wmma_gemm": ("regions", "mm_gelu", "gemm_kernel", lambda r, v: wmma_smem(v),
                  lambda v: v["threads"]),
    "fa2": ("inference", "prefill_attn", "fa2_forward",
            lambda r, v: fa2_smem(Platform.ROCM, r.head_dim, v), lambda v: 32 * v["warps"]),
    "gemv": ("inference", "decode_proj_gelu", "gemv_kernel",
             # + the split-K last-block flag (an int), compiled out without a split
             lambda r, v: plan(r.M, v).smem_bytes + 4 * (v["split_k"] > 1),
             lambda v: v["threads"]),
}


@pytest.mark.parametrize("name", sorted(PREDICTIONS))
def test_predicted_lds_and_threads_are_the_code_objects(name):
    spec, region_name, kernel, lds, threads = PREDICTIONS[name]
    lane, region = get_lane(name), _region(spec, region_name)
    config = _largest(lane, region, lambda v: lds(region, v))
    k = _kernel(candidate_resources(lane, region, config, "gfx1151"), kernel)
    assert (k["lds"], k["max_threads"]) == (lds(region, config.as_dict()),
                                            threads(config.as_dict())), config
    assert k["lds"] <= GFX1151.lds_per_workgroup


def _admitted(per_pair: int | None, seed: int = 38):
    rng = random.Random(seed)
    for spec, s in SPECS.items():
        for region in s.regions:
            for name in GPU_LANES:
                lane = get_lane(name)
                if refusal(lane, region) is not None:
                    continue
                configs = list(lane.space(region).configs())
                if per_pair is not None:
                    configs = rng.sample(configs, min(per_pair, len(configs)))
                yield from ((spec, region, lane, c) for c in configs)


def _misfits(candidates) -> list[str]:
    out = []
    for spec, region, lane, config in candidates:
        problems = launch_problems(candidate_resources(lane, region, config, "gfx1151"))
        out += [f"{lane.name} {spec}:{region.name} {config}: {p}" for p in problems]
    return out


DEFAULTS = (("wmma_gemm", "regions", "mm_bias_softmax"), ("fa2", "inference", "prefill_attn"),
            ("hip_scalar", "regions", "attn_causal"), ("decode", "inference", "decode_attn"),
            ("gemv", "inference", "decode_proj_gelu"))


@pytest.mark.slow
def test_each_lanes_default_fits_gfx1151():
    cands = [(spec, _region(spec, name), get_lane(lane), None) for lane, spec, name in DEFAULTS]
    assert _misfits([(s, r, ln, ln.space(r).default) for s, r, ln, _ in cands]) == []


# one warp copying a 64x32 warp tile's 96 rows + columns of 64-deep K tiles (prepass staging):
# 192 16-bit elements a thread, through VGPRs on gfx11, next to 8 accumulator fragments
COPY_SPILL = {"block_k": 64, "block_m": 64, "block_n": 32, "warp_m": 64, "warp_n": 32,
              "threads": 32, "staging": "prepass", "stages": 2, "precision": "f16"}


def test_a_spilling_config_is_caught_and_the_space_refuses_it():
    """The check says so from the code object, and the rocm space's rule says why."""
    lane, region = get_lane("wmma_gemm"), _region("regions", "mm_relu")
    space = lane.space(region)
    config = space.complete(COPY_SPILL)
    res = candidate_resources(lane, region, config, "gfx1151")
    assert res["scratch"] > 0 and any("scratch" in p for p in launch_problems(res))
    assert "no async copy" in (space.violation(config) or "")


def test_the_k_tile_loop_stays_a_loop_on_gfx11():
    """At block_k 16 over a short K clang-19 unrolled the K-tile loop and spilled (256 VGPRs);
    gemm_kernel.hip keeps it a loop on gfx11, and the config fits."""
    lane, region = get_lane("wmma_gemm"), _region("regions", "mm_silu")
    config = lane.space(region).complete(
        {"block_k": 16, "block_m": 64, "block_n": 32, "warp_m": 16, "warp_n": 32,
         "threads": 128, "staging": "inline", "stages": 2, "precision": "f16"})
    res = candidate_resources(lane, region, config, "gfx1151")
    assert launch_problems(res) == [] and res["vgprs"] < 160


@pytest.mark.parametrize("lane_name, spec, region_name, config, why", [
    ("fa2", "inference", "decode_attn",
     {"staging": "inline", "stages": 2, "warps": 2, "block_q": 32, "block_k": 32},
     "no causal mask"),
    ("fa2", "inference", "decode_attn",
     {"staging": "inline", "stages": 2, "warps": 4, "block_q": 64, "block_k": 32},
     "no causal mask"),
    ("wmma_gemm", "regions", "mm_layer_norm", {**COPY_SPILL, "stages": 3}, "no async copy"),
])
def test_rocm_spaces_refuse_the_configs_that_spilled(lane_name, spec, region_name, config, why):
    """Configs bench/gfx1151_fit.py saw spill are refused by a rule that says why (no compile)."""
    lane = get_lane(lane_name)
    space = lane.space(_region(spec, region_name))
    assert why in (space.violation(space.complete(config)) or "")


def test_rocm_limit_rules_name_the_gfx1151_limit():
    for lane_name, spec, region_name in (("wmma_gemm", "regions", "mm_relu"),
                                         ("fa2", "inference", "prefill_attn")):
        texts = [r.text for r in get_lane(lane_name).space(_region(spec, region_name)).rules]
        assert any("gfx1151: 64 KiB of LDS per workgroup" in t for t in texts), texts


@pytest.mark.slow
def test_sampled_admitted_candidates_fit_gfx1151():
    """8 configs per (example region, GPU lane); bench/gfx1151_fit.py builds every one."""
    assert _misfits(_admitted(8)) == []


def _emit(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arbiter", "emit", *argv], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


def test_emit_resources_prints_one_json_object():
    p = _emit("examples/regions.toml", "attn_causal", "--lane", "fa2", "--platform", "rocm",
              "--arch", "gfx1151", "--resources")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["lane"] == "fa2" and got["arch"] == "gfx1151" and got["scratch"] == 0
    assert got["waves_per_simd"] == min(k["waves_per_simd"] for k in got["kernels"]) >= 1
    assert {"vgprs", "sgprs", "lds", "spills"} <= set(got)


@pytest.mark.parametrize("argv, message", [
    (("--lane", "x86_c", "--resources"), "not a GPU lane"),
    (("--lane", "hip_scalar", "--resources", "--platform", "cuda"), "--platform rocm"),
    (("--lane", "hip_scalar", "--resources", "--arch", "sm_90;rm"), "not a rocm arch"),
    (("--lane", "hip_scalar", "--resources", "--asm"), "exclusive"),
])
def test_emit_resources_refuses_bad_input_in_one_line(argv, message):
    p = _emit("examples/regions.toml", "mm_relu", *argv)
    assert p.returncode != 0 and message in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
