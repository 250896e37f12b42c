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
from arbiter.check import fresh_seeds, poison, verify


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
    from arbiter.check import _oracle

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
    from arbiter.check._compare import CHUNK

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
    x = random_inputs(RowwiseRegion(1 << 10, 1 << 11, epilogue=("relu",)), 11)["X"]
    x = x.astype(np.float64).ravel()
    assert abs(x.mean()) < 3e-3 and abs(x.std() - 1) < 3e-3
    assert abs(np.mean(x ** 3)) < 1e-2 and abs(np.mean(x ** 4) - 3) < 3e-2


def test_a_candidate_after_a_good_one_on_the_same_seeds_is_caught_leaving_its_output():
    from tests.fake_lanes import FakeLane, untouched

    class Half(FakeLane):
        name = "fake_half"

        def fill(self, region, a, out, config):
            super().fill(region, a, out, config)
            poison(out[: out.shape[0] // 2])

    r = RowwiseRegion(256, 1024, epilogue=("bias", "gelu"), residual=True)
    seeds = fresh_seeds(2)
    for lane, status in ((FakeLane(), Status.OK), (untouched, Status.UNTOUCHED),
                         (FakeLane(), Status.OK), (Half(), Status.UNTOUCHED),
                         (FakeLane(), Status.OK)):
        runner = lane.runner(lane.build(lane.emit(r, lane.space(r).default)), r)
        verdict, log = verify(runner, r, 1e-3, seeds)
        assert verdict.status is status, log
        if status is Status.UNTOUCHED:
            assert "elements unwritten" in log


@pytest.mark.parametrize("sq,sk", [(3, 5), (5, 3), (4, 4)])
def test_causal_alignment_top_left_and_bottom_right(sq, sk):
    """top_left (PyTorch's is_causal): key j visible to query i iff j <= i; bottom_right
    (FlashAttention's, and `causal = true`): iff j <= i + sk - sq."""
    from arbiter import AttentionRegion
    from arbiter.check import reference

    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((1, 1, n, 8)).astype(np.float32) for n in (sq, sk, sk))

    def by_hand(off):  # (in float64, from the float32 inputs as stored)
        s = (q[0, 0].astype(np.float64) @ k[0, 0].T.astype(np.float64)) / np.sqrt(8)
        out = np.zeros((sq, 8))
        for i in range(sq):
            seen = [j for j in range(sk) if j <= i + off]
            if seen:
                w = np.exp(s[i, seen] - s[i, seen].max())
                out[i] = (w / w.sum()) @ v[0, 0][seen].astype(np.float64)
        return out

    arrays = {"q": q, "k": k, "v": v}
    for causal, off in (("top_left", 0), ("bottom_right", sk - sq), (True, sk - sq)):
        region = AttentionRegion(1, 1, sq, 8, seq_k=sk, causal=causal)
        got = reference(region, arrays)[0, 0]
        assert np.allclose(got, by_hand(off), rtol=1e-12, atol=1e-12), causal
    assert AttentionRegion(1, 1, sq, 8, seq_k=sk, causal="bottom_right").key == \
        AttentionRegion(1, 1, sq, 8, seq_k=sk, causal=True).key  # today's keys kept
    assert AttentionRegion(1, 1, sq, 8, seq_k=sk, causal="top_left").key != \
        AttentionRegion(1, 1, sq, 8, seq_k=sk, causal=True).key


def test_an_unknown_causal_alignment_is_refused():
    from arbiter import AttentionRegion, RegionError

    with pytest.raises(RegionError, match='"top_left", got \'left\''):
        AttentionRegion(1, 1, 4, 8, causal="left")


@pytest.mark.parametrize("causal", [False, True, "top_left"])
def test_attention_blocks_of_rows_match_the_whole_formula(causal, monkeypatch):
    """The reference works on blocks of query rows in parallel, a causal block over only the
    keys its last row sees: with blocks of a few rows, every row still matches the formula on
    the whole score matrix (rows that see no key: zeros)."""
    from arbiter.check import _oracle

    monkeypatch.setattr(_oracle, "ATTENTION_BLOCK", 3 * 11)  # 3 rows of 11 keys a block
    region = AttentionRegion(2, 2, 13, 8, seq_k=11, causal=causal)
    arrays = random_inputs(region, np.random.default_rng().integers(1 << 30))
    q, k, v = (arrays[n].astype(np.float64) for n in ("q", "k", "v"))
    s = np.einsum("bhid,bhjd->bhij", q, k) * region.scale
    if region.causal_offset is not None:
        s[..., np.arange(11)[None, :] > np.arange(13)[:, None] + region.causal_offset] = -np.inf
    with np.errstate(invalid="ignore"):
        w = np.exp(s - s.max(axis=-1, keepdims=True))
        want = np.nan_to_num(np.einsum("bhij,bhjd->bhid", w / w.sum(axis=-1, keepdims=True), v))
    got = reference(region, arrays)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert (region.causal_offset is None or region.causal_offset >= 0
            or np.all(got[:, :, :-region.causal_offset] == 0.0))


def test_matmul_blocks_of_rows_give_the_whole_product(monkeypatch):
    """Matmul and gated references go a block of rows at a time: blocks of 3 rows give what
    one block of every row gives (the product's sums may round apart in the last bit)."""
    from arbiter import GatedRegion
    from arbiter.check import _oracle

    regions = (FusedRegion(37, 29, 13, prologue=("silu",), epilogue=("bias", "gelu"),
                           residual=True, reduction="layer_norm"),
               GatedRegion(37, 29, 13, activation="gelu", bias=True))
    for region in regions:
        arrays = random_inputs(region, np.random.default_rng().integers(1 << 30))
        monkeypatch.setattr(_oracle, "MATMUL_BLOCK_ELEMENTS", 37 * 29)
        whole = reference(region, arrays)
        monkeypatch.setattr(_oracle, "MATMUL_BLOCK_ELEMENTS", 3 * 29)
        np.testing.assert_allclose(reference(region, arrays), whole, rtol=1e-13, atol=1e-13)
