"""The gfx11 emulation (ARBITER_GFX11_EMULATION=1): every GPU lane's gfx11 code path builds with
nvcc (CI, no GPU) and, on an NVIDIA GPU, computes right; a wrong accumulator layout fails the
check. The whole GPU conformance suite in this mode is `bench/gpu_suite.sh gfx11`."""

from __future__ import annotations

import dataclasses
import importlib
import random
import re
import secrets
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from arbiter.lanes._gpu import detect
from arbiter.lanes._gpu.build import library_command
from arbiter.lanes._gpu.detect import toolchain
from arbiter.lanes._gpu.lane import EMULATION_DEFINE

from arbiter import AttentionRegion, FusedRegion, GatedRegion, RowwiseRegion
from arbiter.check import compare, poison, random_inputs, reference
from arbiter.lane import Platform, Status, refusal, run_tool
from arbiter.region import numpy_dtype, output_shape
from arbiter.settings import override
from tests.gate import PARTS, part_of

# odd shapes: every tail and mask path of the gfx11 sources
REGIONS = (
    FusedRegion(33, 65, 31, name="odd_f16", prologue=("silu",), epilogue=("bias", "gelu"),
                dtype="f16"),
    FusedRegion(40, 70, 50, name="softmax", epilogue=("bias",), reduction="softmax"),
    FusedRegion(5, 300, 200, name="skinny_bf16", epilogue=("bias", "relu"), dtype="bf16"),
    AttentionRegion(2, 3, 100, 64, seq_k=77, causal=True, scale=0.2),
    AttentionRegion(1, 2, 33, 80, seq_k=50, causal="top_left", dtype="bf16"),
    AttentionRegion(2, 2, 1, 128, seq_k=300, dtype="f16"),
    GatedRegion(20, 48, 40, name="swiglu"),
    RowwiseRegion(64, 1000, name="rows", residual=True, reduction="layer_norm"),
)
LANES = ("hip_scalar", "wmma_gemm", "fa2", "decode", "gemv")


def _lane(name: str):
    return importlib.import_module(f"arbiter.lanes.{name}").lane


def _variants() -> list[tuple[str, object]]:
    with override(gfx11_emulation=1):
        return [(name, r) for name in LANES for r in REGIONS if refusal(_lane(name), r) is None]


def test_the_setting_takes_the_gfx11_code_path_and_needs_an_nvidia_gpu() -> None:
    lane = _lane("fa2")
    with override(gfx11_emulation=1):
        assert lane.platform is Platform.ROCM  # spaces and sources for gfx11
        av = lane.available()
        assert "gfx11 emulation" in av.reason
        gpu = detect.detect_gpu()
        assert bool(av) == (gpu is not None and gpu.platform is Platform.CUDA
                            and toolchain().nvcc is not None)
    with override(gfx11_emulation=None):
        assert lane.platform is detect.gpu_platform()


@pytest.mark.skipif(toolchain().nvcc is None, reason="no nvcc to build the emulation")
@pytest.mark.parametrize("part", PARTS)
def test_every_lanes_gfx11_path_builds_with_nvcc(part) -> None:
    """The default configs' gfx11 sources: nvcc builds them, their PTX has no mma.sync (the
    NVIDIA path), and the tensor-core lanes' has shuffles in its place (the emulated WMMA)."""
    def one(item):
        name, region = item
        lane = _lane(name)
        with override(gfx11_emulation=1):
            source = lane.emit(region, lane.space(region).complete({}))
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "k.cu"
            src.write_text(source.text)
            cmd = library_command(Platform.CUDA, "sm_90", str(src), str(Path(tmp) / "k.ptx"),
                                  (*source.options, EMULATION_DEFINE))
            cmd = [a for a in cmd if a not in ("-shared", "-Xcompiler", "-fPIC")] + ["-ptx"]
            rc, log = run_tool(cmd, timeout=600, cwd=tmp)
            ptx = (Path(tmp) / "k.ptx").read_text() if rc == 0 else ""
        return name, region, rc, log, ptx

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, part_of(_variants(), part)))
    bad = []
    for name, region, rc, log, ptx in results:
        where = f"{name} {region.describe()}:{region.dtype}"
        if rc != 0:
            bad.append(f"{where}: nvcc failed\n{log[-1500:]}")
        elif "mma.sync" in ptx:
            bad.append(f"{where}: the NVIDIA path (mma.sync), not gfx11's")
        elif name in ("wmma_gemm", "fa2") and not re.search(r"shfl\.sync", ptx):
            bad.append(f"{where}: no shuffles, so no emulated WMMA")
    assert not bad, "\n".join(bad)


def _gpu_lane(name: str):
    lane = _lane(name)
    with override(gfx11_emulation=1):
        av = lane.available()
    if not av:
        pytest.skip(f"{name} cannot run the gfx11 emulation here: {av.reason}")
    return lane


def _error(lane, region, config, extra: tuple[str, ...] = ()) -> tuple[Status, float | None]:
    with override(gfx11_emulation=1):
        source = lane.emit(region, config)
        source = dataclasses.replace(source, options=(*source.options, *extra))
        artifact = lane.build(source)
        runner = lane.runner(artifact, region)
    try:
        inputs = random_inputs(region, secrets.randbits(31))
        out = np.empty(output_shape(region), numpy_dtype(region.dtype))
        poison(out)
        runner.run(inputs, out)
    finally:
        runner.close()
    v = compare(out, reference(region, inputs), 1e-2)
    return v.status, v.rel_error


@pytest.mark.gpu
@pytest.mark.parametrize("name", LANES)
def test_emulated_gfx11_paths_compute_right_on_odd_shapes(name) -> None:
    lane = _gpu_lane(name)
    ran = 0
    rng = random.Random(secrets.randbits(31))
    for region in REGIONS:
        with override(gfx11_emulation=1):
            if refusal(lane, region) is not None:
                continue
            space = lane.space(region)
            valid = list(space.configs())
        for config in [space.default, *rng.sample(valid, min(2, len(valid)))]:
            status, err = _error(lane, region, config)
            assert status is Status.OK, (region.describe(), str(config), status, err)
            ran += 1
    assert ran > 0


@pytest.mark.gpu
def test_a_wrong_accumulator_layout_fails_the_check() -> None:
    """The C/D layout misread as two halves (rows v and v + 8) instead of interleaved rows
    (2v + lane / 16): the emulation places results where gfx11 would, so it is caught."""
    lane = _gpu_lane("wmma_gemm")
    region = FusedRegion(64, 48, 32, name="layout", epilogue=("bias",))
    with override(gfx11_emulation=1):
        config = lane.space(region).default
    ok, _ = _error(lane, region, config)
    wrong, err = _error(lane, region, config, ("-DARB_GFX11_FAULT_C_LAYOUT",))
    assert ok is Status.OK
    assert wrong is Status.WRONG_RESULT and (err is None or err > 0.1), (wrong, err)
