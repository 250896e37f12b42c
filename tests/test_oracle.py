from __future__ import annotations

import math

import numpy as np
import pytest

from arbiter import (
    DEFAULT_BUDGET,
    AttentionRegion,
    FusedRegion,
    RowwiseRegion,
    Status,
    compare,
    random_inputs,
    reference,
)
from arbiter._inputs import poison, untouched_count


def f32(x):
    return np.asarray(x, dtype=np.float32)


def test_matmul_bias_relu_by_hand():
    r = FusedRegion(2, 2, 2, epilogue=("bias", "relu"))
    a = f32([[1, 2], [3, 4]])
    b = f32([[1, -1], [0, 1]])
    bias = f32([0.5, -10])
    out = reference(r, {"A": a, "B": b, "bias": bias})
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, [[1.5, 0.0], [3.5, 0.0]])


def test_prologue_applies_to_a_before_matmul():
    r = FusedRegion(1, 1, 2, prologue=("relu",))
    out = reference(r, {"A": f32([[-3, 2]]), "B": f32([[100], [1]])})
    assert out[0, 0] == 2.0


def test_gelu_is_the_tanh_form():
    r = RowwiseRegion(1, 3, epilogue=("gelu",))
    x = np.array([-1.0, 0.5, 2.0])
    expect = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(reference(r, {"X": f32([x])})[0], expect, rtol=1e-6)


def test_silu_sigmoid_tanh_by_hand():
    x = f32([[-2.0, 0.0, 3.0]])
    xd = x.astype(np.float64)
    sig = 1 / (1 + np.exp(-xd))
    cases = {"silu": xd * sig, "sigmoid": sig, "tanh": np.tanh(xd)}
    for op, expect in cases.items():
        np.testing.assert_allclose(reference(RowwiseRegion(1, 3, epilogue=(op,)), {"X": x}), expect)


