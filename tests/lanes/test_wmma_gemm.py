"""wmma_gemm on a GPU: the shared conformance suite, plus the precision contract (f16 passes the
default 1e-3 budget, bf16 needs a looser one) and edge shapes. Skips without a GPU."""

from __future__ import annotations

import secrets

import numpy as np
import pytest

from arbiter import FusedRegion
from arbiter.check import compare, poison, random_inputs, reference, verify
from arbiter.lane import Status, get_lane
from arbiter.measure import Measurement, build_candidate
from arbiter.region import output_shape
from arbiter.testing import CONFORMANCE_REGIONS, LaneConformance

pytestmark = pytest.mark.gpu

BF16_BUDGET = 1e-2  # bf16 operands land at 2e-3..5e-3 relative error on unit-variance data
# f32 storage: the operand precision is a choice there (16-bit storage computes in its own)
FUSED = tuple(r for r in CONFORMANCE_REGIONS if isinstance(r, FusedRegion) and r.dtype == "f32")
EDGES = (
    FusedRegion(1, 1, 1, name="one", epilogue=("bias",)),
    FusedRegion(130, 70, 257, name="ragged", prologue=("sigmoid",), epilogue=("relu",),
                residual=True),
    FusedRegion(257, 513, 100, name="ragged_softmax", epilogue=("bias",), reduction="softmax"),
)


class TestWmmaGemmConformance(LaneConformance):
    lane_name = "wmma_gemm"
    budget = BF16_BUDGET  # sampled configs may compute in bf16


@pytest.fixture
def lane():
    lane = get_lane("wmma_gemm")
    av = lane.available()
    if not av:
        pytest.skip(f"wmma_gemm not available here: {av.reason}")
    return lane


def _run(lane, region, config) -> tuple[dict, np.ndarray]:
    built = build_candidate(lane, region, config)
    assert not isinstance(built, Measurement), built.log
    runner = lane.runner(built, region)
    try:
        inputs = random_inputs(region, secrets.randbits(31))
        out = np.empty(output_shape(region), np.float32)
        poison(out)
        runner.run(inputs, out)
        return inputs, out
    finally:
        runner.close()


def _error(lane, region, config) -> float:
    inputs, out = _run(lane, region, config)
    v = compare(out, reference(region, inputs), 1.0)
    assert v.status is Status.OK, v.detail
    return float(v.rel_error)


# Largest relative error of one product of two operands rounded to 16 bits (either rounding
# mode): 2 * 2^-10 for f16, 2 * 2^-7 for bf16 (8-bit significand, truncation allowed).
PRODUCT_ERROR = {"f16": 2.0**-9, "bf16": 2.0**-6}


@pytest.mark.parametrize("region", FUSED + EDGES, ids=[r.name for r in FUSED + EDGES])
@pytest.mark.parametrize("staging", ["inline", "prepass"])
def test_f16_passes_default_budget_bf16_a_looser_one(lane, region, staging) -> None:
    space = lane.space(region)
    if region.M * region.N * region.K == 1:
        # One product, no averaging: the relative error of a*b + bias is unbounded when the
        # bias cancels the product, so judge the error against the product's own rounding.
        for precision, bound in PRODUCT_ERROR.items():
            cfg = space.complete({"staging": staging, "stages": 2, "precision": precision})
            inputs, out = _run(lane, region, cfg)
            product = float(inputs["A"][0, 0]) * float(inputs["B"][0, 0])
            got = float(out[0, 0]) - float(inputs["bias"][0])
            assert abs(got - product) <= bound * abs(product) + 1e-6, (precision, got, product)
        return
    f16 = space.complete({"staging": staging, "stages": 2})
    bf16 = space.complete({"staging": staging, "stages": 2, "precision": "bf16"})
    e16, eb16 = _error(lane, region, f16), _error(lane, region, bf16)
    print(f"{region.name} {staging}: f16 rel_error {e16:.3g}, bf16 {eb16:.3g}")
    assert e16 <= 1e-3
    assert eb16 <= BF16_BUDGET


def test_prepass_and_inline_agree_on_many_seeds(lane) -> None:
    region = FusedRegion(96, 80, 72, name="agree", prologue=("tanh",), epilogue=("bias", "silu"))
    space = lane.space(region)
    for staging in ("inline", "prepass"):
        runner = lane.runner(build_candidate(lane, region, space.complete(
            {"staging": staging, "stages": 2})), region)
        try:
            verdict, log = verify(runner, region, 1e-3, [secrets.randbits(31) for _ in range(4)])
            assert verdict.status is Status.OK, log
        finally:
            runner.close()
