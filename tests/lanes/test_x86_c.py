from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arbiter import (
    AttentionRegion,
    FusedRegion,
    GatedRegion,
    InputError,
    Measurement,
    RowwiseRegion,
    Status,
    random_inputs,
)
from arbiter.check import (
    budget_of,
    compare,
    fresh_seeds,
    frobenius,
    poison,
    reference,
    untouched_count,
)
from arbiter.cli import main as cli_main
from arbiter.lane import get_lane
from arbiter.measure import Worker, build_candidate
from arbiter.region import numpy_dtype, output_shape
from arbiter.settings import override
from arbiter.testing import LaneConformance

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "regions.toml"


@pytest.fixture(autouse=True, scope="module")
def _cache_dir(tmp_path_factory):
    with override(cache_dir=tmp_path_factory.mktemp("x86c-cache")):
        yield


@pytest.fixture(scope="module")
def lane():
    ln = get_lane("x86_c")
    av = ln.available()
    if not av:
        pytest.skip(f"x86_c not available here: {av.reason}")
    return ln


class TestX86CConformance(LaneConformance):
    lane_name = "x86_c"


def _run(lane, region, overrides, inputs):
    """The lane's output for `inputs` under config `overrides`, in the storage dtype, from a
    poisoned buffer."""
    config = lane.space(region).complete(overrides)
    problem = lane.space(region).violation(config)
    if problem:  # (a tile for AVX-512's 32 vector registers, on a CPU without them)
        pytest.skip(f"{config} is not a config on this CPU: {problem}")
    built = build_candidate(lane, region, config)
    assert not isinstance(built, Measurement), built.log
    runner = lane.runner(built, region)
    try:
        out = np.empty(output_shape(region), numpy_dtype(region.dtype))
        poison(out)
        runner.run(inputs, out)
        return out
    finally:
        runner.close()


def _verdict(lane, region, overrides, seed=0, budget=1e-5):
    inputs = random_inputs(region, seed)
    return compare(_run(lane, region, overrides, inputs), reference(region, inputs), budget)


def test_every_example_region_passes_check(lane, capsys):
    assert cli_main(["check", str(EXAMPLES), "--lanes", "x86_c"]) == 0
    out = capsys.readouterr().out
    assert "prologue_silu_mm" in out and "row_gelu_residual" in out


@pytest.mark.parametrize(
    ("region", "overrides"),
    [
        (FusedRegion(1, 17, 3, epilogue=("bias", "gelu")), {"tile": "12x32", "mc": 48}),
        # two row blocks (second partial), three K blocks (last partial), ragged last panel
        (FusedRegion(61, 70, 300, prologue=("tanh",), epilogue=("bias",), residual=True),
         {"tile": "6x16", "mc": 48, "kc": 128, "threads": 1}),
        (FusedRegion(97, 33, 129, epilogue=("relu",), reduction="layer_norm"),
         {"tile": "6x16", "mc": 48, "kc": 128, "vec": 256}),
        (FusedRegion(5, 1, 7, reduction="softmax"), {}),
        (RowwiseRegion(3, 1, reduction="softmax"), {"row_block": 64}),
        (RowwiseRegion(7, 33, epilogue=("bias", "sigmoid"), reduction="rmsnorm"),
         {"stream": False, "schedule": "static", "row_block": 1}),
        (RowwiseRegion(13, 1031, epilogue=("tanh",), residual=True), {"vec": 256}),
    ],
    ids=lambda v: v.describe() if hasattr(v, "describe") else "",
)
def test_odd_sizes_and_edges(lane, region, overrides):
    v = _verdict(lane, region, overrides)
    assert v.status is Status.OK, (v.status, v.rel_error, v.detail)


