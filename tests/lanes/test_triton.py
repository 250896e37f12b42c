"""triton lane: ahead-of-time compiles for sm_90 and gfx1151 (triton only, no GPU), the
conformance suite under Triton's interpreter (torch and triton, in a process of its own), and
on a GPU.

The interpreter is slow (numpy per program and op): the default run checks one region of each
kind and storage dtype there; the whole suite is `slow`. Compiles take seconds each: the
default run compiles each kind's default once per target (and every example region's rocm
default for gfx1151: it must fit), sampled configs are `slow`: a sampled config the rocm space
admits that does not fit gfx1151 fails.
"""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from arbiter.lane import Config, Platform, get_lane
from arbiter.region import AttentionRegion, FusedRegion, GatedRegion, RowwiseRegion, load_spec
from arbiter.region import Epilogue as E
from arbiter.region import Reduction as R
from arbiter.testing import LaneConformance

ROOT = Path(__file__).resolve().parents[2]
HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton not installed "
                                  "(pip install -e '.[aot]', as scripts/setup.sh does)")

KINDS = {
    "fused_f16": FusedRegion(33, 65, 31, epilogue=(E.BIAS, E.GELU), residual=True, dtype="f16"),
    "fused_bf16_softmax": FusedRegion(17, 129, 24, epilogue=(E.BIAS,), reduction=R.SOFTMAX,
                                      dtype="bf16"),
    "gated_bf16": GatedRegion(3, 96, 64, bias=True, dtype="bf16"),
    "rowwise_f16": RowwiseRegion(8, 4099, epilogue=(E.BIAS,), reduction=R.RMSNORM, dtype="f16"),
    "attention_bf16": AttentionRegion(1, 2, 37, 64, seq_k=53, causal=True, dtype="bf16"),
}
F32 = {
    "fused_f32_layer_norm": FusedRegion(48, 64, 64, epilogue=(E.BIAS,), residual=True,
                                        reduction=R.LAYER_NORM),
    "attention_f32": AttentionRegion(1, 1, 33, 128, seq_k=97, causal="top_left"),
}
TARGETS = {"sm_90": Platform.CUDA, "gfx1151": Platform.ROCM}


def _compile(region, config: Config, arch: str) -> dict:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip("this process runs Triton's interpreter, which cannot compile")
    from arbiter.lanes.triton.aot import compile_candidate

    return compile_candidate(region, config, arch)


def _check_binary(region, got: dict, arch: str) -> None:
    for k in got["kernels"]:
        assert ("cubin" if arch.startswith("sm_") else "hsaco") in k["binaries"], k
    if arch == "gfx1151":
        matmuls = [k for k in got["kernels"] if k["kernel"] != "rowwise"]
        if region.dtype != "f32":
            want = f"v_wmma_f32_16x16x16_{region.dtype}"
            assert all(want in k["wmma"] for k in matmuls), got["kernels"]
        # the fit check: no scratch, no spills, LDS and threads within gfx1151's limits
        assert not got["problems"], (region.describe(), got["problems"])


def _space(region, arch: str):
    from arbiter.lanes.triton.space import space

    return space(region, TARGETS[arch])


EXAMPLES = {f"{spec.stem}:{r.name}": r for spec in sorted((ROOT / "examples").glob("*.toml"))
            for r in load_spec(spec).regions}


@pytest.mark.parametrize("arch", TARGETS)
@pytest.mark.parametrize("kind", [*KINDS, *F32, *EXAMPLES])
def test_default_config_is_admitted(kind: str, arch: str) -> None:
    """A space's default keeps its own rules (on rocm: gfx1151's LDS and registers)."""
    space = _space({**KINDS, **F32, **EXAMPLES}[kind], arch)
    assert space.violation(space.default) is None, space.default


@needs_triton
@pytest.mark.parametrize("arch", TARGETS)
@pytest.mark.parametrize("kind", [*KINDS, *F32])
def test_default_config_compiles_ahead_of_time(kind: str, arch: str) -> None:
    region = {**KINDS, **F32}[kind]
    got = _compile(region, _space(region, arch).default, arch)
    _check_binary(region, got, arch)


@needs_triton
@pytest.mark.parametrize("kind", EXAMPLES)
def test_example_default_fits_gfx1151(kind: str) -> None:
    """Every example region's rocm default builds for gfx1151 with no scratch, no spills,
    its LDS and threads within the limits."""
    region = EXAMPLES[kind]
    got = _compile(region, _space(region, "gfx1151").default, "gfx1151")
    _check_binary(region, got, "gfx1151")


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("arch", TARGETS)
@pytest.mark.parametrize("kind", [*KINDS, *F32])
def test_sampled_configs_compile_ahead_of_time(kind: str, arch: str) -> None:
    """Two configs of the space (seeded): they compile and use WMMA where they should, and on
    gfx1151 fit (the rocm space's rules keep out what spills or exceeds the LDS)."""
    region = {**KINDS, **F32}[kind]
    space = _space(region, arch)
    configs = list(space.configs())
    for config in random.Random(f"{kind} {arch}").sample(configs, min(2, len(configs))):
        _check_binary(region, _compile(region, config, arch), arch)


