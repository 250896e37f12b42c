"""The lane conformance suite: one test class every lane runs, first-party or plug-in.

Subclass it in a test module and name the lane::

    class TestMyLane(LaneConformance):
        lane_name = "my_lane"

Every check uses fresh random inputs, a poisoned output buffer and the float64 oracle. A lane
that is unavailable here (no compiler, no GPU) skips with its own reason; a region the lane
does not claim (`applies_to`) is skipped with the lane's reason.
"""

from __future__ import annotations

import random
import secrets

import numpy as np
import pytest

from ._errors import InputError
from .check import budget_of, poison, random_inputs, verify
from .lane import Artifact, Config, Lane, Platform, Runner, Status, get_lane, refusal
from .measure import Measurement, build_candidate
from .region import (
    AttentionRegion,
    FusedRegion,
    GatedRegion,
    Region,
    RowwiseRegion,
    input_shapes,
    numpy_dtype,
    output_shape,
)
from .region import Epilogue as E
from .region import Pointwise as P
from .region import Reduction as R

__all__ = ["CONFORMANCE_REGIONS", "LaneConformance"]

CONFORMANCE_REGIONS: tuple[Region, ...] = (
    FusedRegion(1, 17, 3, name="tiny_bias_relu", epilogue=(E.BIAS, E.RELU)),
    FusedRegion(33, 65, 31, name="odd_gelu_residual", epilogue=(E.BIAS, E.GELU), residual=True),
    FusedRegion(64, 96, 40, name="prologue_chain", prologue=(P.SILU,),
                epilogue=(E.SIGMOID, E.TANH)),
    FusedRegion(17, 129, 24, name="bias_softmax", epilogue=(E.BIAS,), reduction=R.SOFTMAX),
    FusedRegion(9, 200, 16, name="silu_rmsnorm", epilogue=(E.SILU,), reduction=R.RMSNORM, eps=1e-6),
    FusedRegion(48, 64, 64, name="residual_layer_norm", epilogue=(E.BIAS,), residual=True,
                reduction=R.LAYER_NORM),
    RowwiseRegion(1, 17, name="row_tiny_gelu", epilogue=(E.GELU,)),
    RowwiseRegion(37, 301, name="row_bias_silu_residual", epilogue=(E.BIAS, E.SILU), residual=True),
    RowwiseRegion(19, 1000, name="row_softmax", reduction=R.SOFTMAX),
    RowwiseRegion(8, 4099, name="row_bias_rmsnorm", epilogue=(E.BIAS,), reduction=R.RMSNORM),
    RowwiseRegion(5, 513, name="row_layer_norm", epilogue=(E.TANH,), reduction=R.LAYER_NORM),
    AttentionRegion(1, 2, 37, 64, name="attn_odd", seq_k=53),
    AttentionRegion(2, 1, 64, 64, name="attn_causal", causal=True),
    AttentionRegion(1, 2, 70, 32, name="attn_causal_kv_short", seq_k=20, causal=True,
                    scale=0.3),
    AttentionRegion(1, 1, 33, 128, name="attn_causal_kv_long", seq_k=97, causal=True),
    AttentionRegion(1, 2, 70, 32, name="attn_top_left_kv_short", seq_k=20, causal="top_left"),
    AttentionRegion(1, 1, 33, 64, name="attn_top_left_kv_long", seq_k=97, causal="top_left"),
    # 16-bit storage (inputs and output), every kind, odd shapes
    FusedRegion(33, 65, 31, name="f16_odd_gelu_residual", epilogue=(E.BIAS, E.GELU),
                residual=True, dtype="f16"),
    FusedRegion(33, 65, 31, name="bf16_odd_gelu_residual", epilogue=(E.BIAS, E.GELU),
                residual=True, dtype="bf16"),
    FusedRegion(3, 300, 257, name="bf16_skinny_bias_silu", epilogue=(E.BIAS, E.SILU),
                dtype="bf16"),
    FusedRegion(17, 129, 24, name="bf16_bias_softmax", epilogue=(E.BIAS,),
                reduction=R.SOFTMAX, dtype="bf16"),
    RowwiseRegion(37, 301, name="f16_row_bias_silu_residual", epilogue=(E.BIAS, E.SILU),
                  residual=True, dtype="f16"),
    RowwiseRegion(8, 4099, name="bf16_row_bias_rmsnorm", epilogue=(E.BIAS,),
                  reduction=R.RMSNORM, dtype="bf16"),
    AttentionRegion(1, 2, 37, 64, name="f16_attn_odd", seq_k=53, dtype="f16"),
    AttentionRegion(1, 2, 37, 64, name="bf16_attn_odd", seq_k=53, dtype="bf16"),
    AttentionRegion(1, 1, 33, 128, name="bf16_attn_causal_kv_long", seq_k=97, causal=True,
                    dtype="bf16"),
    AttentionRegion(1, 2, 70, 32, name="f16_attn_top_left_kv_short", seq_k=20,
                    causal="top_left", dtype="f16"),
    AttentionRegion(2, 3, 1, 128, name="bf16_decode", seq_k=1000, dtype="bf16"),
    # gated feed-forward (SwiGLU / GeGLU)
    GatedRegion(33, 65, 31, name="gated_odd_silu"),
    GatedRegion(17, 40, 129, name="gated_gelu_bias", activation=P.GELU, bias=True),
    GatedRegion(3, 96, 64, name="bf16_gated_skinny_bias", bias=True, dtype="bf16"),
)