def test_fast_math_error_is_measured_not_assumed(lane):
    region = FusedRegion(64, 96, 48, epilogue=("bias", "gelu"), reduction="softmax")
    space = lane.space(region)
    exact, fast = (_checked(lane, region, space.complete({"fast_math": f}))
                   for f in (False, True))
    for m in (exact, fast):
        assert m.status is Status.OK, m.log
        assert m.rel_error is not None and 0 <= m.rel_error < 1e-5
        assert m.max_abs is not None
    assert "-fassociative-math" in lane.emit(region, space.complete({"fast_math": True})).options
    assert "-fassociative-math" not in lane.emit(region, space.default).options


def test_a_fast_math_kernel_leaves_the_process_fp_mode_alone(lane):
    # -ffast-math itself would link crtfastmath.o, which sets flush-to-zero and
    # denormals-are-zero for the whole process on load
    region = RowwiseRegion(3, 40, epilogue=("gelu",), reduction="softmax")
    subnormal = np.float32(1e-40)
    assert _verdict(lane, region, {"fast_math": True}).status is Status.OK
    assert subnormal * np.float32(1.0) == subnormal


def _checked(lane, region, config) -> Measurement:
    built = build_candidate(lane, region, config)
    assert not isinstance(built, Measurement), built.log
    with Worker() as worker:
        return worker.check(lane.name, region, built, 1e-3, seeds=fresh_seeds())


def _bad_cases(region):
    good = random_inputs(region, 0)
    first = "B" if isinstance(region, FusedRegion) else "X"
    rows, cols = good[first].shape
    return [
        {**good, first: np.ones((rows + 1, cols), np.float32)},  # B rows != K
        {**good, first: good[first].astype(np.float64)},
        {**good, first: good[first].astype(np.float16)},
        {k: v for k, v in good.items() if k != "bias"},
        {k: v for k, v in good.items() if k != "residual"},
        {**good, "bias": None},
        {**good, "bias": np.ones((region.N + 1,), np.float32)},
        {**good, "residual": good["residual"][:, :1]},
    ]


@pytest.mark.parametrize(
    "region",
    [FusedRegion(8, 24, 16, epilogue=("bias",), residual=True),
     RowwiseRegion(8, 24, epilogue=("bias",), residual=True)],
    ids=["fused", "rowwise"],
)
def test_bad_inputs_raise_before_c_is_called(lane, region):
    built = build_candidate(lane, region, lane.space(region).default)
    runner = lane.runner(built, region)

    def never(*_args):
        raise AssertionError("native code was called with bad inputs")

    runner._run = never
    good_out = np.empty(output_shape(region), np.float32)
    for bad in _bad_cases(region):
        with pytest.raises(InputError):
            runner.run(bad, good_out)
        with pytest.raises(InputError):
            runner.time([bad], warmup=0, repeats=1)
    good = random_inputs(region, 0)
    for out in (np.empty((region.M, region.N), np.float64),
                np.empty((region.N, region.M), np.float32),
                np.empty((region.M, 2 * region.N), np.float32)[:, ::2]):
        with pytest.raises(InputError):
            runner.run(good, out)


def test_second_build_is_a_cache_hit(lane, monkeypatch):
    from arbiter.lanes.x86_c import build as build_mod

    region = RowwiseRegion(4, 40, epilogue=("silu",), reduction="rmsnorm")
    source = lane.emit(region, lane.space(region).complete({"row_block": 4}))
    first = lane.build(source)
    assert Path(first.path).is_file()
    mtime = Path(first.path).stat().st_mtime_ns

    def no_compiler(argv, *a, **k):
        raise AssertionError(f"recompiled: {argv}")

    monkeypatch.setattr(build_mod, "run_tool", no_compiler)
    second = lane.build(source)
    assert second.cached and second.path == first.path and second.key == first.key
    assert second.compile_seconds == 0.0
    assert Path(second.path).stat().st_mtime_ns == mtime
    # a different config is a different binary
    monkeypatch.undo()
    other = lane.build(lane.emit(region, lane.space(region).complete({"fast_math": True})))
    assert other.key != first.key and not other.cached


