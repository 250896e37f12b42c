"""The shared row program says which extra arrays it reads; lanes pass exactly those."""

from __future__ import annotations

import itertools
import re

import pytest
from arbiter.lanes._scalar_body import BIAS, RESIDUAL, Loop, Scalar, row_program

from arbiter.region import Epilogue as E
from arbiter.region import Reduction as R

CHAINS = [(), (E.BIAS,), (E.GELU,), (E.BIAS, E.SILU), (E.RELU, E.BIAS, E.TANH)]
REDUCTIONS = [None, R.SOFTMAX, R.RMSNORM, R.LAYER_NORM]


@pytest.mark.parametrize(
    "epilogue,residual,reduction", list(itertools.product(CHAINS, (False, True), REDUCTIONS)))
def test_operands_are_the_arrays_the_text_reads(epilogue, residual, reduction) -> None:
    prog = row_program(epilogue, residual, reduction, 1e-5)
    text = "\n".join(
        line for step in prog.steps if isinstance(step, Loop | Scalar) for line in step.body)
    read = {name for name in ("bias", "res") if re.search(rf"\b{name}\[j\]", text)}
    assert {o.name for o in prog.operands} == read
    expected = ((BIAS,) if E.BIAS in epilogue else ()) + ((RESIDUAL,) if residual else ())
    assert prog.operands == expected  # input_shapes order: bias before residual


def test_row_pointer_offsets_only_per_row_operands() -> None:
    assert BIAS.row("bias_g", "r") == "bias_g"
    assert RESIDUAL.row("in[3]", "r") == "in[3] + r * N"
