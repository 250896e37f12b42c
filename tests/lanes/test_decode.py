"""decode lane: the shared conformance suite on decode-shaped regions, the edges a split-KV
kernel can get wrong (GPU only), and what must hold without a GPU (claims, space rules, emit
refusals)."""

from __future__ import annotations

import dataclasses
import secrets

import numpy as np
import pytest
from arbiter.lanes.decode import lane
from arbiter.lanes.decode.emit import emit, tile_keys
from arbiter.lanes.decode.lane import REGISTER_BUDGET, registers, space_for

from arbiter.check import budget_of, poison, random_inputs, reference, verify
from arbiter.lane import Config, EmitError, Platform, Status
from arbiter.measure import Measurement, build_candidate
from arbiter.region import AttentionRegion, FusedRegion, output_shape
from arbiter.testing import CONFORMANCE_REGIONS, LaneConformance

DTYPES = lane.dtypes

# Decode shapes: few queries, long and odd key counts, both causal alignments.
DECODE_REGIONS = (
    AttentionRegion(2, 3, 1, 128, name="dec_one_query", seq_k=1000),
    AttentionRegion(1, 4, 5, 64, name="dec_five_causal", seq_k=4097, causal=True),
    AttentionRegion(2, 2, 5, 128, name="dec_five_top_left", seq_k=777, causal="top_left"),
    AttentionRegion(1, 2, 16, 96, name="dec_sixteen_causal", seq_k=301, causal=True,
                    scale=0.3),
    AttentionRegion(2, 4, 1, 128, name="dec_bf16_one_query", seq_k=2049, dtype="bf16"),
    AttentionRegion(1, 3, 3, 64, name="dec_f16_causal", seq_k=1500, causal=True, dtype="f16"),
)
REGIONS = CONFORMANCE_REGIONS + DECODE_REGIONS
SAMPLED = CONFORMANCE_REGIONS[::3] + DECODE_REGIONS


def _ids(regions) -> list[str]:
    return [r.name for r in regions]


@pytest.mark.gpu  # its GPU parts skip with a reason without one; `-m gpu` must select them
class TestDecodeLane(LaneConformance):
    """The conformance suite; its regions have seq_q > 16 (the lane declines them), so the
    region checks run on the conformance regions and DECODE_REGIONS together."""

    lane_name = "decode"

    @pytest.mark.parametrize("region", REGIONS, ids=_ids(REGIONS))
    def test_default_matches_oracle(self, lane, region) -> None:
        super().test_default_matches_oracle(lane, region)

    @pytest.mark.parametrize("region", SAMPLED, ids=_ids(SAMPLED))
    def test_sampled_configs_match_oracle(self, lane, region) -> None:
        super().test_sampled_configs_match_oracle(lane, region)

    @pytest.mark.parametrize("region", REGIONS, ids=_ids(REGIONS))
    def test_rejects_bad_inputs_before_launch(self, lane, region) -> None:
        super().test_rejects_bad_inputs_before_launch(lane, region)

    def test_claims_something(self, lane) -> None:
        assert all(lane.applies_to(r) is None for r in DECODE_REGIONS)

    def test_time_returns_positive_samples(self, lane, monkeypatch) -> None:
        monkeypatch.setattr("arbiter.testing.CONFORMANCE_REGIONS", DECODE_REGIONS)
        super().test_time_returns_positive_samples(lane)

    def test_emit_names_region_and_config(self, lane, monkeypatch) -> None:
        monkeypatch.setattr("arbiter.testing.CONFORMANCE_REGIONS", DECODE_REGIONS)
        super().test_emit_names_region_and_config(lane)


def _gpu() -> None:
    av = lane.available()
    if not av:
        pytest.skip(f"decode needs a GPU: {av.reason}")


def _stored(region: AttentionRegion, dtype: str) -> AttentionRegion:
    return region if dtype == "f32" else dataclasses.replace(region, dtype=dtype)


def _runner(region, **overrides):
    space = lane.space(region)
    config = space.complete({**space.default.as_dict(), **overrides})
    assert space.violation(config) is None, space.violation(config)
    built = build_candidate(lane, region, config)
    if isinstance(built, Measurement):
        pytest.fail(f"{config}: {built.status.value}\n{built.log}")
    return lane.runner(built, region), config