def test_rules_reject_configs_instead_of_crashing(lane):
    region = FusedRegion(64, 64, 64, epilogue=("bias",))
    space = lane.space(region)
    names = {t.name for t in space.tunables}
    assert {"threads", "tile", "mc", "kc", "vec", "fast_math"} <= names
    vec = next(t for t in space.tunables if t.name == "vec")
    tiles = next(t for t in space.tunables if t.name == "tile").choices
    assert "6x16" in tiles
    if "12x32" not in tiles:  # no vector width here holds it: not offered at all
        assert vec.choices == (256,)
    elif 256 in vec.choices:  # AVX-512: it fits 512-bit registers only
        too_many = space.complete({"tile": "12x32", "vec": 256})
        why = space.violation(too_many)
        assert why is not None and "register" in why
        m = build_candidate(lane, region, too_many)
        assert isinstance(m, Measurement) and m.status is Status.INVALID
    assert space.violation(space.complete({"mc": 1000})) is not None
    # small enough to enumerate; each thread count (1, 2, 4, .., cores) multiplies it
    threads = next(t for t in space.tunables if t.name == "threads")
    assert 0 < space.size() <= 160 * len(threads.choices)


def test_rowwise_space_has_no_gemm_knobs(lane):
    space = lane.space(RowwiseRegion(64, 64, reduction="softmax"))
    names = {t.name for t in space.tunables}
    assert not names & {"tile", "mc", "kc"}
    assert {"threads", "row_block", "vec", "fast_math"} <= names
    # small enough to enumerate; each thread count (1, 2, 4, .., cores) multiplies it
    threads = next(t for t in space.tunables if t.name == "threads")
    assert 0 < space.size() <= 160 * len(threads.choices)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_thread_counts_follow_the_cpus_the_process_may_use(lane):
    # a process held to one CPU (taskset, a container's CPU set) is offered one thread, not
    # the machine's count; in a child, so this process's affinity stays as it is
    cpu = min(os.sched_getaffinity(0))
    code = (f"import os; os.sched_setaffinity(0, {{{cpu}}}); "
            "from arbiter import RowwiseRegion; from arbiter.lane import get_lane; "
            "space = get_lane('x86_c').space(RowwiseRegion(64, 64, reduction='softmax')); "
            "print(next(t.choices for t in space.tunables if t.name == 'threads'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "(1,)"
    here = next(t.choices for t in lane.space(RowwiseRegion(64, 64, reduction="softmax"))
                .tunables if t.name == "threads")
    assert here[-1] == len(os.sched_getaffinity(0))


def test_generated_c_is_readable(lane):
    region = FusedRegion(33, 65, 31, prologue=("silu",), epilogue=("bias", "gelu"),
                         reduction="rmsnorm")
    config = lane.space(region).default
    text = lane.emit(region, config).text
    assert region.key in text and region.describe() in text and str(config) in text
    for define in ("#define M ", "#define N ", "#define K ", "#define MC ", "#define KC "):
        assert define in text
    assert ("int arbiter_run(const arb_store_t* const* in, arb_store_t* out, float* work)"
            in text)
    assert "#pragma omp simd reduction(+:row_sq)" in text
    assert "static inline float prologue(float x)" in text


def test_unavailable_without_a_compiler_says_why(lane):
    with override(cc="/nonexistent/arbiter-no-gcc"):
        av = lane.available()
    assert not av and "not found" in av.reason


def test_a_compiler_that_cannot_build_openmp_objects_is_unavailable(lane, tmp_path):
    # `false` exists and answers `--version` with nothing: a compiler that fails every build
    with override(cc="false", cache_dir=tmp_path):
        av = lane.available()
    assert not av and "cannot build OpenMP shared objects" in av.reason
    assert not list(tmp_path.rglob("*.so"))  # a failed probe is not cached as a success


# -- 16-bit storage ---------------------------------------------------------------------------

SIXTEEN = ("f16", "bf16")


@pytest.mark.parametrize("dtype", SIXTEEN)
@pytest.mark.parametrize(
    ("region", "overrides"),
    [
        # reduction after bias and residual; two row blocks (second partial), three K blocks
        (FusedRegion(61, 70, 300, prologue=("tanh",), epilogue=("bias", "gelu"), residual=True,
                     reduction="layer_norm"),
         {"tile": "6x16", "mc": 48, "kc": 128, "threads": 1}),
        (FusedRegion(97, 33, 129, prologue=("silu",), epilogue=("relu",), reduction="softmax"),
         {"tile": "6x16", "mc": 48, "kc": 128, "vec": 256}),
        (FusedRegion(5, 1, 7, epilogue=("bias",), residual=True, reduction="rmsnorm"), {}),
        (RowwiseRegion(13, 1031, epilogue=("bias", "tanh"), residual=True, reduction="rmsnorm"),
         {"stream": True, "row_block": 4}),
        (RowwiseRegion(7, 33, epilogue=("sigmoid",), reduction="layer_norm"),
         {"stream": False, "schedule": "static", "row_block": 1}),
        (GatedRegion(61, 40, 129, activation="gelu", bias=True),
         {"tile": "6x16", "mc": 48, "kc": 128}),
    ],
    ids=["fused_prologue_residual_layernorm", "fused_softmax", "fused_n1_rmsnorm",
         "row_residual_rmsnorm_stream", "row_layernorm", "gated_bias"],
)
def test_16bit_storage_costs_only_the_output_rounding(lane, dtype, region, overrides):
    region = dataclasses.replace(region, dtype=dtype)
    inputs = random_inputs(region, 7)
    out = _run(lane, region, overrides, inputs)
    ref = reference(region, inputs)
    v = compare(out, ref, budget_of(region, None))
    assert v.status is Status.OK, (v.status, v.rel_error, v.detail)
    # the kernel computes in f32: its error is the 16-bit rounding of the exact result, plus
    # f32 noise far below it
    rounded = ref.astype(numpy_dtype(dtype)).astype(np.float64)
    floor = frobenius(rounded - ref) / frobenius(ref)
    assert v.rel_error <= 1.05 * floor + 1e-5, (v.rel_error, floor)


@pytest.mark.parametrize("dtype", SIXTEEN)
@pytest.mark.parametrize(
    ("region", "overrides"),
    [
        (FusedRegion(61, 70, 300, epilogue=("bias",), reduction="softmax"),
         {"tile": "6x16", "mc": 48, "kc": 128}),
        (RowwiseRegion(13, 1031, epilogue=("gelu",)), {"stream": True, "row_block": 4}),
        (RowwiseRegion(13, 1031, epilogue=("gelu",)), {"stream": False}),
        (GatedRegion(61, 40, 33), {"tile": "6x16", "mc": 48}),
        (AttentionRegion(1, 2, 37, 64, seq_k=53, causal=True), {"key_block": 32}),
    ],
    ids=["fused", "row_stream", "row", "gated", "attention"],
)
def test_poisoned_16bit_output_is_overwritten(lane, dtype, region, overrides):
    region = dataclasses.replace(region, dtype=dtype)
    out = _run(lane, region, overrides, random_inputs(region, 3))
    assert untouched_count(out) == 0
    assert np.isfinite(out.astype(np.float32)).all()


def _same_bits(got, want):
    """Equal storage bits, except that any NaN matches any NaN."""
    nan = np.isnan(want.astype(np.float32))
    assert (np.isnan(got.astype(np.float32)) == nan).all()
    bits = np.uint16
    assert (got.view(bits)[~nan] == want.view(bits)[~nan]).all(), (
        np.flatnonzero(got.view(bits) != want.view(bits))[:10])


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("dtype", SIXTEEN)
def test_every_16bit_value_loads_and_sums_round_to_nearest_even(lane, dtype, stream):
    # X + residual over all 2^16 bit patterns (zeros, subnormals, inf, NaN) against a shuffle
    # of them: one f32 add, whose rounding to 16 bits is the correctly rounded exact sum
    # (double rounding through f32 is innocuous for one add: 24 >= 2 * 11 + 2). So the lane
    # must match numpy's rounding of the float64 sum bit for bit, ties to even included.
    region = RowwiseRegion(256, 256, residual=True, dtype=dtype)
    storage = numpy_dtype(dtype)
    x = np.arange(1 << 16, dtype=np.uint16).view(storage).reshape(256, 256)
    res = np.random.default_rng(5).permutation(x.reshape(-1)).reshape(256, 256)
    out = _run(lane, region, {"stream": stream}, {"X": x, "residual": res})
    with np.errstate(invalid="ignore", over="ignore"):
        exact = x.astype(np.float64) + res.astype(np.float64)
        want = exact.astype(storage)
        # ties: the exact sum sits halfway between `want` and the other 16-bit neighbour
        got = want.astype(np.float64)
        other = 2 * exact - got
        tie = (np.isfinite(exact) & np.isfinite(got) & (exact != got)
               & (other.astype(storage).astype(np.float64) == other))
    _same_bits(out, want)
    assert tie.sum() > 100  # the inputs do exercise ties, and each went to the even neighbour
    assert not (out.view(np.uint16)[tie] & 1).any()


@pytest.mark.parametrize("dtype", SIXTEEN)
def test_gemm_output_rounds_to_nearest_even(lane, dtype):
    # K = 1: each output is one product of two 16-bit values, exact in f32, so the stored
    # result is numpy's rounding of the exact product, bit for bit; across row blocks and
    # ragged panels of the GEMM
    region = FusedRegion(61, 70, 1, dtype=dtype)
    inputs = random_inputs(region, 11)
    out = _run(lane, region, {"tile": "6x16", "mc": 48}, inputs)
    want = (inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)).astype(
        numpy_dtype(dtype))
    _same_bits(out, want)


