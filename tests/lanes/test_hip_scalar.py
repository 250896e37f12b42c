"""hip_scalar: the shared conformance suite plus GPU-only checks of every variant."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from arbiter import FusedRegion, InputError, RowwiseRegion, Status, random_inputs
from arbiter.check import compare, poison, reference, untouched_count
from arbiter.lane import Config, KernelSource, get_lane
from arbiter.measure import Measurement, build_candidate
from arbiter.region import output_shape
from arbiter.settings import override
from arbiter.testing import LaneConformance

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory):
    if os.environ.get("ARBITER_CACHE_DIR"):
        yield
        return
    with override(cache_dir=tmp_path_factory.mktemp("hip-cache")):
        yield


class TestHipScalarConformance(LaneConformance):
    lane_name = "hip_scalar"


@pytest.fixture(scope="module")
def lane():
    ln = get_lane("hip_scalar")
    av = ln.available()
    if not av:
        pytest.skip(f"hip_scalar not available here: {av.reason}")
    return ln


ODD_REGIONS = (
    FusedRegion(1, 17, 3, name="mm_1x17x3", epilogue=("bias", "gelu"), residual=True),
    FusedRegion(33, 65, 31, name="mm_odd_softmax", prologue=("tanh",), epilogue=("bias",),
                reduction="softmax"),
    FusedRegion(70, 130, 20, name="mm_odd_layer_norm", residual=True, reduction="layer_norm"),
    RowwiseRegion(1, 17, name="row_1x17_softmax", epilogue=("bias",), reduction="softmax"),
    RowwiseRegion(67, 1000, name="row_odd_layer_norm", epilogue=("bias",), residual=True,
                  reduction="layer_norm"),
    RowwiseRegion(3, 4100, name="row_rmsnorm", epilogue=("silu",), reduction="rmsnorm"),
    RowwiseRegion(130, 257, name="row_sigmoid_residual", epilogue=("sigmoid",), residual=True),
)


@pytest.mark.parametrize("region", ODD_REGIONS, ids=[r.name for r in ODD_REGIONS])
def test_every_variant_matches_oracle(lane, region):
    configs = list(lane.space(region).configs())
    with ThreadPoolExecutor(max(2, min(12, os.cpu_count() or 2))) as pool:
        built = list(pool.map(lambda c: build_candidate(lane, region, c), configs))
    failures = []
    for config, art in zip(configs, built):
        if isinstance(art, Measurement):
            failures.append(f"{config}: {art.status.value} {art.log[:2000]}")
            continue
        runner = lane.runner(art, region)
        try:
            inputs = random_inputs(region, int(np.random.default_rng().integers(1 << 31)))
            out = np.empty(output_shape(region), np.float32)
            poison(out)
            runner.run(inputs, out)
            v = compare(out, reference(region, inputs), 1e-3)
            if v.status is not Status.OK:
                failures.append(f"{config}: {v.status.value} rel={v.rel_error} {v.detail}")
        finally:
            runner.close()
    assert not failures, f"{len(failures)}/{len(configs)} configs failed:\n" + "\n".join(failures)


def test_bad_shapes_rejected_before_launch(lane):
    region = FusedRegion(8, 16, 4, epilogue=("bias",))
    art = build_candidate(lane, region, lane.space(region).default)
    runner = lane.runner(art, region)
    try:
        good = random_inputs(region, 0)
        out = np.empty(output_shape(region), np.float32)
        with pytest.raises(InputError):
            runner.run({**good, "B": np.ones((5, 16), np.float32)}, out)  # rows of B != K
        with pytest.raises(InputError):
            runner.run({k: v for k, v in good.items() if k != "bias"}, out)
        runner.run(good, out)  # still usable afterwards
        assert untouched_count(out) == 0
    finally:
        runner.close()
    other = FusedRegion(8, 16, 5, epilogue=("bias",))
    with pytest.raises(RuntimeError, match="built for"):
        lane.runner(art, other)  # a library for K=4 is refused for K=5 before any launch


def test_output_is_poisoned_on_device(lane):
    """A kernel that writes nothing reads back as the poison pattern, not stale memory."""
    region = RowwiseRegion(4, 33, epilogue=("relu",))
    text = (
        '#include "arb_gpu.h"\n#define ARB_N_INPUTS 1\n'
        "static const long long arb_input_elems[ARB_N_INPUTS] = {132LL};\n"
        "static const long long arb_output_elems = 132LL;\n"
        "static hipError_t arb_launch(const float* const* in, float* out, hipStream_t s)\n"
        "{ (void)in; (void)out; (void)s; return hipSuccess; }\n#include \"arb_runner.h\"\n"
    )
    art = lane.build(KernelSource("hip_scalar", region.key, Config(), "hip", text))
    runner = lane.runner(art, region)
    try:
        out = np.zeros(output_shape(region), np.float32)
        runner.run(random_inputs(region, 0), out)
        assert untouched_count(out) == out.size
    finally:
        runner.close()


def test_timing_rotates_sets_and_is_positive(lane):
    region = RowwiseRegion(256, 1024, reduction="softmax")
    runner = lane.runner(build_candidate(lane, region, lane.space(region).default), region)
    try:
        samples = runner.time([random_inputs(region, s) for s in range(3)], warmup=2, repeats=9)
        assert len(samples) == 9 and all(0 < s < 1 for s in samples)
        assert runner.timing_method == "cuda_events" or runner.timing_method == "hip_events"
    finally:
        runner.close()
