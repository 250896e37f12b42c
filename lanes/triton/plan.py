"""A (region, config) as the kernel launches that compute it: which template, its arguments
(buffers by name, scalars), its constexprs, grid and launch options. The emitted source, the
ahead-of-time compile and the runner all read this one plan, so what is printed, compiled for
gfx1151 and timed on a GPU are the same launches.

Pure Python (no triton import): the lane plans and emits where Triton is not installed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from arbiter.lane import (
    AttentionRegion,
    Config,
    Epilogue,
    FusedRegion,
    GatedRegion,
    Pointwise,
    Reduction,
    Region,
    RowwiseRegion,
    output_shape,
)

__all__ = ["BUFFER", "F32", "I32", "OUT", "SCRATCH", "Launch", "buffers", "chain_code", "dot_mode",
           "plan", "pow2"]

BUFFER, I32, F32 = "buffer", "i32", "fp32"
SCRATCH = "scratch"  # float32 M x N: the matmul's rows before a reduction that is not fused
OUT = "out"

# kernels.py's op codes (3 bits each in a chain)
_OPS = {"bias": 1, "relu": 2, "gelu": 3, "silu": 4, "sigmoid": 5, "tanh": 6}
_REDUCTIONS = {None: 0, Reduction.SOFTMAX: 1, Reduction.RMSNORM: 2, Reduction.LAYER_NORM: 3}
LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class Launch:
    """One kernel launch. `args` are the kernel's runtime parameters in order, each
    (parameter, kind, value): a buffer's name (BUFFER, resolved by the runner: the region's
    inputs, `out`, `scratch`) or a scalar (I32, F32)."""

    kernel: str
    args: tuple[tuple[str, str, Any], ...]
    constexprs: tuple[tuple[str, Any], ...]
    grid: tuple[int, int, int]
    num_warps: int
    num_stages: int
    waves_per_eu: int = 0  # HIP only; 0: the compiler's choice (not passed)

    def options(self) -> dict[str, int]:
        """Launch / compile options as Triton takes them."""
        opts = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        if self.waves_per_eu:
            opts["waves_per_eu"] = self.waves_per_eu
        return opts


def pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(n)))


def chain_code(ops: tuple[Epilogue | Pointwise, ...]) -> tuple[int, int]:
    """(code, length) of a chain of ops, op i in bits 3i..3i+2."""
    code = 0
    for i, op in enumerate(ops):
        code |= _OPS[op.value] << (3 * i)
    return code, len(ops)


def _buf(param: str, name: str) -> tuple[str, str, str]:
    return (param, BUFFER, name)


def _opts(config: Config) -> dict[str, int]:
    return {"num_warps": int(config["num_warps"]), "num_stages": int(config.get("num_stages", 1)),
            "waves_per_eu": int(config.get("waves_per_eu", 0))}


def dot_mode(region: Region, config: Config, interpret: bool) -> str:
    """`tl.dot`'s operands: the f32 choice of the config, else the 16-bit storage as it is.
    Triton's interpreter multiplies bf16 operands as their integer bits: there they are
    widened to f32 first (exact products either way, f32 accumulation as on a GPU)."""
    if region.dtype == "f32":
        return str(config.get("dot", "ieee"))
    return "widen" if region.dtype == "bf16" and interpret else "native"


def _fused(region: FusedRegion, config: Config, dot: str) -> list[Launch]:
    bm, bn, bk = (int(config[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    fuse = region.reduction is not None and bool(config.get("fuse_reduction", False))
    split = region.reduction is not None and not fuse
    pro, pro_len = chain_code(region.prologue)
    epi, epi_len = chain_code(region.epilogue)
    target = SCRATCH if split else OUT
    mm = Launch(
        "fused_matmul",
        (_buf("a_ptr", "A"), _buf("b_ptr", "B"),
         _buf("bias_ptr", "bias" if region.has_bias else target),
         _buf("res_ptr", "residual" if region.residual else target), _buf("out_ptr", target),
         ("M", I32, region.M), ("N", I32, region.N), ("K", I32, region.K),
         ("eps", F32, region.eps)),
        (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("GROUP_M", int(config["GROUP_M"])),
         ("EVEN_K", region.K % bk == 0), ("DOT", dot), ("PROLOGUE", pro),
         ("PRO_LEN", pro_len), ("EPILOGUE", epi), ("EPI_LEN", epi_len),
         ("RESIDUAL", region.residual), ("REDUCTION", _REDUCTIONS[region.reduction]),
         ("FUSE_ROW", fuse)),
        (-(-region.M // bm) * -(-region.N // bn), 1, 1), **_opts(config))
    if not split:
        return [mm]
    # the reduction as its own pass over the float32 rows, one row per program
    row_block = min(pow2(region.N), 16384)
    reduce = Launch(
        "rowwise",
        (_buf("x_ptr", SCRATCH), _buf("bias_ptr", SCRATCH), _buf("res_ptr", SCRATCH),
         _buf("out_ptr", OUT), ("M", I32, region.M), ("N", I32, region.N),
         ("eps", F32, region.eps)),
        (("BLOCK_M", 1), ("BLOCK_N", row_block), ("ONE_TILE", row_block >= region.N),
         ("EPILOGUE", 0), ("EPI_LEN", 0), ("RESIDUAL", False),
         ("REDUCTION", _REDUCTIONS[region.reduction])),
        (region.M, 1, 1), num_warps=min(16, max(1, row_block // 256)), num_stages=1)
    return [mm, reduce]


def _gated(region: GatedRegion, config: Config, dot: str) -> list[Launch]:
    bm, bn, bk = (int(config[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    act, _ = chain_code((region.activation,))
    return [Launch(
        "gated_matmul",
        (_buf("a_ptr", "A"), _buf("wg_ptr", "Wg"), _buf("wu_ptr", "Wu"),
         _buf("bg_ptr", "bias_g" if region.bias else OUT),
         _buf("bu_ptr", "bias_u" if region.bias else OUT), _buf("out_ptr", OUT),
         ("M", I32, region.M), ("N", I32, region.N), ("K", I32, region.K)),
        (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("GROUP_M", int(config["GROUP_M"])),
         ("EVEN_K", region.K % bk == 0), ("DOT", dot), ("ACTIVATION", act),
         ("HAS_BIAS", region.bias)),
        (-(-region.M // bm) * -(-region.N // bn), 1, 1), **_opts(config))]


def _rowwise(region: RowwiseRegion, config: Config, dot: str) -> list[Launch]:
    bm, bn = int(config["BLOCK_M"]), int(config["BLOCK_N"])
    epi, epi_len = chain_code(region.epilogue)
    return [Launch(
        "rowwise",
        (_buf("x_ptr", "X"), _buf("bias_ptr", "bias" if region.has_bias else OUT),
         _buf("res_ptr", "residual" if region.residual else OUT), _buf("out_ptr", OUT),
         ("M", I32, region.M), ("N", I32, region.N), ("eps", F32, region.eps)),
        (("BLOCK_M", bm), ("BLOCK_N", bn), ("ONE_TILE", bn >= region.N), ("EPILOGUE", epi),
         ("EPI_LEN", epi_len), ("RESIDUAL", region.residual),
         ("REDUCTION", _REDUCTIONS[region.reduction])),
        (-(-region.M // bm), 1, 1), **_opts(config))]


def _attention(region: AttentionRegion, config: Config, dot: str) -> list[Launch]:
    bm, bn = int(config["BLOCK_M"]), int(config["BLOCK_N"])
    offset = region.causal_offset
    return [Launch(
        "attention",
        (_buf("q_ptr", "q"), _buf("k_ptr", "k"), _buf("v_ptr", "v"), _buf("o_ptr", OUT),
         ("seq_q", I32, region.seq_q), ("seq_k", I32, region.seq_k),
         ("causal_offset", I32, offset or 0), ("qk_scale", F32, region.scale * LOG2E)),
        (("HEAD_DIM", region.head_dim), ("D_PAD", max(16, pow2(region.head_dim))),
         ("BLOCK_M", bm), ("BLOCK_N", bn), ("CAUSAL", offset is not None),
         ("DOT", dot)),
        (-(-region.seq_q // bm), region.batch * region.heads, 1), **_opts(config))]


_PLANS: dict[type, Any] = {FusedRegion: _fused, GatedRegion: _gated,
                           RowwiseRegion: _rowwise, AttentionRegion: _attention}


def plan(region: Region, config: Config, interpret: bool = False) -> list[Launch]:
    """The launches, in order, that compute `region` into `out` under `config` (`interpret`:
    for Triton's interpreter)."""
    return list(_PLANS[type(region)](region, config, dot_mode(region, config, interpret)))


def buffers(region: Region, launches: list[Launch]) -> dict[str, tuple[tuple[int, ...], str]]:
    """The buffers the launches write besides the inputs: name -> (shape, dtype name)."""
    made = {OUT: (output_shape(region), region.dtype)}
    if any(v == SCRATCH for launch in launches for _, kind, v in launch.args if kind == BUFFER):
        made[SCRATCH] = (output_shape(region), "f32")
    return made