def test_reduction_that_cannot_hold_the_row_is_declined_with_a_reason() -> None:
    from arbiter.lanes.triton.space import space

    wide = FusedRegion(64, 4096, 64, reduction=R.SOFTMAX)
    s = space(wide, Platform.CUDA)
    assert s.default["fuse_reduction"] is False and s.violation(s.default) is None
    fused = s.complete({"fuse_reduction": True})
    assert "fuse_reduction needs the row (4096) in one BLOCK_N tile" == s.violation(fused)
    narrow = FusedRegion(64, 200, 64, reduction=R.RMSNORM)
    s = space(narrow, Platform.CUDA)
    assert s.default["fuse_reduction"] is True and s.violation(s.default) is None


def test_rocm_space_keeps_to_gfx1151_lds() -> None:
    from arbiter.lanes.triton.space import space

    region = FusedRegion(4096, 4096, 4096, dtype="bf16")
    s = space(region, Platform.ROCM)
    big = s.complete({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "num_stages": 3,
                      "num_warps": 8})
    assert "64 KiB" in (s.violation(big) or "")
    cuda = space(region, Platform.CUDA)
    assert cuda.violation(cuda.complete({k: v for k, v in big.as_dict().items()
                                         if k != "waves_per_eu"})) is None
    assert all(c["BLOCK_K"] * (c["BLOCK_M"] + c["BLOCK_N"]) * 2 * max(1, c["num_stages"])
               <= 64 * 1024 for c in s.configs())


def test_emit_is_the_plan_and_names_no_user_text() -> None:
    lane = get_lane("triton")
    region = FusedRegion(17, 129, 24, epilogue=(E.BIAS,), reduction=R.SOFTMAX,
                         name='x"); import os  #')
    text = lane.emit(region, lane.space(region).default).text
    assert region.key in text and "kernels.fused_matmul[" in text and "import os" not in text


def test_without_gpu_unavailable_in_one_line() -> None:
    from arbiter.settings import override

    lane = get_lane("triton")
    with override(triton_interpret=None):
        av = lane.available()
        if av:
            pytest.skip(f"a GPU is here: {av.reason}")
        assert "\n" not in av.reason and ("GPU" in av.reason or "not installed" in av.reason)


def test_interpreter_refused_where_numpy_breaks_it(monkeypatch) -> None:
    importlib.import_module("arbiter.lanes.triton.lane")
    triton_lane = sys.modules["arbiter.lanes.triton.lane"]  # the package's `lane` is the object
    versions = {"triton": "3.6.0", "numpy": "2.4.1"}
    monkeypatch.setattr(triton_lane, "version", versions.__getitem__)
    assert "triton-lang/triton#9171" in (triton_lane.interpreter_fault() or "")
    versions["triton"] = "3.7.0"
    assert triton_lane.interpreter_fault() is None
    versions.update(triton="3.6.0rc1", numpy="2.3.5")
    assert triton_lane.interpreter_fault() is None


def _interpreted(*select: str) -> None:
    if not (HAS_TORCH and HAS_TRITON):
        pytest.skip("needs torch and triton (pip install arbiter-tune[triton])")
    from arbiter.lanes.triton.lane import interpreter_fault

    if (fault := interpreter_fault()) is not None:
        pytest.skip(fault)
    env = dict(os.environ, ARBITER_TRITON_INTERPRET="1", TRITON_INTERPRET="1",
               PYTHONWARNINGS="ignore::RuntimeWarning")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           "-W", "ignore::RuntimeWarning", str(ROOT / "tests/lanes/triton_interpreted.py")]
    if select:
        cmd += ["-k", " or ".join(select)]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    tail = "\n".join(p.stdout.splitlines()[-40:])
    assert p.returncode == 0, f"{' '.join(cmd)}\n{tail}\n{p.stderr[-2000:]}"
    assert " passed" in tail and "skipped" not in tail.splitlines()[-1], tail


def test_conformance_under_interpreter_one_region_per_kind_and_dtype() -> None:
    """Odd shapes, fresh random inputs, poisoned outputs: one region of every kind in f32,
    f16 and bf16, through the whole conformance class (its sampled configs included)."""
    _interpreted("protocol", "claims", "emit_names", "time_returns", "odd_gelu_residual",
                 "bias_softmax", "row_bias_silu_residual", "attn_causal_kv_short",
                 "f16_attn_odd", "gated_odd_silu", "bf16_gated")


@pytest.mark.slow
def test_conformance_under_interpreter_every_region() -> None:
    _interpreted()


@pytest.mark.gpu  # skips with the lane's reason without a GPU; `-m gpu` selects it
class TestTritonConformance(LaneConformance):
    lane_name = "triton"
