"""The x86 C lane's generic f32 attention kernel against the float64 oracle (CPU, runs in CI)."""

from __future__ import annotations

import secrets

import numpy as np
import pytest
from arbiter.lanes.x86_c import lane

from arbiter.check import poison, random_inputs, reference, verify
from arbiter.lane import Status
from arbiter.measure import Measurement, build_candidate
from arbiter.region import AttentionRegion, output_shape

REGIONS = [
    AttentionRegion(1, 2, 37, 64, name="odd", seq_k=53),
    AttentionRegion(1, 2, 90, 32, name="causal_q_gt_k", seq_k=37, causal=True),
    AttentionRegion(2, 1, 33, 128, name="causal_q_lt_k", seq_k=301, causal=True),
    AttentionRegion(1, 1, 20, 48, name="d48_scale", seq_k=7, scale=1.7),
    AttentionRegion(1, 1, 1, 16, name="one_query_causal", seq_k=1, causal=True),
]


@pytest.fixture
def c_lane():
    av = lane.available()
    if not av:
        pytest.skip(f"x86_c unavailable: {av.reason}")
    return lane


def _runner(region, **overrides):
    space = lane.space(region)
    config = space.complete({**space.default.as_dict(), **overrides})
    built = build_candidate(lane, region, config)
    assert not isinstance(built, Measurement), built.log
    return lane.runner(built, region)


@pytest.mark.parametrize("key_block", [32, 512])
@pytest.mark.parametrize("region", REGIONS, ids=[r.name for r in REGIONS])
def test_matches_oracle(c_lane, region, key_block) -> None:
    assert lane.applies_to(region) is None
    runner = _runner(region, key_block=key_block, threads=lane.space(region).default["threads"])
    try:
        verdict, log = verify(runner, region, 1e-5, [secrets.randbits(31)])
        assert verdict.status is Status.OK, log
    finally:
        runner.close()


def test_rows_that_see_no_key_are_zero(c_lane) -> None:
    region = AttentionRegion(1, 2, 50, 64, seq_k=20, causal=True, name="masked")
    runner = _runner(region, fast_math=True)
    try:
        inputs = random_inputs(region, secrets.randbits(31))
        out = np.empty(output_shape(region), np.float32)
        poison(out)
        runner.run(inputs, out)
        assert np.all(out[:, :, :30] == 0.0)
        assert np.allclose(out, reference(region, inputs), atol=1e-5)
    finally:
        runner.close()
