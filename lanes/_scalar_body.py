"""One generator for the per-row math of fused and rowwise regions, shared by the x86 C lane
and the generic HIP lane so both stay locked to one definition of every op.

A row program is a short list of loops over the row's columns and scalar steps between them.
Each loop names the accumulators it reduces (max or sum); the lane decides how the loop is
spread (a plain `for` with `omp simd` on x86, a strided loop plus a warp or block all-reduce
on a GPU) and how the accumulators are combined. Everything else is the same text.

Names the generated statements use, which every rendering must provide:
  j            column index inside a loop
  N            row length (a compile-time constant)
  src, dst     row pointers: values in (matmul result or X row), values out
  bias, res    bias vector and residual row: the program's `operands`, only those it reads
  arb_exp, arb_tanh, arb_sigmoid, arb_rsqrt   float -> float helpers from the lane's prelude
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from arbiter.lane import AttentionRegion, Epilogue, Pointwise, Reduction

__all__ = [
    "BIAS", "C_PRELUDE", "Loop", "Operand", "RESIDUAL", "RowProgram", "Scalar",
    "attention_defines", "defines", "epilogue_function", "pointwise", "prologue_function",
    "row_program",
    "visible_keys",
]

GELU_K0 = "0.7978845608028654f"  # sqrt(2/pi)
GELU_K1 = "0.044715f"

_POINTWISE = {
    "relu": "({x} > 0.0f ? {x} : 0.0f)",
    "gelu": (
        f"(0.5f * {{x}} * (1.0f + arb_tanh({GELU_K0} * "
        f"({{x}} + {GELU_K1} * {{x}} * {{x}} * {{x}}))))"
    ),
    "silu": "({x} * arb_sigmoid({x}))",
    "sigmoid": "arb_sigmoid({x})",
    "tanh": "arb_tanh({x})",
}


def pointwise(op: Pointwise | Epilogue, x: str) -> str:
    """C expression of one pointwise op applied to the simple expression `x`."""
    return _POINTWISE[op.value].format(x=x)


@dataclass(frozen=True)
class Loop:
    """`for j in row: body`, then all-reduce each (variable, "max" | "sum") in `reduce`."""

    body: tuple[str, ...]
    reduce: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Scalar:
    """Statements run once per row (by every thread of a row on a GPU) between loops."""

    body: tuple[str, ...]


@dataclass(frozen=True)
class Operand:
    """An input array the row program reads besides `src`.

    `name` is the row pointer the program text indexes with j, `input` the array's name in
    `arbiter.lane.input_shapes`, and `per_row` says whether it holds one row per output row
    (then the row pointer is the array plus `row * N`) or one vector every row shares.
    """

    name: str
    input: str
    per_row: bool

    def row(self, base: str, row: str) -> str:
        """C expression of this operand's row pointer `row` of the array at `base`."""
        return f"{base} + {row} * N" if self.per_row else base


BIAS = Operand("bias", "bias", per_row=False)
RESIDUAL = Operand("res", "residual", per_row=True)


@dataclass(frozen=True)
class RowProgram:
    steps: tuple[Loop | Scalar, ...]
    accumulators: tuple[tuple[str, str], ...]  # (name, "max" | "sum") declared per row
    operands: tuple[Operand, ...] = ()  # in input_shapes order: the lane passes exactly these


def _operands(epilogue, has_residual: bool) -> tuple[Operand, ...]:
    ops = [BIAS] if Epilogue.BIAS in epilogue else []
    if has_residual:
        ops.append(RESIDUAL)
    return tuple(ops)


def _read(load: str, element: str) -> str:
    return f"{load}({element})" if load else element


def _chain(epilogue, has_residual: bool, src_load: str, operand_load: str) -> list[str]:
    lines = [f"float v = {_read(src_load, 'src[j]')};"]
    for op in epilogue:
        if op is Epilogue.BIAS:
            lines.append(f"v = v + {_read(operand_load, 'bias[j]')};")
        else:
            lines.append(f"v = {pointwise(op, 'v')};")
    if has_residual:
        lines.append(f"v = v + {_read(operand_load, 'res[j]')};")
    return lines