def _ids(regions) -> list[str]:
    return [r.name for r in regions]


class LaneConformance:
    """Checks every lane must pass. Set `lane_name`; optionally `budget` for low precisions."""

    lane_name: str = ""
    budget: float | None = None  # None: each region's own budget (default 1e-3)
    sampled_configs: int = 3  # extra configs from the space checked per region (besides default)

    @pytest.fixture
    def lane(self) -> Lane:
        lane = get_lane(self.lane_name)
        av = lane.available()
        if not av:
            pytest.skip(f"lane {self.lane_name} not available here: {av.reason}")
        return lane

    def _claimed(self, lane: Lane, region: Region) -> None:
        why = refusal(lane, region)
        if why is not None:
            pytest.skip(f"{self.lane_name} does not apply to {region.name}: {why}")

    def _built(self, lane: Lane, region: Region, config: Config) -> Artifact:
        built = build_candidate(lane, region, config)
        if isinstance(built, Measurement):
            pytest.fail(f"{lane.name} {region.name} {config}: {built.status.value}\n{built.log}")
        return built

    def _budget(self, region: Region) -> float:
        return budget_of(region, self.budget)

    def test_satisfies_protocol(self, lane: Lane) -> None:
        assert isinstance(lane, Lane)
        assert lane.name == self.lane_name
        assert isinstance(lane.platform, Platform)
        assert lane.precisions and all(isinstance(p, str) for p in lane.precisions)
        assert isinstance(lane.version, str) and lane.version

    def test_claims_something(self, lane: Lane) -> None:
        assert any(refusal(lane, r) is None for r in CONFORMANCE_REGIONS), (
            f"{lane.name} applies to none of the conformance regions")

    @pytest.mark.parametrize("region", CONFORMANCE_REGIONS, ids=_ids(CONFORMANCE_REGIONS))
    def test_default_matches_oracle(self, lane: Lane, region: Region) -> None:
        self._claimed(lane, region)
        space = lane.space(region)
        assert space.violation(space.default) is None, "default config breaks the lane's own rules"
        built = self._built(lane, region, space.default)
        runner = lane.runner(built, region)
        try:
            seeds = [secrets.randbits(31) for _ in range(2)]
            verdict, log = verify(runner, region, self._budget(region), seeds)
            assert verdict.status is Status.OK, f"{verdict.status.value}: {verdict.detail}\n{log}"
        finally:
            runner.close()

    @pytest.mark.parametrize("region", CONFORMANCE_REGIONS[::3], ids=_ids(CONFORMANCE_REGIONS[::3]))
    def test_sampled_configs_match_oracle(self, lane: Lane, region: Region) -> None:
        self._claimed(lane, region)
        configs = list(lane.space(region).configs())
        assert configs, "space has no valid config"
        rng = random.Random(secrets.randbits(32))
        picks = rng.sample(configs, min(self.sampled_configs, len(configs)))
        for config in picks:
            runner = lane.runner(self._built(lane, region, config), region)
            try:
                verdict, log = verify(runner, region, self._budget(region),
                                      [secrets.randbits(31)])
                assert verdict.status is Status.OK, f"{config}: {verdict.detail}\n{log}"
            finally:
                runner.close()

    @pytest.mark.parametrize("region", CONFORMANCE_REGIONS, ids=_ids(CONFORMANCE_REGIONS))
    def test_rejects_bad_inputs_before_launch(self, lane: Lane, region: Region) -> None:
        self._claimed(lane, region)
        runner = lane.runner(self._built(lane, region, lane.space(region).default), region)
        try:
            for bad in _bad_inputs(region):
                out = np.empty(output_shape(region), numpy_dtype(region.dtype))
                poison(out)
                with pytest.raises(InputError):
                    runner.run(bad, out)
            good = random_inputs(region, 1)
            wrong_out = np.empty(tuple(d + 1 for d in output_shape(region)),
                                 numpy_dtype(region.dtype))
            with pytest.raises(InputError):
                runner.run(good, wrong_out)
            other = "f32" if region.dtype != "f32" else "bf16"
            with pytest.raises(InputError):  # the right shape in another storage dtype
                runner.run(good, np.empty(output_shape(region), numpy_dtype(other)))
            with pytest.raises(InputError):
                runner.time([_bad_inputs(region)[0]], warmup=0, repeats=1)
        finally:
            runner.close()

    def test_time_returns_positive_samples(self, lane: Lane) -> None:
        region = next((r for r in CONFORMANCE_REGIONS if refusal(lane, r) is None), None)
        assert region is not None
        runner: Runner = lane.runner(self._built(lane, region, lane.space(region).default), region)
        try:
            sets = [random_inputs(region, s) for s in (3, 4)]
            samples = runner.time(sets, warmup=1, repeats=5)
            assert len(samples) == 5 and all(s > 0 and np.isfinite(s) for s in samples)
            assert isinstance(runner.timing_method, str) and runner.timing_method
        finally:
            runner.close()

    def test_emit_names_region_and_config(self, lane: Lane) -> None:
        region = next(r for r in CONFORMANCE_REGIONS if refusal(lane, r) is None)
        config = lane.space(region).default
        source = lane.emit(region, config)
        assert source.lane == lane.name and source.region_key == region.key
        assert source.config == config
        if source.language != "python":
            assert region.key in source.text, "generated source must record the region key"


def _bad_inputs(region: Region) -> list[dict[str, np.ndarray]]:
    """Input sets that each break one rule: a wrong shape, a wrong dtype, a missing array."""
    good = random_inputs(region, 0)
    names = list(input_shapes(region))
    cases: list[dict[str, np.ndarray]] = []
    # B (or Wg) rows != K for matmuls
    first = names[1] if isinstance(region, (FusedRegion, GatedRegion)) else names[0]
    shape = good[first].shape
    cases.append({**good, first: np.ones((shape[0] + 1,) + shape[1:], good[first].dtype)})
    cases.append({**good, names[0]: good[names[0]].astype(np.float64)})
    if region.dtype != "f32":  # 16-bit storage handed float32 arrays
        cases.append({**good, names[0]: good[names[0]].astype(np.float32)})
    for optional in ("bias", "residual", "bias_u"):
        if optional in good:
            cases.append({k: v for k, v in good.items() if k != optional})
    if isinstance(region, AttentionRegion):
        cases.append({k: v for k, v in good.items() if k != "v"})
    return cases
