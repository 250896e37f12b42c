"""HIP-dialect source for the wmma_gemm lane: constants + generated prologue/epilogue/reduction
+ gemm_kernel.hip + runner ABI.

The GEMM text lives beside this module (`gemm_kernel.hip`). emit writes the header comment,
the compile-time constants of one (region, config), and the per-region device functions: the
prologue is `lanes._scalar_body.prologue_function` (as in the scalar lanes), the epilogue uses
its `epilogue_function` and the row reduction its `row_program`, so the math is the one shared
definition every lane renders.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from arbiter.lane import Config, EmitError, FusedRegion, KernelSource, Platform, Region

from .._gpu.abi import REBUILD, runner_table, store_defines
from .._scalar_body import (
    Loop,
    Scalar,
    accumulator_init,
    epilogue_function,
    prologue_function,
    row_program,
)

__all__ = ["LANE", "ROW_WARPS", "emit", "smem_bytes"]

LANE = "wmma_gemm"
ROW_WARPS = 8  # rows (one warp each) per block of the row-reduction kernel
_KERNEL = Path(__file__).with_name("gemm_kernel.hip")


def smem_bytes(config: Config | Mapping[str, Any]) -> int:
    """Dynamic shared memory of one GEMM block; mirrors LDA_S / LDB_S in gemm_kernel.hip."""
    bm, bn, bk = int(config["block_m"]), int(config["block_n"]), int(config["block_k"])
    return int(config["stages"]) * (bm * (bk + 8) + bk * (bn + 8)) * 2


def _row_reduce(region: FusedRegion) -> list[str]:
    """Second phase: one warp per output row runs the shared row program in place on the f32
    rows the GEMM wrote (the output itself for f32 storage), then rounds them into a 16-bit
    output."""
    assert region.reduction is not None
    prog = row_program((), False, region.reduction, region.eps)
    lines = [
        f"constexpr int ROW_WARPS = {ROW_WARPS};",
        "__global__ void __launch_bounds__(ROW_WARPS * 32)",
        "row_reduce_kernel(float* rows, arb_store_t* out) {",
        "    constexpr int N = GEMM_N;",
        "    const int row = blockIdx.x * ROW_WARPS + threadIdx.x / 32;",
        "    const int lane = threadIdx.x & 31;",
        "    if (row >= GEMM_M) return;",
        "    const float* src = rows + (size_t)row * N;",
        "    float* dst = rows + (size_t)row * N;",
        "    (void)out;",
        "    (void)src;",
    ]
    lines += [f"    float {name} = {accumulator_init(kind)};" for name, kind in prog.accumulators]
    for step in prog.steps:
        if isinstance(step, Loop):
            lines.append("    for (int j = lane; j < N; j += 32) {")
            lines += [f"        {s}" for s in step.body]
            lines.append("    }")
            for name, kind in step.reduce:
                lines.append(f"    {name} = arb_warp_{kind}({name});")
        elif isinstance(step, Scalar):
            lines += [f"    {s}" for s in step.body]
    if region.dtype != "f32":
        lines += ["    arb_store_t* o = out + (size_t)row * N;",
                  "    for (int j = lane; j < N; j += 32) o[j] = arb_store(dst[j]);"]
    lines.append("}")
    return lines


def _check(region: Region, config: Config) -> FusedRegion:
    if not isinstance(region, FusedRegion):
        raise EmitError(f"{LANE}: only matmul-rooted (fused) regions, got {region.kind}")
    if config["precision"] not in ("f16", "bf16"):
        raise EmitError(f"{LANE}: precision {config['precision']!r} not f16/bf16")
    if region.dtype != "f32" and config["precision"] != region.dtype:
        raise EmitError(f"{LANE}: {region.dtype} storage computes with {region.dtype} operands, "
                        f"not {config['precision']}")
    if config["staging"] not in ("inline", "prepass"):
        raise EmitError(f"{LANE}: staging {config['staging']!r} not inline/prepass")
    bm, bn, wm, wn = (int(config[k]) for k in ("block_m", "block_n", "warp_m", "warp_n"))
    if bm % wm or bn % wn or int(config["threads"]) != 32 * (bm // wm) * (bn // wn):
        raise EmitError(f"{LANE}: threads must be 32 * (block_m/warp_m) * (block_n/warp_n)")
    return region


def emit(region: Region, config: Config, platform: Platform) -> KernelSource:
    r = _check(region, config)
    bf16 = config["precision"] == "bf16"
    prepass = config["staging"] == "prepass"
    smem = smem_bytes(config)
    consts = {
        "GEMM_M": r.M,
        "GEMM_N": r.N,
        "GEMM_K": r.K,
        "GEMM_BM": int(config["block_m"]),
        "GEMM_BN": int(config["block_n"]),
        "GEMM_BK": int(config["block_k"]),
        "GEMM_WM": int(config["warp_m"]),
        "GEMM_WN": int(config["warp_n"]),
        "GEMM_THREADS": int(config["threads"]),
        "GEMM_STAGES": int(config["stages"]),
        "GEMM_GROUP_M": int(config["group_m"]),
        "GEMM_PREPASS": int(prepass),
        "GEMM_SMEM_BYTES": smem,
        "HAS_BIAS": int(r.has_bias),
        "HAS_RES": int(r.residual),
        "HAS_REDUCTION": int(r.reduction is not None),
        "HAS_PROLOGUE": int(bool(r.prologue)),
        "GEMM_NATIVE": int(r.dtype != "f32"),
        "VEC_A": int(r.K % 4 == 0),  # rows of A start aligned: 4 elements per load
        "VEC_B": int(r.N % 4 == 0),
    }
    lines = [
        f"/* arbiter lane {LANE}: generated, do not edit.",
        f" * region key: {r.key}",
        f" * region:     {r.describe()} eps={r.eps!r}",
        f" * config:     {config}",
        f" * emitted on: {platform.value} (the text is the same for rocm and cuda); "
        f"shared memory {smem} bytes per block",
        *REBUILD,
        " */",
    ]
    if bf16:
        lines.append("#define ARB_FRAG_BF16 1")
    lines += store_defines(r).splitlines()
    lines.append('#include "arb_frag.h"')
    lines += [f"#define {k} {v}" for k, v in consts.items()]
    lines.append("")
    lines += runner_table(r).splitlines()
    lines.append("")
    lines += prologue_function(r.prologue, "__device__ __forceinline__").splitlines()
    lines.append("")
    lines += epilogue_function(r.epilogue, r.residual, "GEMM_N").splitlines()
    if r.reduction is not None:
        lines.append("")
        lines += _row_reduce(r)
    text = "\n".join(lines) + "\n\n" + _KERNEL.read_text()
    return KernelSource(LANE, r.key, config, "hip", text)