def row_program(epilogue, residual: bool, reduction: Reduction | None, eps: float, *,
                src_load: str = "", operand_load: str = "") -> RowProgram:
    """The per-row program: chain -> residual -> reduction, in the region's order.

    `src_load` and `operand_load` name a C function `float f(T)` wrapped around every read of
    `src[j]` and of the operands (`bias[j]`, `res[j]`): how a lane reads a storage type other
    than float (e.g. `arb_load` for 16-bit storage). Empty: the row is read as float. `dst` is
    always a float row, so the program's re-reads of it never convert.
    """
    chain = _chain(epilogue, residual, src_load, operand_load)
    ops = _operands(epilogue, residual)
    eps_c = f"{float(eps)!r}f"
    if reduction is None:
        return RowProgram((Loop(tuple(chain + ["dst[j] = v;"])),), (), ops)
    if reduction is Reduction.SOFTMAX:
        return RowProgram(
            (
                Loop(tuple(chain + ["dst[j] = v;", "row_max = v > row_max ? v : row_max;"]),
                     (("row_max", "max"),)),
                Loop(("float e = arb_exp(dst[j] - row_max);", "dst[j] = e;", "row_sum += e;"),
                     (("row_sum", "sum"),)),
                Scalar(("const float inv = 1.0f / row_sum;",)),
                Loop(("dst[j] = dst[j] * inv;",)),
            ),
            (("row_max", "max"), ("row_sum", "sum")),
            ops,
        )
    if reduction is Reduction.RMSNORM:
        return RowProgram(
            (
                Loop(tuple(chain + ["dst[j] = v;", "row_sq += v * v;"]), (("row_sq", "sum"),)),
                Scalar((f"const float inv = arb_rsqrt(row_sq * (1.0f / N) + {eps_c});",)),
                Loop(("dst[j] = dst[j] * inv;",)),
            ),
            (("row_sq", "sum"),),
            ops,
        )
    if reduction is Reduction.LAYER_NORM:
        # Two passes over the row (mean, then squared deviations): no cancellation, unlike
        # E[x^2] - E[x]^2, and the row is still in cache for the second pass.
        return RowProgram(
            (
                Loop(tuple(chain + ["dst[j] = v;", "row_sum += v;"]), (("row_sum", "sum"),)),
                Scalar(("const float mean = row_sum * (1.0f / N);",)),
                Loop(("float d = dst[j] - mean;", "row_sq += d * d;"), (("row_sq", "sum"),)),
                Scalar((f"const float inv = arb_rsqrt(row_sq * (1.0f / N) + {eps_c});",)),
                Loop(("dst[j] = (dst[j] - mean) * inv;",)),
            ),
            (("row_sum", "sum"), ("row_sq", "sum")),
            ops,
        )
    raise ValueError(f"unknown reduction {reduction!r}")


def accumulator_init(kind: str) -> str:
    return "-INFINITY" if kind == "max" else "0.0f"


def defines(items: Sequence[tuple[str, object, str]]) -> str:
    """`#define NAME value  /* comment */` lines, values aligned in one column."""
    width = max(len(n) for n, _, _ in items)
    return "".join(f"#define {n:<{width}} {v}  /* {c} */\n" for n, v, c in items)


def attention_defines(region: AttentionRegion) -> dict[str, object]:
    """The region's shape as both scalar attention kernels read it: BH (batch x heads) rows of
    SQ queries against SK keys, head_dim D, CAUSAL with its alignment OFF (key j visible to
    query i iff j <= i + OFF) and SCALE."""
    return {
        "BH": region.batch * region.heads,
        "SQ": region.seq_q,
        "SK": region.seq_k,
        "D": region.head_dim,
        "CAUSAL": int(region.causal_offset is not None),
        "OFF": region.causal_offset or 0,
        "SCALE": f"{float(region.scale)!r}f",
    }