def test_the_chains_in_place_ops_are_their_formulas_to_the_bit():
    from arbiter import _oracle

    c = math.sqrt(2 / math.pi)
    formulas = {
        "relu": lambda x: np.maximum(x, 0.0),
        "gelu": lambda x: 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x * x * x))),
        "sigmoid": lambda x: 0.5 * (1.0 + np.tanh(0.5 * x)),
        "silu": lambda x: x * (0.5 * (1.0 + np.tanh(0.5 * x))),
        "tanh": np.tanh,
    }
    eps = 1e-5
    rows = {
        "softmax": lambda x: np.exp(x - x.max(axis=-1, keepdims=True))
        / np.exp(x - x.max(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True),
        "rmsnorm": lambda x: x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps),
        "layer_norm": lambda x: (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(np.mean(
            (x - x.mean(axis=-1, keepdims=True)) ** 2, axis=-1, keepdims=True) + eps),
    }
    x = 4 * np.random.default_rng().standard_normal((64, 333))
    assert formulas.keys() == _oracle.POINTWISE.keys() and rows.keys() == _oracle.REDUCTIONS.keys()
    for name, formula in formulas.items():
        given = x.copy()
        assert np.array_equal(_oracle.POINTWISE[name](given), formula(x)), name
    for name, formula in rows.items():
        assert np.array_equal(_oracle.REDUCTIONS[name](x.copy(), eps), formula(x)), name


def test_residual_then_softmax_order():
    r = RowwiseRegion(1, 2, epilogue=("bias",), residual=True, reduction="softmax")
    out = reference(r, {"X": f32([[0, 0]]), "bias": f32([1, 0]), "residual": f32([[0, 1]])})
    np.testing.assert_allclose(out, [[0.5, 0.5]])


def test_rmsnorm_and_layer_norm_by_hand():
    x = f32([[3.0, 4.0]])
    rms = reference(RowwiseRegion(1, 2, reduction="rmsnorm", eps=1e-6), {"X": x})
    np.testing.assert_allclose(rms, [[3 / math.sqrt(12.5 + 1e-6), 4 / math.sqrt(12.5 + 1e-6)]])
    ln = reference(RowwiseRegion(1, 2, reduction="layer_norm", eps=1e-5), {"X": x})
    np.testing.assert_allclose(ln, [[-0.5 / math.sqrt(0.25 + 1e-5), 0.5 / math.sqrt(0.25 + 1e-5)]])


def test_attention_by_hand_and_bottom_right_causal_mask():
    r = AttentionRegion(1, 1, 1, 1, seq_k=2, scale=1.0)
    q = f32([[[[1.0]]]])
    k = f32([[[[0.0], [1.0]]]])
    v = f32([[[[10.0], [20.0]]]])
    w = np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum()
    np.testing.assert_allclose(reference(r, {"q": q, "k": k, "v": v}), [[[[w @ [10, 20]]]]])
    # seq_q=2, seq_k=3, causal: query 0 sees keys 0..1, query 1 sees keys 0..2
    rc = AttentionRegion(1, 1, 2, 1, seq_k=3, causal=True, scale=1.0)
    q2 = f32(np.zeros((1, 1, 2, 1)))
    v2 = f32([[[[1.0], [2.0], [6.0]]]])
    out = reference(rc, {"q": q2, "k": f32(np.zeros((1, 1, 3, 1))), "v": v2})
    np.testing.assert_allclose(out[0, 0, :, 0], [1.5, 3.0])


def test_fully_masked_query_rows_are_zero():
    r = AttentionRegion(1, 1, 4, 8, seq_k=2, causal=True)
    ins = random_inputs(r, 0)
    out = reference(r, ins)
    assert np.all(out[0, 0, :2] == 0.0) and np.all(np.isfinite(out))
    assert np.any(out[0, 0, 2:] != 0.0)


def test_compare_statuses():
    ref = np.ones((4, 4))
    good = np.ones((4, 4), np.float32)
    assert compare(good, ref, DEFAULT_BUDGET).status is Status.OK
    off = good.copy()
    off[0, 0] = 1.5  # rel error = 0.5 / 4 = 0.125
    v = compare(off, ref, DEFAULT_BUDGET)
    assert v.status is Status.WRONG_RESULT and v.rel_error == pytest.approx(0.125)
    assert v.max_abs == pytest.approx(0.5)
    nan = good.copy()
    nan[1, 1] = np.nan
    assert compare(nan, ref, 1.0).status is Status.NAN
    inf = good.copy()
    inf[1, 1] = np.inf
    assert compare(inf, ref, 1.0).status is Status.NAN
    poisoned = good.copy()
    poison(poisoned[2:])
    v = compare(poisoned, ref, 1.0)
    assert v.status is Status.UNTOUCHED and "8 of 16" in v.detail


def test_compare_across_chunks_matches_a_whole_array_computation():
    from arbiter import InputError
    from arbiter._oracle import CHUNK

    rng = np.random.default_rng(7)
    ref = rng.standard_normal((3, CHUNK + 7)).T  # several chunks, not contiguous
    out = (ref * (1 + 1e-6 * rng.standard_normal(ref.shape))).astype(np.float32)
    v = compare(out, ref, 1e-3)
    diff = out.astype(np.float64) - ref
    assert v.status is Status.OK
    assert v.rel_error == pytest.approx(np.linalg.norm(diff) / np.linalg.norm(ref), rel=1e-9)
    assert v.max_abs == np.abs(diff).max()
    # a fault in the last, partial chunk is still found, and named over the whole output
    for bad, status in ((np.nan, Status.NAN), (None, Status.UNTOUCHED)):
        faulty = out.copy()
        if bad is None:
            poison(faulty[-1:, :])
        else:
            faulty[-1, -1] = bad
        v = compare(faulty, ref, 1.0)
        assert v.status is status and f"of {out.size} elements" in v.detail
    with pytest.raises(InputError, match="shape"):
        compare(out[:-1], ref, 1e-3)


def test_compare_and_poison_in_parts_on_several_threads_agree_with_one():
    # a many-core machine splits a large output across its free cores; forced here on any
    from arbiter._oracle import CHUNK

    rng = np.random.default_rng()
    ref = rng.standard_normal((7, CHUNK // 2 + 3))  # parts of whole chunks, a partial last one
    out = (ref * (1 + 1e-5 * rng.standard_normal(ref.shape))).astype(np.float32)
    one = compare(out, ref, 1e-3, threads=1)
    many = compare(out, ref, 1e-3, threads=3, part_min=CHUNK)
    diff = out.astype(np.float64) - ref
    assert one.status is many.status is Status.OK
    assert many.rel_error == pytest.approx(one.rel_error, rel=1e-12)
    assert many.rel_error == pytest.approx(np.linalg.norm(diff) / np.linalg.norm(ref), rel=1e-9)
    assert many.max_abs == one.max_abs == np.abs(diff).max()
    for row, bad, status in ((0, np.nan, Status.NAN), (3, np.inf, Status.NAN),
                             (5, None, Status.UNTOUCHED)):
        faulty = out.copy()
        if bad is None:
            poison(faulty[row:, -5:])  # not contiguous: poisoned in place, on one thread
        else:
            faulty[row, -1] = bad
        v = compare(faulty, ref, 1.0, threads=3, part_min=CHUNK)
        assert v.status is status and f"of {out.size} elements" in v.detail


def _numpy_only(monkeypatch):
    from arbiter import _oracle

    monkeypatch.setattr(_oracle, "squares", lambda: None)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 1000, (1 << 16) + 13])
def test_the_comparisons_c_loop_agrees_with_numpys_passes(n, monkeypatch):
    from arbiter._compare_c import squares_when_built

    loop = squares_when_built()
    if loop is None:
        pytest.skip("no C compiler builds the comparison's loop here")
    rng = np.random.default_rng()
    ref = 3 * rng.standard_normal(n)
    out = (ref * (1 + 1e-4 * rng.standard_normal(n))).astype(np.float32)
    diff = out.astype(np.float64) - ref
    total, top, untouched, nonfinite = loop(out, ref, False)
    assert total == pytest.approx(float(np.dot(diff, diff)), rel=1e-12)
    assert top == (diff * diff).max()  # the same float64 difference, squared: exactly
    assert untouched == nonfinite == 0
    fast = compare(out, ref, 1e-3, norm_ref=float(np.linalg.norm(ref)))
    _numpy_only(monkeypatch)
    slow = compare(out, ref, 1e-3, norm_ref=float(np.linalg.norm(ref)))
    assert fast.status is slow.status is Status.OK and fast.max_abs == slow.max_abs
    assert fast.rel_error == pytest.approx(slow.rel_error, rel=1e-12)
    # a fault anywhere, the last partial group of eight included, spoils the sum and is
    # counted, before the poison is put back
    for bad in (np.nan, np.inf, -np.inf, None):
        faulty = out.copy()
        if bad is None:
            poison(faulty[-1:])
        else:
            faulty[-1] = bad
        for repoison in (False, True):
            total, _, untouched, nonfinite = loop(faulty if repoison else faulty.copy(), ref,
                                                  repoison)
            assert not math.isfinite(total) and nonfinite == 1
            assert untouched == (bad is None)
        assert untouched_count(faulty) == n
    with pytest.raises(ValueError, match="contiguous"):
        loop(out.astype(np.float64), ref, False)
    frozen = out.copy()
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        loop(frozen, ref, True)


def test_the_c_loops_counts_carry_across_its_blocks():
    # it counts faults in 32 bits within blocks of 2**23 elements
    from arbiter._compare_c import squares_when_built

    loop = squares_when_built()
    if loop is None:
        pytest.skip("no C compiler builds the comparison's loop here")
    n = (1 << 24) + 21
    ref = np.random.default_rng().standard_normal(n)
    out = ref.astype(np.float32)
    left = [0, (1 << 23) - 1, 1 << 23, (1 << 24) - 1, 1 << 24, n - 1]
    for i in left:
        poison(out[i:i + 1])
    out[[5, (1 << 23) + 8, n - 2]] = [np.inf, np.nan, -np.inf]
    total, _, untouched, nonfinite = loop(out, ref, True)
    assert untouched == len(left) and nonfinite == len(left) + 3
    assert not math.isfinite(total) and untouched_count(out) == n


@pytest.mark.parametrize("numpy_only", [False, True], ids=["c-loop", "numpy"])
def test_a_comparison_that_puts_the_poison_back_judges_as_one_that_does_not(numpy_only,
                                                                            monkeypatch):
    from arbiter._compare_c import squares_when_built
    from arbiter._oracle import CHUNK

    if not numpy_only and squares_when_built() is None:
        pytest.skip("no C compiler builds the comparison's loop here")
    if numpy_only:
        _numpy_only(monkeypatch)
    rng = np.random.default_rng()
    ref = rng.standard_normal((3, CHUNK + 5))
    out = (ref * (1 + 1e-5 * rng.standard_normal(ref.shape))).astype(np.float32)
    half = out.copy()
    poison(half[2:])
    for given, status in ((out, Status.OK), (half, Status.UNTOUCHED)):
        kept = compare(given.copy(), ref, 1e-3)
        v = compare(given, ref, 1e-3, repoison=True)
        assert v == kept and v.status is status
        assert untouched_count(given) == given.size
    with pytest.raises(ValueError, match="contiguous"):
        compare(out.T, ref.T, 1e-3, repoison=True)


def test_without_a_compiler_the_comparison_is_numpys(monkeypatch, tmp_path):
    from arbiter import _compare_c

    monkeypatch.setattr(_compare_c, "_STATE", {})
    monkeypatch.setattr(_compare_c, "_BUILDING", [])
    monkeypatch.setenv("ARBITER_CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    assert _compare_c.squares_when_built() is None
    ref = np.random.default_rng().standard_normal(100)
    out = (ref + 1e-3).astype(np.float32)
    v = compare(out, ref, 1.0)
    assert v.status is Status.OK
    assert v.max_abs == np.abs(out.astype(np.float64) - ref).max()


def test_poison_in_parts_reaches_every_element(monkeypatch):
    from arbiter import _inputs, _parts

    monkeypatch.setattr(_parts, "cores_but_one", lambda: 3)
    monkeypatch.setattr(_inputs, "POISON_PART_MIN", 1 << 10)
    out = np.random.default_rng().standard_normal((5, 1000)).astype(np.float32)
    poison(out)
    assert untouched_count(out) == out.size


def test_in_parts_covers_the_range_in_order_on_aligned_bounds():
    from arbiter._parts import in_parts

    seen = in_parts(1000, lambda lo, hi: (lo, hi), align=64, threads=4, part_min=100)
    assert seen == [(0, 256), (256, 512), (512, 768), (768, 1000)]
    assert in_parts(1000, lambda lo, hi: (lo, hi), threads=4, part_min=600) == [(0, 1000)]
    assert in_parts(0, lambda lo, hi: (lo, hi), threads=4) == [(0, 0)]
    big = np.zeros(1 << 12, np.float32)
    in_parts(big.size, lambda lo, hi: poison(big[lo:hi]), threads=3, part_min=1 << 10)
    assert compare(big, np.ones(big.shape), 1.0).status is Status.UNTOUCHED
    assert np.isnan(big).all()


def test_seeds_cases_made_side_by_side_are_those_made_one_at_a_time(monkeypatch):
    import threading

    from arbiter import _check, _parts

    monkeypatch.setattr(_parts, "cores_but_one", lambda: 3)
    r = RowwiseRegion(48, 700, epilogue=("gelu",), residual=True)
    seeds = _check.fresh_seeds(3)
    names = []
    case = _check._case

    def watched(region, seed):
        names.append(threading.current_thread().name)
        return case(region, seed)

    monkeypatch.setattr(_check, "_case", watched)
    _check.forget_cases()
    try:
        made = _check.cases(r, [*seeds, seeds[0]])
    finally:
        _check.forget_cases()
    assert len(names) == 3 and all(n.startswith("arbiter-parts") for n in names)
    for seed, c in zip([*seeds, seeds[0]], made):
        alone = case(r, seed)
        assert c.inputs.keys() == alone.inputs.keys()
        assert all(np.array_equal(c.inputs[k], alone.inputs[k]) for k in alone.inputs)
        assert np.array_equal(c.reference, alone.reference) and c.norm == alone.norm
    assert made[0] is made[3]
    assert _parts.side_by_side(lambda x: x * x, [3, 1, 2]) == [9, 1, 4]
    monkeypatch.setattr(_parts, "cores_but_one", lambda: 1)
    assert _parts.side_by_side(lambda x: threading.current_thread().name,
                               [1, 2]) == [threading.current_thread().name] * 2


def test_seeds_outputs_compared_side_by_side_get_the_verdict_of_one_at_a_time(monkeypatch):
    import threading

    from arbiter import _check, _parts

    monkeypatch.setattr(_parts, "cores_but_one", lambda: 3)
    r = RowwiseRegion(64, 1100, epilogue=("silu",))  # one comparison's worth: one thread
    seeds = [21, 22, 23]
    chosen = [_check._case(r, s) for s in seeds]
    rng = np.random.default_rng()
    good = [(c.reference * (1 + 1e-5 * rng.standard_normal(c.reference.shape))).astype(np.float32)
            for c in chosen]
    for c, g in zip(chosen, good):
        c.out[...] = g
    names = []
    plain = _check.compare

    def watched(*a, **kw):
        names.append(threading.current_thread().name)
        return plain(*a, **kw)

    monkeypatch.setattr(_check, "compare", watched)
    verdict, log = _check._judge(seeds, chosen, 1e-3)
    alone = [plain(g, c.reference, 1e-3) for c, g in zip(chosen, good)]
    assert all(n.startswith("arbiter-parts") for n in names) and len(names) == 3
    assert verdict.status is Status.OK
    assert verdict.rel_error == pytest.approx(max(v.rel_error for v in alone), rel=1e-12)
    assert [line.split(":")[0] for line in log.splitlines()] == [f"seed {s}" for s in seeds]
    # the first failure in the seeds' order, whichever finished first
    for c, g in zip(chosen, good):
        c.out[...] = g
    chosen[1].out[5, 7] = np.nan
    poison(chosen[2].out)
    verdict, log = _check._judge(seeds, chosen, 1e-3)
    assert verdict.status is Status.NAN and log.splitlines()[-1].startswith("seed 22: nan")


def test_reference_leaves_a_core_to_the_sweep_beside_it(monkeypatch):
    # the worker's references run while the parent process works (sampler, database writes):
    # their products use every core but one, and the lanes' BLAS is left as it was
    import os

    from threadpoolctl import threadpool_info

    from arbiter import _oracle

    def blas_threads() -> list[int]:
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

    before = blas_threads()
    if not before:
        pytest.skip("numpy is linked to no BLAS that threadpoolctl knows")
    seen = []
    chain = _oracle._chain

    def watched(*a, **kw):
        seen.append(blas_threads())
        return chain(*a, **kw)

    monkeypatch.setattr(_oracle, "_chain", watched)
    r = FusedRegion(64, 32, 16, epilogue=("relu",))
    ins = random_inputs(r, 3)
    out = reference(r, ins)
    spare = max(1, len(os.sched_getaffinity(0)) - 1)
    assert seen and all(n <= spare for threads in seen for n in threads)
    assert blas_threads() == before
    a, b = (ins[k].astype(np.float64) for k in ("A", "B"))
    np.testing.assert_allclose(out, np.maximum(a @ b, 0.0), rtol=1e-12, atol=1e-12)


def test_reference_validates_inputs():
    from arbiter import InputError

    r = FusedRegion(2, 3, 4, epilogue=("bias",))
    ins = random_inputs(r, 0)
    with pytest.raises(InputError, match="missing input 'bias'"):
        reference(r, {"A": ins["A"], "B": ins["B"]})
    with pytest.raises(InputError, match="'B' has shape"):
        reference(r, {**ins, "B": np.zeros((5, 3), np.float32)})


def test_random_inputs_are_seeded_nonzero_float32():
    r = FusedRegion(8, 8, 64, epilogue=("bias",), residual=True)
    a, b = random_inputs(r, 7), random_inputs(r, 7)
    assert set(a) == {"A", "B", "bias", "residual"}
    for k in a:
        assert a[k].dtype == np.float32 and np.array_equal(a[k], b[k]) and np.any(a[k] != 0)
    assert not np.array_equal(a["A"], random_inputs(r, 8)["A"])
    assert 0.05 < float(np.std(a["B"])) < 0.25  # scaled by 1/sqrt(K)


def test_random_inputs_are_standard_normal():
    # drawn by Box-Muller from float32 uniforms: the moments and the share within 1, 2 and 3
    # standard deviations of a large draw are the normal distribution's
    import math

    from arbiter._inputs import standard_normal

    x = standard_normal(np.random.default_rng(11), (1 << 21,)).astype(np.float64)
    assert abs(x.mean()) < 3e-3 and abs(x.std() - 1) < 3e-3
    assert abs(np.mean(x ** 3)) < 1e-2 and abs(np.mean(x ** 4) - 3) < 3e-2
    for k in (1, 2, 3):
        assert abs(np.mean(np.abs(x) < k) - math.erf(k / math.sqrt(2))) < 2e-3
    odd = standard_normal(np.random.default_rng(11), (3, 5))
    assert odd.shape == (3, 5) and odd.dtype == np.float32 and np.all(np.isfinite(odd))


@pytest.mark.parametrize("numpy_only", [False, True], ids=["c-loop", "numpy"])
def test_a_candidate_after_a_good_one_on_the_same_cases_is_caught_leaving_its_output(
        numpy_only, monkeypatch):
    # the comparison of one candidate poisons the buffers the next one runs into
    from arbiter import _check
    from arbiter._compare_c import squares_when_built
    from tests.fake_lanes import FakeLane, untouched

    if not numpy_only and squares_when_built() is None:
        pytest.skip("no C compiler builds the comparison's loop here")
    if numpy_only:
        _numpy_only(monkeypatch)

    class Half(FakeLane):
        name = "fake_half"

        def fill(self, region, a, out, config):
            super().fill(region, a, out, config)
            poison(out[: out.shape[0] // 2])

    r = RowwiseRegion(256, 1024, epilogue=("bias", "gelu"), residual=True)
    seeds = _check.fresh_seeds(2)
    _check.forget_cases()
    try:
        for lane, status in ((FakeLane(), Status.OK), (untouched, Status.UNTOUCHED),
                             (FakeLane(), Status.OK), (Half(), Status.UNTOUCHED),
                             (FakeLane(), Status.OK)):
            m = _check.check_candidate(lane, r, lane.space(r).default, 1e-3, seeds=seeds)
            assert m.status is status, m.log
            if status is Status.UNTOUCHED:
                assert "elements unwritten" in m.log
        assert all(untouched_count(c.out) == c.out.size for c in _check.cases(r, seeds))
    finally:
        _check.forget_cases()
