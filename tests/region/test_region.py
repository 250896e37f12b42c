from __future__ import annotations

import math
import pickle

import pytest

from arbiter import AttentionRegion, Epilogue, FusedRegion, Reduction, RegionError, RowwiseRegion


def test_fields_become_ops_and_key_ignores_labels():
    a = FusedRegion(8, 16, 4, epilogue=["bias", "gelu"], reduction="softmax", name="x", budget=1e-2)
    b = FusedRegion(8, 16, 4, epilogue=(Epilogue.BIAS, Epilogue.GELU), reduction=Reduction.SOFTMAX)
    assert a.epilogue == (Epilogue.BIAS, Epilogue.GELU)
    assert a == b and a.key == b.key and hash(a) == hash(b)
    assert a.name == "x" and a.label == "x" and b.label == b.describe()


def test_key_changes_with_every_identity_field():
    base = FusedRegion(8, 16, 4, epilogue=("bias",))
    variants = [
        FusedRegion(9, 16, 4, epilogue=("bias",)),
        FusedRegion(8, 16, 5, epilogue=("bias",)),
        FusedRegion(8, 16, 4, epilogue=("bias", "relu")),
        FusedRegion(8, 16, 4, epilogue=("relu", "bias")),
        FusedRegion(8, 16, 4, epilogue=("bias",), residual=True),
        FusedRegion(8, 16, 4, epilogue=("bias",), prologue=("tanh",)),
        FusedRegion(8, 16, 4, epilogue=("bias",), reduction="rmsnorm"),
        FusedRegion(8, 16, 4, epilogue=("bias",), reduction="rmsnorm", eps=1e-6),
        RowwiseRegion(8, 16, epilogue=("bias",)),
    ]
    keys = {base.key} | {v.key for v in variants}
    assert len(keys) == len(variants) + 1


def test_key_is_stable_across_processes():
    # a literal: changing the canonical form silently would orphan every stored record
    r = FusedRegion(128, 256, 64, epilogue=("bias", "gelu"), residual=True, reduction="layer_norm")
    assert (
        r.key
        == FusedRegion(
            128, 256, 64, epilogue=["bias", "gelu"], residual=True, reduction="layer_norm"
        ).key
    )
    assert len(r.key) == 16 and int(r.key, 16) >= 0


def test_regions_pickle_and_stay_frozen():
    for r in (
        FusedRegion(2, 3, 4, prologue=("relu",)),
        RowwiseRegion(2, 3, reduction="softmax"),
        AttentionRegion(1, 2, 3, 8, causal=True),
    ):
        r2 = pickle.loads(pickle.dumps(r))
        assert r2 == r and r2.key == r.key
        with pytest.raises(AttributeError):
            r.name = "changed"  # type: ignore[misc]


def test_attention_defaults():
    r = AttentionRegion(1, 2, 10, 64)
    assert r.seq_k == 10 and math.isclose(r.scale, 1 / 8)
    assert r.key == AttentionRegion(1, 2, 10, 64, seq_k=10, scale=0.125).key


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda: FusedRegion(0, 4, 4), "M must be a positive integer"),
        (lambda: FusedRegion(4, -1, 4), "N must be"),
        (lambda: FusedRegion(4, 4, 2.5), "K must be"),
        (lambda: FusedRegion(4, 4, True), "K must be"),
        (lambda: FusedRegion(4, 4, 4, epilogue=("bias", "bias")), "more than one bias"),
        (lambda: FusedRegion(4, 4, 4, epilogue=("swish",)), "unknown op 'swish'"),
        (lambda: FusedRegion(4, 4, 4, prologue=("bias",)), "unknown op 'bias'"),
        (lambda: FusedRegion(4, 4, 4, epilogue="relu"), "must be a list"),
        (lambda: FusedRegion(4, 4, 4, reduction="max"), "unknown op 'max'"),
        (lambda: FusedRegion(4, 4, 4, reduction="rmsnorm", eps=0), "eps"),
        (lambda: FusedRegion(4, 4, 4, residual="yes"), "residual must be"),
        (lambda: FusedRegion(4, 4, 4, budget=-1), "budget"),
        (lambda: RowwiseRegion(4, 4), "needs at least one op"),
        (lambda: AttentionRegion(1, 1, 4, 0), "head_dim"),
        (lambda: AttentionRegion(1, 1, 4, 8, scale=-1.0), "scale"),
        (lambda: AttentionRegion(1, 1, 4, 8, causal=1), "causal"),
    ],
)
def test_invalid_regions_raise_region_error(make, needle):
    with pytest.raises(RegionError, match=needle):
        make()
