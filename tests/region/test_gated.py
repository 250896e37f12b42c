"""The gated feed-forward region: identity, spec fields, arrays and the oracle by hand."""

from __future__ import annotations

import numpy as np
import pytest

from arbiter import RegionError, SpecError, parse_spec, random_inputs, reference
from arbiter.region import GatedRegion, input_shapes, output_shape, region_from_canonical


def test_arrays_and_identity():
    r = GatedRegion(5, 7, 3, activation="gelu", bias=True)
    assert input_shapes(r) == {"A": (5, 3), "Wg": (3, 7), "Wu": (3, 7), "bias_g": (7,),
                               "bias_u": (7,)}
    assert output_shape(r) == (5, 7)
    assert set(input_shapes(GatedRegion(5, 7, 3))) == {"A", "Wg", "Wu"}
    assert region_from_canonical(r.canonical()) == r
    assert r.describe() == "gated5x7x3+gelu+bias"
    assert len({GatedRegion(5, 7, 3).key, r.key, GatedRegion(5, 7, 3, bias=True).key}) == 3


@pytest.mark.parametrize("act", ["silu", "gelu", "relu"])
def test_oracle_is_act_of_gate_times_up(act):
    r = GatedRegion(6, 5, 4, activation=act, bias=True)
    a = random_inputs(r, 3)
    x = {k: v.astype(np.float64) for k, v in a.items()}
    g = x["A"] @ x["Wg"] + x["bias_g"]
    u = x["A"] @ x["Wu"] + x["bias_u"]
    act_g = {"silu": g / (1 + np.exp(-g)), "relu": np.maximum(g, 0),
             "gelu": 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))}[act]
    np.testing.assert_allclose(reference(r, a), act_g * u, rtol=1e-12, atol=1e-12)


def test_spec_kind_gated_and_its_errors():
    spec = parse_spec('[[region]]\nname = "ffn"\nkind = "gated"\nM = 8\nN = 16\nK = 4\n'
                      'activation = "gelu"\nbias = true\ndtype = "bf16"\n')
    r = spec.get("ffn")
    assert isinstance(r, GatedRegion) and r.bias and r.dtype == "bf16"
    with pytest.raises(SpecError, match="region 'g': activation: unknown op 'swish'"):
        parse_spec('[[region]]\nname = "g"\nkind = "gated"\nM = 8\nN = 16\nK = 4\n'
                   'activation = "swish"\n')
    with pytest.raises(SpecError, match="field 'epilogue': not a field of a gated region"):
        parse_spec('[[region]]\nname = "g"\nkind = "gated"\nM = 8\nN = 16\nK = 4\n'
                   'epilogue = ["relu"]\n')
    with pytest.raises(RegionError, match="bias must be true or false"):
        GatedRegion(2, 2, 2, bias=1)