def epilogue_function(epilogue: Sequence[Epilogue], residual: bool, n: str) -> str:
    """`arb_epilogue(v, r, c, bias, res)`: the chain (and residual) on one output element at
    row r, column c of a GEMM's result, N columns named by the macro `n`; bias and residual
    are read from storage through `arb_load` (arb_gpu.h). For kernels that finish elements
    straight from their accumulators."""
    body = []
    for op in epilogue:
        if op is Epilogue.BIAS:
            body.append("    v = v + arb_load(bias[c]);")
        else:
            body.append(f"    v = {pointwise(op, 'v')};")
    if residual:
        body.append(f"    v = v + arb_load(res[(size_t)r * {n} + c]);")
    return "\n".join([
        "__device__ __forceinline__ float arb_epilogue(float v, int r, int c,",
        "                                              const arb_store_t* __restrict__ bias,",
        "                                              const arb_store_t* __restrict__ res) {",
        "    (void)r; (void)c; (void)bias; (void)res;",
        *body,
        "    return v;",
        "}",
    ]) + "\n"


def prologue_function(ops: Sequence[Pointwise], qualifiers: str = "static inline") -> str:
    """The `PROLOGUE(x)` macro a GEMM applies to each element of A as it loads it: a call of
    `prologue(x)` (the region's pointwise ops in order, defined here with `qualifiers`), or the
    identity when the region has none."""
    if not ops:
        return "#define PROLOGUE(x) (x)\n"
    body = "".join(f"    x = {pointwise(op, 'x')};\n" for op in ops)
    return (
        "/* Prologue on A, applied once per element as A is loaded for the matmul. */\n"
        f"{qualifiers} float prologue(float x)\n{{\n{body}    return x;\n}}\n"
        "#define PROLOGUE(x) prologue(x)\n"
    )


def visible_keys(int_type: str, qualifiers: str = "static inline") -> str:
    """C function `visible_keys(i)`: how many keys (a prefix 0..SK) query row i attends to.

    Causal masking shows key j to query i iff j <= i + OFF (bottom-right: SK - SQ; top-left:
    0), so a row sees a prefix of the keys and may see none. `int_type` is the lane's 64-bit
    index type (`long` on x86-64 Linux, `long long` in HIP); `qualifiers` make it a device
    function on GPU. Reads the SK, CAUSAL and OFF defines of `attention_defines`.
    """
    t = int_type
    return (
        f"\n{qualifiers} {t} visible_keys({t} i)\n{{\n"
        "    if (!CAUSAL) return SK;\n"
        f"    const {t} last = i + (OFF); /* last visible key; < 0: none */\n"
        "    return last < 0 ? 0 : (last + 1 < SK ? last + 1 : SK);\n}\n"
    )


# Plain-C definitions of the helpers for a CPU build. arb_exp is a polynomial with range
# reduction (max rel. error ~1e-7 on [-87, 88], ~2e-6 under -ffast-math) written as
# straight-line code so gcc vectorizes loops that call it without -ffast-math; libm's expf
# would block vectorization.
C_PRELUDE = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float arb_exp(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    /* rintf, not the 1.5*2^23 add/subtract trick: -ffast-math folds that trick away (n stops
     * being an integer and the result is garbage); rintf is exact in every mode and gcc
     * vectorizes it (vroundps / vrndscaleps) without -ffast-math. */
    const float n = rintf(x * 1.44269504088896341f);
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

static inline float arb_sigmoid(float x) { return 1.0f / (1.0f + arb_exp(-x)); }

static inline float arb_tanh(float x) {
    /* |x| < 0.625: odd minimax polynomial (Cephes tanhf), since 1 - 2/(e^2x + 1) loses
     * relative accuracy to cancellation near zero. Elsewhere tanh(x) = 2 sigmoid(2x) - 1 with
     * the odd symmetry kept exact. Both sides are computed and one selected, so loops calling
     * this still vectorize. */
    const float a = fabsf(x);
    const float z = x * x;
    const float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z
                          - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z
                          - 3.33332819422e-1f) * z * x + x;
    const float t = 1.0f - 2.0f / (arb_exp(2.0f * a) + 1.0f);
    const float big = x < 0.0f ? -t : t;
    return a < 0.625f ? small : big;
}

static inline float arb_rsqrt(float x) { return 1.0f / sqrtf(x); }
"""
