"""The closed vocabulary of ops a region may name, as tables built once.

Strings from spec files become members of these enums at the boundary; nothing inside
compares op names as strings again.
"""

from __future__ import annotations

import enum

__all__ = ["Pointwise", "Reduction", "Epilogue", "parse_op"]


class Pointwise(str, enum.Enum):
    """Elementwise functions allowed in a prologue (on A) or an epilogue chain."""

    RELU = "relu"
    GELU = "gelu"  # tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    SILU = "silu"
    SIGMOID = "sigmoid"
    TANH = "tanh"


class Epilogue(str, enum.Enum):
    """Ops of an epilogue chain: the pointwise functions plus a per-column bias add."""

    BIAS = "bias"
    RELU = "relu"
    GELU = "gelu"
    SILU = "silu"
    SIGMOID = "sigmoid"
    TANH = "tanh"


class Reduction(str, enum.Enum):
    """Terminal row reductions. Norms carry no learned weight or shift."""

    SOFTMAX = "softmax"
    RMSNORM = "rmsnorm"
    LAYER_NORM = "layer_norm"


def parse_op(enum_type: type[enum.Enum], text: object, where: str) -> enum.Enum:
    """Turn a user string into an op, or raise a ValueError naming the valid choices."""
    if isinstance(text, enum_type):
        return text
    valid = ", ".join(m.value for m in enum_type)  # type: ignore[attr-defined]
    if not isinstance(text, str):
        raise ValueError(f"{where}: expected an op name ({valid}), got {type(text).__name__}")
    try:
        return enum_type(text)
    except ValueError:
        raise ValueError(f"{where}: unknown op {text!r} (valid: {valid})") from None