def test_16bit_nan_and_inf_pass_through(lane):
    region = RowwiseRegion(2, 37, residual=True, dtype="bf16")
    inputs = random_inputs(region, 1)
    inputs["X"][0, 3] = np.nan
    inputs["X"][1, 5] = np.inf
    out = _run(lane, region, {}, inputs).astype(np.float32)
    assert np.isnan(out[0, 3]) and out[1, 5] == np.inf
    assert np.isfinite(np.delete(out.reshape(-1), [3, 37 + 5])).all()


def test_f32_path_is_unchanged(lane):
    # f32 storage: the GEMM accumulates straight into `out` and rows finish in place; the
    # conversions are the identity (inlined), no C block, no extra rounding pass
    fused = FusedRegion(33, 65, 31, epilogue=("bias", "gelu"), residual=True, reduction="rmsnorm")
    text = lane.emit(fused, lane.space(fused).default).text
    assert "typedef float arb_store_t;" in text
    assert "float* C = out + i0 * N;" in text
    assert "store_row" not in text and "Cb" not in text
    assert "#define WORK_FLOATS ((long)K * NPAD + (long)MC * KC + 16)" in text
    row = RowwiseRegion(7, 33, epilogue=("bias",), reduction="softmax")
    text = lane.emit(row, lane.space(row).complete({"stream": False})).text
    assert "row_program(X + r * N, out + r * N, in[1]);" in text and "store_row" not in text
    bf16 = FusedRegion(33, 65, 31, epilogue=("bias", "gelu"), residual=True,
                       reduction="rmsnorm", dtype="bf16")
    text16 = lane.emit(bf16, lane.space(bf16).default).text
    assert "typedef uint16_t arb_store_t;" in text16 and "store_row(out + r * N, row);" in text16
