"""inductor lane: torch.compile of the region's PyTorch function, on the CPU here (Inductor's
C++ backend), on a GPU where torch has one.

Every build is a torch.compile in a fresh process, tens of seconds on a small shared machine:
the default run builds two small regions and two that fail; the conformance suite is `slow`.
Where torch is not installed (CI) everything skips with that reason.
"""

from __future__ import annotations

import importlib.util
import secrets

import numpy as np
import pytest

from arbiter.check import budget_of, random_inputs, verify
from arbiter.lane import BuildError, Config, InputError, Lane, Platform, Status, get_lane, refusal
from arbiter.measure import Measurement, build_candidate
from arbiter.region import AttentionRegion, FusedRegion, RowwiseRegion
from arbiter.region import Epilogue as E
from arbiter.region import Reduction as R
from arbiter.settings import override
from arbiter.testing import LaneConformance

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch not installed (optional extra: pip install arbiter-tune[inductor])")

FUSED = FusedRegion(48, 64, 64, name="residual_layer_norm", epilogue=(E.BIAS,), residual=True,
                    reduction=R.LAYER_NORM)
SMALL = (
    AttentionRegion(1, 2, 70, 32, name="bf16_attn_top_left_kv_short", seq_k=20,
                    causal="top_left", dtype="bf16"),
    pytest.param(RowwiseRegion(37, 301, name="f16_row_bias_silu_residual",
                               epilogue=(E.BIAS, E.SILU), residual=True, dtype="f16"),
                 marks=pytest.mark.slow),
)


@pytest.mark.slow
class TestInductorConformance(LaneConformance):
    lane_name = "inductor"


@pytest.fixture(scope="module")
def lane() -> Lane:
    found = get_lane("inductor")
    av = found.available()
    if not av:
        pytest.skip(f"inductor not available here: {av.reason}")
    return found


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    """A build cache of this module's own: the first build of each region is a real compile."""
    with override(cache_dir=tmp_path_factory.mktemp("cache")):
        yield


def _checked(lane: Lane, region, artifact) -> None:
    runner = lane.runner(artifact, region)
    try:
        seeds = [secrets.randbits(31) for _ in range(2)]
        verdict, log = verify(runner, region, budget_of(region, None), seeds)
        assert verdict.status is Status.OK, f"{verdict.status.value}: {verdict.detail}\n{log}"
        samples = runner.time([random_inputs(region, 5)], warmup=0, repeats=5)
        assert len(samples) == 5 and all(0 < s < 0.25 for s in samples), samples
    finally:
        runner.close()


def test_compile_time_is_the_builds_then_cached(lane: Lane, cache) -> None:
    config = lane.space(FUSED).default
    first = build_candidate(lane, FUSED, config)
    assert not isinstance(first, Measurement), first.log
    assert not first.cached and first.compile_seconds > 0
    assert "compiled on the first call in" in first.log
    again = build_candidate(lane, FUSED, config)
    assert not isinstance(again, Measurement)
    assert again.cached and again.compile_seconds == 0.0 and again.path == first.path
    _checked(lane, FUSED, again)  # the worker's compile comes from Inductor's cache


@pytest.mark.parametrize("region", SMALL, ids=["bf16_attention", "f16_rowwise"])
def test_small_regions_match_oracle(lane: Lane, cache, region) -> None:
    assert refusal(lane, region) is None
    built = build_candidate(lane, region, lane.space(region).default)
    assert not isinstance(built, Measurement), built.log
    _checked(lane, region, built)


def test_unknown_mode_is_a_build_error_with_torchs_reason(lane: Lane, cache) -> None:
    source = lane.emit(FUSED, Config.of(mode="no-such-mode"))
    with pytest.raises(BuildError) as e:
        lane.build(source)
    assert "no-such-mode" in e.value.log


def test_compiler_that_fails_is_compile_failed(lane: Lane, cache,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    if lane.platform is not Platform.CPU:
        pytest.skip("the C++ compiler is the CPU backend's")
    monkeypatch.setenv("CXX", "false")  # a compiler that is found, and fails
    got = build_candidate(lane, FUSED, lane.space(FUSED).default)
    assert isinstance(got, Measurement) and got.status is Status.COMPILE_FAILED
    assert "InvalidCxxCompiler" in got.log


def test_cpu_space_is_one_config_and_names_it(lane: Lane) -> None:
    space = lane.space(FUSED)
    if lane.platform is Platform.CPU:
        assert list(space.configs()) == [Config.of(mode="default")]
    else:
        assert {c["mode"] for c in space.configs()} == {"default", "max-autotune-no-cudagraphs"}
    source = lane.emit(FUSED, space.default)
    assert FUSED.key in source.text and "dynamic=False" in source.text


def test_time_rejects_wrong_inputs_before_compiling(lane: Lane, cache) -> None:
    built = build_candidate(lane, FUSED, lane.space(FUSED).default)
    assert not isinstance(built, Measurement), built.log
    runner = lane.runner(built, FUSED)
    bad = dict(random_inputs(FUSED, 1), A=np.ones((3, 3), np.float32))
    with pytest.raises(InputError):
        runner.time([bad], warmup=0, repeats=1)


def test_missing_compiler_is_refused_in_one_line(lane: Lane,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    if lane.platform is not Platform.CPU:
        pytest.skip("the C++ compiler is the CPU backend's")
    monkeypatch.setenv("CXX", "no-such-c++")
    av = lane.available()
    assert not av and "no-such-c++" in av.reason and "\n" not in av.reason


@pytest.mark.slow
def test_one_process_compiles_more_regions_than_dynamos_recompile_limit(lane: Lane,
                                                                        tmp_path) -> None:
    """A trial worker loads many regions: each gets a code object of its own, so the ninth
    compiles like the first (one shared function fails past Dynamo's limit of 8 recompiles)."""
    from arbiter.lanes.inductor.run import InductorRunner

    for n in range(9):
        region = RowwiseRegion(4, 8 + n, epilogue=(E.RELU,))
        runner = InductorRunner(region, Config.of(mode="default"), lane.device, str(tmp_path))
        verdict, log = verify(runner, region, budget_of(region, None), [secrets.randbits(31)])
        assert verdict.status is Status.OK, f"region {n}: {verdict.detail}\n{log}"


def test_gpu_space_tf32_default_follows_the_budget(lane: Lane, monkeypatch) -> None:
    """On a GPU the float32 matmul regions search TF32 too, on by default at the f32 budget
    (the torch lane's rule), off under a tighter one."""
    import importlib

    module = importlib.import_module("arbiter.lanes.inductor.lane")
    monkeypatch.setattr(module, "_probe", lambda: (None, Platform.CUDA, "torch (test) cuda"))
    assert lane.space(FUSED).default.as_dict() == {"mode": "max-autotune-no-cudagraphs",
                                                   "tf32": True}
    tight = FusedRegion(FUSED.M, FUSED.N, FUSED.K, epilogue=FUSED.epilogue, budget=1e-5)
    assert lane.space(tight).default["tf32"] is False
