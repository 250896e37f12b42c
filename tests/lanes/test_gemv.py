"""gemv on a GPU: the shared conformance suite, then skinny shapes (M = 1, 3, 5, 16) with odd N
and K in every storage dtype, every epilogue op, residual and prologue, K split or not, both
paths (the mma path on 16-bit shapes whose N and K are multiples of 8, with column and K tails
and splits that end past K), and the split's ticket counters surviving many launches. Skips
without a GPU."""

from __future__ import annotations

import secrets

import numpy as np
import pytest

from arbiter import FusedRegion
from arbiter.check import budget_of, poison, random_inputs, verify
from arbiter.lane import Config, Status, get_lane
from arbiter.measure import Measurement, build_candidate
from arbiter.region import numpy_dtype, output_shape
from arbiter.testing import LaneConformance

pytestmark = pytest.mark.gpu

DTYPES = ("f32", "f16", "bf16")
SKINNY = (
    FusedRegion(1, 4097, 1023, name="m1_bias_gelu", epilogue=("bias", "gelu")),
    FusedRegion(3, 515, 257, name="m3_prologue_residual", prologue=("silu",),
                epilogue=("bias", "relu"), residual=True),
    FusedRegion(16, 1029, 333, name="m16_sigmoid", epilogue=("sigmoid",)),
    FusedRegion(16, 70, 4099, name="m16_narrow_deep", prologue=("tanh",), epilogue=("tanh",),
                residual=True),
    FusedRegion(5, 8, 1, name="k1", epilogue=("bias", "silu")),
    # the mma path's shapes: a column tail (1032 = 8 * 129), K tails past a stage, K split in
    # ranges that end past K
    FusedRegion(5, 1032, 4104, name="m5_mma_tails", prologue=("silu",),
                epilogue=("bias", "relu"), residual=True),
    FusedRegion(16, 264, 56, name="m16_mma_short_k", epilogue=("sigmoid",)),
    FusedRegion(1, 4096, 1024, name="m1_mma", epilogue=("bias", "gelu")),
)
# the mma path's tilings: (16-column tiles per warp, threads, stages)
MMA = ({"cols": 8, "threads": 128, "unroll": 2}, {"cols": 4, "threads": 64, "unroll": 4},
       {"cols": 8, "threads": 256, "unroll": 1})
OPS = ("relu", "gelu", "silu", "sigmoid", "tanh")


def _of(region: FusedRegion, dtype: str) -> FusedRegion:
    return FusedRegion(region.M, region.N, region.K, name=f"{dtype}_{region.name}",
                       prologue=region.prologue, epilogue=region.epilogue,
                       residual=region.residual, dtype=dtype)


class TestGemvConformance(LaneConformance):
    lane_name = "gemv"


@pytest.fixture
def lane():
    lane = get_lane("gemv")
    av = lane.available()
    if not av:
        pytest.skip(f"gemv not available here: {av.reason}")
    return lane


def _check(lane, region: FusedRegion, config: Config, seeds: int = 1) -> float:
    assert lane.space(region).violation(config) is None, config
    built = build_candidate(lane, region, config)
    assert not isinstance(built, Measurement), built.log
    runner = lane.runner(built, region)
    try:
        verdict, log = verify(runner, region, budget_of(region),
                              [secrets.randbits(31) for _ in range(seeds)])
        assert verdict.status is Status.OK, f"{region.name} {config}: {verdict.detail}\n{log}"
        return float(verdict.rel_error or 0.0)
    finally:
        runner.close()


def _configs(lane, region: FusedRegion) -> list[Config]:
    """The default, K unsplit, the deepest valid split, and another column width; on the mma
    path, where it computes the region, each of MMA unsplit and at the deepest valid split."""
    space = lane.space(region)
    picks = [space.default, space.complete({"split_k": 1})]
    splits = [c for c in space.configs()
              if all(c[k] == space.default[k] for k in ("path", "cols", "threads", "unroll"))]
    picks.append(max(splits, key=lambda c: c["split_k"]))
    for tiling in MMA:
        mma = [c for c in space.configs()
               if c["path"] == "mma" and all(c[k] == v for k, v in tiling.items())]
        if mma:
            picks += [min(mma, key=lambda c: c["split_k"]), max(mma, key=lambda c: c["split_k"])]
    for cols in (4, 8, 16):
        cfg = space.complete({"cols": cols, "unroll": 2, "threads": 128})
        if cols != space.default["cols"] and space.violation(cfg) is None:
            picks.append(cfg)
            break
    return list(dict.fromkeys(picks))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("base", SKINNY, ids=[r.name for r in SKINNY])
def test_skinny_shapes_match_oracle(lane, base, dtype) -> None:
    region = _of(base, dtype)
    for config in _configs(lane, region):
        _check(lane, region, config)


@pytest.mark.parametrize("dtype", ("f32", "bf16"))
@pytest.mark.parametrize("op", OPS)
def test_every_epilogue_op(lane, op, dtype) -> None:
    region = FusedRegion(2, 257, 129, name=f"op_{op}", epilogue=("bias", op), residual=True,
                         dtype=dtype)
    _check(lane, region, lane.space(region).default, seeds=2)
    prologue = FusedRegion(4, 131, 67, name=f"pro_{op}", prologue=(op,), dtype=dtype)
    _check(lane, prologue, lane.space(prologue).default)
    if dtype != "f32":  # the mma path rounds prologue(A) to the storage type
        mma = FusedRegion(4, 136, 72, name=f"mma_{op}", prologue=(op,), epilogue=("bias", op),
                          residual=True, dtype=dtype)
        _check(lane, mma, lane.space(mma).complete({"path": "mma", "cols": 4, "unroll": 2}))


def test_split_tickets_reset_across_launches(lane) -> None:
    """The last block of a split resets its tile's ticket: many timed launches later, the
    same inputs give the same bits."""
    region = FusedRegion(4, 2000, 3000, name="tickets", epilogue=("bias", "gelu"), dtype="bf16")
    config = lane.space(region).complete({"split_k": 16})
    built = build_candidate(lane, region, config)
    assert not isinstance(built, Measurement), built.log
    runner = lane.runner(built, region)
    try:
        inputs = random_inputs(region, 7)
        outs = []
        for _ in range(2):
            out = np.empty(output_shape(region), numpy_dtype(region.dtype))
            poison(out)
            runner.run(inputs, out)
            outs.append(out.view(np.uint16).copy())
            assert all(s > 0 for s in runner.time([inputs], warmup=3, repeats=50))
        assert np.array_equal(outs[0], outs[1])
    finally:
        runner.close()
