"""Storage dtypes: identity, specs, inputs, the oracle's view of them, poison, npz files."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from arbiter import (
    AttentionRegion,
    FusedRegion,
    InputError,
    RegionError,
    RowwiseRegion,
    SpecError,
    Status,
    compare,
    parse_spec,
    random_inputs,
    reference,
)
from arbiter.check import budget_of, poison, untouched_count, verify
from arbiter.lane import get_lane, validate_inputs, validate_output
from arbiter.region import DEFAULT_BUDGETS, numpy_dtype, region_from_canonical

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_f32_keys_do_not_change_and_16_bit_keys_differ():
    f32 = FusedRegion(64, 32, 16, epilogue=("bias", "gelu"))
    assert f32 == FusedRegion(64, 32, 16, epilogue=("bias", "gelu"), dtype="f32")
    assert "dtype" not in f32.canonical()  # the key every f32 region had before dtypes
    keys = {FusedRegion(64, 32, 16, epilogue=("bias", "gelu"), dtype=d).key
            for d in ("f32", "f16", "bf16")}
    assert len(keys) == 3
    r = AttentionRegion(1, 2, 3, 16, dtype="bf16", causal="top_left")
    assert region_from_canonical(r.canonical()) == r
    assert r.describe().endswith(":bf16")


@pytest.mark.parametrize("bad", ["fp16", "float32", 16, None, ["f16"]])
def test_unknown_dtype_is_a_region_error(bad):
    with pytest.raises(RegionError, match="dtype must be one of f32, f16, bf16"):
        RowwiseRegion(4, 4, epilogue=("relu",), dtype=bad)


def test_spec_dtype_field_and_its_errors():
    spec = parse_spec('[[region]]\nname = "a"\nM = 4\nN = 8\nK = 2\ndtype = "bf16"\n')
    assert spec.get("a").dtype == "bf16"
    with pytest.raises(SpecError, match="region 'b': dtype must be one of"):
        parse_spec('[[region]]\nname = "b"\nM = 4\nN = 8\nK = 2\ndtype = "f8"\n')
    with pytest.raises(SpecError, match="field 'dtype': expected string"):
        parse_spec('[[region]]\nname = "c"\nM = 4\nN = 8\nK = 2\ndtype = 16\n')


def test_default_budget_follows_the_dtype_and_an_explicit_one_wins():
    for d, b in DEFAULT_BUDGETS.items():
        assert budget_of(FusedRegion(4, 4, 4, dtype=d)) == b
    assert budget_of(FusedRegion(4, 4, 4, dtype="bf16", budget=0.5)) == 0.5


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_inputs_are_stored_rounded_and_the_oracle_reads_them_as_stored(dtype):
    r = FusedRegion(9, 7, 33, epilogue=("bias", "silu"), residual=True, dtype=dtype)
    a = random_inputs(r, 11)
    assert {x.dtype for x in a.values()} == {numpy_dtype(dtype)}
    assert all(np.count_nonzero(x.astype(np.float32)) > x.size // 2 for x in a.values())
    wide = {k: v.astype(np.float64) for k, v in a.items()}
    expect = wide["A"] @ wide["B"] + wide["bias"]
    expect = expect / (1 + np.exp(-expect)) + wide["residual"]
    np.testing.assert_allclose(reference(r, a), expect, rtol=1e-12, atol=1e-12)


def test_validation_names_the_storage_dtype():
    r = RowwiseRegion(3, 5, epilogue=("tanh",), dtype="bf16")
    good = random_inputs(r, 1)
    with pytest.raises(InputError, match=r"has dtype float32, need bfloat16 \(bf16\)"):
        validate_inputs(r, {"X": good["X"].astype(np.float32)})
    validate_output(r, np.empty((3, 5), BF16))
    with pytest.raises(InputError, match="output must be bfloat16"):
        validate_output(r, np.empty((3, 5), np.float16))


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_16_bit_poison_is_caught_and_told_apart_from_computed_nan(dtype):
    r = RowwiseRegion(4, 6, epilogue=("relu",), dtype=dtype)
    ref = reference(r, random_inputs(r, 2))
    out = ref.astype(numpy_dtype(dtype))
    poison(out[1:2])
    assert untouched_count(out) == 6
    v = compare(out, ref, 1.0)
    assert v.status is Status.UNTOUCHED and "6 of 24" in v.detail
    out = ref.astype(numpy_dtype(dtype))
    out[0, 0] = np.nan
    assert compare(out, ref, 1.0).status is Status.NAN


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_numpy_lane_in_every_dtype_is_within_the_default_budget(dtype):
    r = AttentionRegion(2, 3, 17, 32, seq_k=29, causal=True, dtype=dtype)
    runner = get_lane("numpy").runner(None, r)
    v, log = verify(runner, r, budget_of(r), [5, 6])
    assert v.status is Status.OK, log
    # 16-bit: the output's own rounding is most of the error, far inside the budget
    assert v.rel_error < DEFAULT_BUDGETS[dtype] / 4


def test_lanes_that_compute_f32_only_decline_16_bit_in_one_line():
    from arbiter.lane import refusal

    why = refusal(get_lane("hip_scalar"), FusedRegion(4, 4, 4, dtype="f16"))
    assert why == "hip_scalar computes f32 storage, not f16"
    assert refusal(get_lane("numpy"), FusedRegion(4, 4, 4, dtype="bf16")) is None


def test_run_reads_bf16_npz_inputs_and_writes_a_bf16_output(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('[[region]]\nname = "g"\nM = 5\nN = 7\nK = 9\nepilogue = ["bias", "gelu"]\n'
                    'dtype = "bf16"\n')
    r = parse_spec(spec.read_text()).get("g")
    ins, out = tmp_path / "in.npz", tmp_path / "out.npz"
    a = random_inputs(r, 3)
    np.savez(ins, A=a["A"])  # bf16 saves as two-byte void; B and bias are drawn
    p = subprocess.run([sys.executable, "-m", "arbiter", "run", str(spec), "g", "--lane", "numpy",
                        "--inputs", str(ins), "--output", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    with np.load(out) as z:
        got = {k: z[k].view(BF16) for k in z.files}
    assert np.array_equal(got["A"].view(np.uint16), a["A"].view(np.uint16))
    ref = reference(r, {k: v for k, v in got.items() if k != "out"})
    assert compare(got["out"], ref, DEFAULT_BUDGETS["bf16"]).status is Status.OK


def test_nearest_never_crosses_dtypes_or_kinds():
    from arbiter.region import GatedRegion, shape_distance

    a = FusedRegion(64, 32, 16, epilogue=("bias",), dtype="bf16")
    assert shape_distance(a, FusedRegion(128, 32, 16, epilogue=("bias",), dtype="bf16")) == 1.0
    assert shape_distance(a, FusedRegion(64, 32, 16, epilogue=("bias",))) == float("inf")
    g = GatedRegion(64, 32, 16)
    assert shape_distance(g, GatedRegion(32, 32, 16)) == 1.0
    assert shape_distance(g, GatedRegion(32, 32, 16, activation="gelu")) == float("inf")


def test_ml_dtypes_loads_only_when_bf16_is_met():
    """Its extension takes about a second to import: every command would pay it."""
    code = ("import sys; import arbiter.cli, arbiter.lane\n"
            "from arbiter import FusedRegion\n"
            "from arbiter.region import numpy_dtype\n"
            "FusedRegion(4, 4, 4); numpy_dtype('f16')\n"
            "assert 'ml_dtypes' not in sys.modules, 'loaded early'\n"
            "assert numpy_dtype('bf16').name == 'bfloat16'\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