def _check(region, **overrides) -> None:
    runner, config = _runner(region, **overrides)
    try:
        verdict, log = verify(runner, region, budget_of(region), [secrets.randbits(31)])
        assert verdict.status is Status.OK, f"{config}: {verdict.detail}\n{log}"
    finally:
        runner.close()


EDGE_REGIONS = [
    AttentionRegion(2, 3, 1, 128, name="q1_k4097", seq_k=4097),
    AttentionRegion(1, 2, 1, 128, name="q1_causal", seq_k=1000, causal=True),
    AttentionRegion(1, 2, 1, 64, name="q1_top_left_sees_one_key", seq_k=1000, causal="top_left"),
    AttentionRegion(1, 3, 5, 128, name="q5_causal", seq_k=4097, causal=True),
    AttentionRegion(2, 2, 5, 64, name="q5_top_left", seq_k=1000, causal="top_left"),
    AttentionRegion(1, 2, 16, 128, name="q16_odd", seq_k=333),
    AttentionRegion(1, 2, 16, 64, name="q16_causal_q_gt_k", seq_k=5, causal=True),
    AttentionRegion(1, 1, 3, 64, name="k1", seq_k=1),
    # head_dims: one lane a row (8), rows of 3 and 25 lanes (a group padded to 4 and 32), 256
    AttentionRegion(1, 2, 2, 8, name="d8", seq_k=999, causal="top_left"),
    AttentionRegion(1, 2, 3, 24, name="d24", seq_k=517, causal=True),
    AttentionRegion(1, 2, 4, 200, name="d200", seq_k=300, scale=0.05),
    AttentionRegion(2, 1, 7, 256, name="d256_causal", seq_k=1500, causal=True),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("region", EDGE_REGIONS, ids=_ids(EDGE_REGIONS))
def test_edges_match_oracle(region, dtype) -> None:
    _gpu()
    _check(_stored(region, dtype))


TILINGS = [
    {"split_keys": 64, "warps": 1, "keys_per_thread": 1, "queries_per_block": 1},
    {"split_keys": 128, "warps": 2, "keys_per_thread": 2, "queries_per_block": 2},
    {"split_keys": 256, "warps": 8, "keys_per_thread": 1, "queries_per_block": 8},
    {"split_keys": 512, "warps": 4, "keys_per_thread": 4, "queries_per_block": 4},
    {"split_keys": 1024, "warps": 8, "keys_per_thread": 8, "queries_per_block": 1},
]


@pytest.mark.gpu
@pytest.mark.parametrize("config", TILINGS,
                         ids=lambda c: "s{split_keys}w{warps}k{keys_per_thread}q{queries_per_block}"
                         .format(**c))
@pytest.mark.parametrize("causal", [False, True, "top_left"])
def test_splits_and_tilings_match_oracle(config, causal) -> None:
    """seq_k 1000 is a multiple of no split: the last chunk is ragged, and 5 queries leave a
    padded query group; a top-left mask leaves most splits empty."""
    _gpu()
    _check(AttentionRegion(2, 2, 5, 128, seq_k=1000, causal=causal), **config)


@pytest.mark.gpu
def test_queries_that_see_no_key_are_exact_zeros() -> None:
    _gpu()
    region = AttentionRegion(1, 2, 16, 64, seq_k=10, causal=True)  # queries 0..5 see no key
    runner, _ = _runner(region)
    try:
        inputs = random_inputs(region, secrets.randbits(31))
        out = np.empty(output_shape(region), inputs["q"].dtype)
        poison(out)
        runner.run(inputs, out)
        assert np.all(out[:, :, :6] == 0)
        ref = reference(region, inputs)
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < budget_of(region)
    finally:
        runner.close()


@pytest.mark.gpu
def test_workspace_survives_fresh_inputs_and_release() -> None:
    """The splits' workspace outlives a call: every input set must be merged from its own
    partials, and a runner re-prepared (workspace freed by arbiter_release) must still work."""
    _gpu()
    region = AttentionRegion(2, 4, 3, 128, seq_k=3000, causal=True)
    runner, config = _runner(region, split_keys=256)
    try:
        for _ in range(2):
            for seed in (secrets.randbits(31), secrets.randbits(31)):
                inputs = random_inputs(region, seed)
                out = np.empty(output_shape(region), inputs["q"].dtype)
                poison(out)
                runner.run(inputs, out)
                ref = reference(region, inputs)
                err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
                assert err < budget_of(region), f"{config}: {err}"
            assert runner.time([random_inputs(region, 1)], warmup=1, repeats=3)
    finally:
        runner.close()


# -- no GPU needed -----------------------------------------------------------------------------


def test_applies_to_gives_reasons() -> None:
    assert lane.applies_to(AttentionRegion(4, 16, 1, 128, seq_k=16384)) is None
    assert lane.applies_to(AttentionRegion(1, 1, 16, 72, seq_k=100, causal=True)) is None
    assert lane.applies_to(AttentionRegion(1, 1, 64, 64)) == "decode: seq_q 64 > 16, fa2's shape"
    assert "head_dim 12" in lane.applies_to(AttentionRegion(1, 1, 1, 12, seq_k=64))
    assert "head_dim 264" in lane.applies_to(AttentionRegion(1, 1, 1, 264, seq_k=64))
    assert "attention" in lane.applies_to(FusedRegion(8, 8, 8))
    assert set(lane.dtypes) == {"f32", "f16", "bf16"}


@pytest.mark.parametrize("platform", [Platform.CUDA, Platform.ROCM])
@pytest.mark.parametrize("shape", [(4, 16, 1, 128, 16384), (2, 8, 1, 128, 4096),
                                   (8, 32, 1, 128, 32768), (1, 2, 16, 64, 301),
                                   (1, 1, 5, 8, 100), (1, 1, 3, 200, 4097)])
def test_space_rules(platform, shape) -> None:
    b, h, sq, d, sk = shape
    region = AttentionRegion(b, h, sq, d, seq_k=sk)
    space = space_for(region, platform)
    assert space.violation(space.default) is None
    configs = list(space.configs())
    assert configs
    for c in configs:
        assert c["split_keys"] % tile_keys(d, c) == 0
        assert registers(region, c) <= REGISTER_BUDGET
        assert c["queries_per_block"] <= 16
    bad = space.complete({**space.default.as_dict(), "split_keys": 64, "warps": 8,
                          "keys_per_thread": 8})
    if tile_keys(d, bad) > 64:
        assert "multiple" in space.violation(bad)


@pytest.mark.parametrize("platform", [Platform.CUDA, Platform.ROCM])
def test_every_edge_default_is_valid(platform) -> None:
    for region in EDGE_REGIONS + list(DECODE_REGIONS):
        for dtype in DTYPES:
            space = space_for(_stored(region, dtype), platform)
            assert space.violation(space.default) is None, (region.name, dtype)


def test_tilings_tested_on_the_gpu_are_valid() -> None:
    space = lane.space(AttentionRegion(2, 2, 5, 128, seq_k=1000))
    for config in TILINGS:
        assert space.violation(space.complete(config)) is None, config


def test_default_split_fills_the_h200() -> None:
    """Large decode batches take long chunks; small ones split finer to fill 132 SMs."""
    big = space_for(AttentionRegion(8, 32, 1, 128, seq_k=32768), Platform.CUDA).default
    small = space_for(AttentionRegion(2, 8, 1, 128, seq_k=4096), Platform.CUDA).default
    assert big["split_keys"] > small["split_keys"]
    assert 8 * 32 * -(-32768 // big["split_keys"]) >= 256
    assert 2 * 8 * -(-4096 // small["split_keys"]) >= 256


def test_emit_records_region_and_refuses_what_it_cannot_do() -> None:
    region = AttentionRegion(2, 3, 5, 64, seq_k=1001, causal="top_left", scale=0.3)
    config = lane.space(region).default
    src = emit(region, config, Platform.CUDA)
    assert region.key in src.text and "#define DEC_CAUSAL 1" in src.text
    assert "#define DEC_OFF 0" in src.text and "#define DEC_SK 1001" in src.text
    splits = -(-1001 // config["split_keys"])
    assert f"#define DEC_SPLITS {splits}" in src.text
    bottom = emit(dataclasses.replace(region, causal=True), config, Platform.CUDA)
    assert "#define DEC_OFF 996" in bottom.text
    with pytest.raises(EmitError, match="seq_q"):
        emit(AttentionRegion(1, 1, 17, 64), config, Platform.CUDA)
    with pytest.raises(EmitError, match="head_dim"):
        emit(AttentionRegion(1, 1, 1, 12), config, Platform.CUDA)
    with pytest.raises(EmitError, match="multiple"):
        emit(region, Config.of(split_keys=64, warps=8, keys_per_thread=8, queries_per_block=1),
             Platform.CUDA)
