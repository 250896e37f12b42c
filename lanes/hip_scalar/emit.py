"""HIP source generation for the generic GPU lane: one readable .hip text per (region, config).

The per-row math comes from lanes/_scalar_body.py (shared with the x86 C lane). This module
decides how a row is spread over threads and where it lives while the program runs:

* strategy "thread": one thread per row (the correctness-first baseline), ROWS rows per block;
* strategy "warp":   one 32-wide warp per row, accumulators all-reduced with xor shuffles;
* strategy "block":  one block of THREADS per row, warp shuffles then a shared-memory step.

With cache "global" every loop of the program walks the row in global memory (src/dst are the
row pointers, j the column); with cache "regs" the row is loaded once (float4 loads when VEC=4)
into a per-thread register slice, every loop runs on the slice (src/dst point at it, j is the
slot), and the result is stored once: one read and one write of the row however many loops.

Fused (GEMM-rooted) regions: a shared-memory tiled f32 matmul, each thread owning a TM x TN
register tile (rows ty + i*BM/TM, columns tx + j*BN/TN: conflict-free LDS reads and coalesced
stores), the prologue applied while loading A. Without a reduction the row program (a single
pointwise loop) is applied to each accumulator at writeback. With a reduction the GEMM writes C
and a second kernel runs the whole row program in place, one block per row (rows need every
column before they can be normalized; a second pass costs one extra read+write of C, small
next to the matmul, and works for any N).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from arbiter.lane import (
    Config,
    EmitError,
    FusedRegion,
    GatedRegion,
    KernelSource,
    Region,
    RowwiseRegion,
    input_shapes,
)

from .._gpu.abi import REBUILD_TEXT, runner_tail
from .._scalar_body import (
    Loop,
    RowProgram,
    Scalar,
    accumulator_init,
    defines,
    pointwise,
    prologue_function,
    row_program,
)

__all__ = ["LANE", "RowSpread", "emit", "items_per_thread", "parse_pair", "second_pass_spread"]

LANE = "hip_scalar"
REG_BUDGET = 64  # floats of row/bias/residual a thread may keep in registers (cache="regs")


def parse_pair(text: str) -> tuple[int, int]:
    """"128x64" -> (128, 64)."""
    a, _, b = str(text).partition("x")
    return int(a), int(b)


def items_per_thread(n: int, threads: int, vec: int) -> int:
    """Register slots one thread holds for a row of n values (whole VEC-wide chunks)."""
    chunks = -(-n // (threads * vec))
    return chunks * vec


@dataclass(frozen=True)
class RowSpread:
    strategy: str  # thread | warp | block
    threads: int  # threads per row
    rows: int  # rows per block
    vec: int  # 1 or 4
    cache: str  # global | regs

    @classmethod
    def of(cls, config: Config) -> RowSpread:
        return cls(str(config["strategy"]), int(config["threads"]), int(config["rows"]),
                   int(config["vec"]), str(config["cache"]))


def second_pass_spread(n: int, arrays: int) -> RowSpread:
    """The fixed row kernel a fused region's reduction runs in (one block per row)."""
    threads = 128 if n <= 2048 else 256
    vec = 4 if n % 4 == 0 else 1
    regs = items_per_thread(n, threads, vec) * arrays <= REG_BUDGET
    return RowSpread("block", threads, 1, vec if regs else 1, "regs" if regs else "global")


# -- common text ---------------------------------------------------------------------------


def _header(region: Region, config: Config) -> str:
    return (
        f"/* arbiter lane {LANE}: generated, do not edit.\n"
        f" * region key: {region.key}\n"
        f" * region:     {region.describe()}\n"
        f" * config:     {config}\n"
        + REBUILD_TEXT
        + " */\n#include \"arb_gpu.h\"\n\n"
    )


def _defines(items: Sequence[tuple[str, object, str]]) -> str:
    return defines(items) + "\n"


def _indent(lines, n: int) -> list[str]:
    pad = " " * n
    return [pad + ln for ln in lines]


# -- the row kernel ------------------------------------------------------------------------

_BLOCK_REDUCE = """
/* Block all-reduce: warp butterflies, then every thread folds the per-warp partials. Each call
 * site owns its own shared slot row, so no barrier is needed before a slot is reused. */
__device__ __forceinline__ float block_sum(float v, float* slot)
{
    v = arb_warp_sum(v);
    if ((threadIdx.x & (ARB_WARP - 1)) == 0) slot[threadIdx.x / ARB_WARP] = v;
    __syncthreads();
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < THREADS / ARB_WARP; ++w) t += slot[w];
    return t;
}

__device__ __forceinline__ float block_max(float v, float* slot)
{
    v = arb_warp_max(v);
    if ((threadIdx.x & (ARB_WARP - 1)) == 0) slot[threadIdx.x / ARB_WARP] = v;
    __syncthreads();
    float t = -INFINITY;
#pragma unroll
    for (int w = 0; w < THREADS / ARB_WARP; ++w) t = fmaxf(t, slot[w]);
    return t;
}
"""


def _reduce_line(spread: RowSpread, name: str, kind: str, slot: int) -> str:
    if spread.strategy == "thread":
        return ""
    if spread.strategy == "warp":
        return f"{name} = arb_warp_{kind}({name});"
    return f"{name} = block_{kind}({name}, red[{slot}]);"


def _program_lines(prog: RowProgram, spread: RowSpread) -> list[str]:
    """The program's steps, each Loop spread over the row's threads, accumulators combined."""
    lines = [f"float {n} = {accumulator_init(k)};" for n, k in prog.accumulators]
    slot = 0
    for step in prog.steps:
        if isinstance(step, Scalar):
            lines += list(step.body)
            continue
        assert isinstance(step, Loop)
        if spread.cache == "regs":
            lines += ["#pragma unroll", "for (int j = 0; j < ITEMS; ++j) {",
                      "    if (SLOT_COL(j) >= N) continue;"]
        else:
            lines.append("for (int j = lane; j < N; j += THREADS) {")
        lines += _indent(step.body, 4) + ["}"]
        for name, kind in step.reduce:
            red = _reduce_line(spread, name, kind, slot)
            if red:
                lines.append(red)
                slot += 1
    return lines


def _reduce_slots(prog: RowProgram) -> int:
    return sum(len(s.reduce) for s in prog.steps if isinstance(s, Loop))


def _operand_params(prog: RowProgram) -> list[str]:
    """Kernel parameters of the program's operands: the whole array, `<name>_g`."""
    return [f"const float* __restrict__ {o.name}_g" for o in prog.operands]


def _operand_args(prog: RowProgram, region: FusedRegion | RowwiseRegion) -> list[str]:
    """The runner's device pointers for those parameters."""
    idx = {n: i for i, n in enumerate(input_shapes(region))}
    return [f"in[{idx[o.input]}]" for o in prog.operands]


def _row_kernel(prog: RowProgram, spread: RowSpread, in_place: bool) -> str:
    """`row_kernel(X, <operands>, out)`: the row program over M rows, spread per `spread`."""
    restrict = "" if in_place else " __restrict__"
    params = [f"const float*{restrict} X", *_operand_params(prog), f"float*{restrict} out"]
    block = spread.threads * spread.rows
    body: list[str] = [
        "const int lane = threadIdx.x % THREADS;" if spread.threads > 1 else "const int lane = 0;",
        "const long long r = (long long)blockIdx.x * ROWS + threadIdx.x / THREADS;",
        "if (r >= M) return;  /* uniform per row: whole warps / blocks leave together */",
        "(void)lane;",
    ]
    slots = _reduce_slots(prog)
    if spread.strategy == "block" and slots:
        body.insert(0, f"__shared__ float red[{slots}][THREADS / ARB_WARP];")
    if spread.cache == "global":
        body += ["const float* src = X + r * N;", "float* dst = out + r * N;"]
        body += [f"const float* {o.name} = {o.row(o.name + '_g', 'r')};" for o in prog.operands]
        body += _program_lines(prog, spread)
    else:
        arrays = [("row_v", "X + r * N")]
        arrays += [(f"{o.name}_v", o.row(o.name + "_g", "r")) for o in prog.operands]
        body += [f"float {a}[ITEMS];" for a, _ in arrays]
        body += _load_slice(arrays, spread)
        body.append("{")
        inner = ["const float* src = row_v;", "float* dst = row_v;"]
        inner += [f"const float* {o.name} = {o.name}_v;" for o in prog.operands]
        inner += _program_lines(prog, spread)
        body += _indent(inner, 4) + ["}"]
        body += _store_slice(spread)
    text = (
        f"/* One row per {'thread' if spread.threads == 1 else spread.strategy}; "
        f"{spread.rows} row(s) per block; row cached in {spread.cache}. */\n"
        f"__global__ void __launch_bounds__({block}) row_kernel({', '.join(params)})\n{{\n"
        + "\n".join(_indent(body, 4))
        + "\n}\n"
    )
    return text


def _load_slice(arrays: list[tuple[str, str]], spread: RowSpread) -> list[str]:
    lines = ["#pragma unroll", "for (int c = 0; c < ITEMS / VEC; ++c) {",
             "    const int j0 = (c * THREADS + lane) * VEC;"]
    for name, base in arrays:
        if spread.vec == 4:
            lines += [
                "    if (j0 < N) {",
                f"        const float4 t = *reinterpret_cast<const float4*>({base} + j0);",
                f"        {name}[c * 4 + 0] = t.x; {name}[c * 4 + 1] = t.y;",
                f"        {name}[c * 4 + 2] = t.z; {name}[c * 4 + 3] = t.w;",
                "    } else {",
                f"        {name}[c * 4 + 0] = {name}[c * 4 + 1] = {name}[c * 4 + 2] = "
                f"{name}[c * 4 + 3] = 0.0f;",
                "    }",
            ]
        else:
            lines.append(f"    {name}[c] = j0 < N ? ({base})[j0] : 0.0f;")
    return lines + ["}"]


def _store_slice(spread: RowSpread) -> list[str]:
    lines = ["float* dst_g = out + r * N;", "#pragma unroll",
             "for (int c = 0; c < ITEMS / VEC; ++c) {",
             "    const int j0 = (c * THREADS + lane) * VEC;"]
    if spread.vec == 4:
        lines += ["    if (j0 < N)",
                  "        *reinterpret_cast<float4*>(dst_g + j0) = make_float4(",
                  "            row_v[c * 4 + 0], row_v[c * 4 + 1], row_v[c * 4 + 2], "
                  "row_v[c * 4 + 3]);"]
    else:
        lines.append("    if (j0 < N) dst_g[j0] = row_v[c];")
    return lines + ["}"]


def _row_defines(
    region: FusedRegion | RowwiseRegion, spread: RowSpread
) -> list[tuple[str, object, str]]:
    items: list[tuple[str, object, str]] = [
        ("M", region.M, "rows"),
        ("N", region.N, "row length"),
        ("THREADS", spread.threads, "threads per row"),
        ("ROWS", spread.rows, "rows per block"),
        ("VEC", spread.vec, "floats per load/store in the regs slice"),
    ]
    if spread.cache == "regs":
        items += [
            ("ITEMS", items_per_thread(region.N, spread.threads, spread.vec),
             "register slots per thread"),
            ("SLOT_COL(j)", "((((j) / VEC) * THREADS + lane) * VEC + (j) % VEC)",
             "column held in slot j"),
        ]
    return items


def _row_launch(prog: RowProgram, region: FusedRegion | RowwiseRegion, src: str) -> str:
    args = [src, *_operand_args(prog, region), "out"]
    grid = "(M + ROWS - 1) / ROWS, THREADS * ROWS"
    return f"row_kernel<<<{grid}, 0, stream>>>({', '.join(args)});"


def _emit_rowwise(region: RowwiseRegion, config: Config) -> str:
    spread = RowSpread.of(config)
    _check_spread(region, spread)
    prog = row_program(region.epilogue, region.residual, region.reduction, region.eps)
    prog_has_red = region.reduction is not None
    return (
        _header(region, config)
        + _defines(_row_defines(region, spread))
        + (_BLOCK_REDUCE if spread.strategy == "block" and prog_has_red else "")
        + "\n"
        + _row_kernel(prog, spread, in_place=False)
        + runner_tail(region, [_row_launch(prog, region, "in[0]")])
    )


def _check_spread(region: FusedRegion | RowwiseRegion, s: RowSpread) -> None:
    if s.vec == 4 and region.N % 4:
        raise EmitError(f"{LANE}: vec=4 needs N % 4 == 0 (N={region.N})")
    if s.threads * s.rows > 1024:
        raise EmitError(f"{LANE}: block of {s.threads * s.rows} threads exceeds 1024")


# -- the fused GEMM ------------------------------------------------------------------------

_CELL = """
/* A one-element view indexed by column: lets the shared row program's `src[j]` / `dst[j]` text
 * read and write a single accumulator at writeback. */
struct ArbCell {
    float* p;
    int j0;
    __device__ __forceinline__ float& operator[](int j) const { return p[j - j0]; }
};
"""

_GEMM = """
/* C[M,N] = prologue(A)[M,K] @ B[K,N], BM x BN tile per block, BK deep; thread (ty, tx) owns
 * rows ty + i*(BM/TM) and columns tx + j*(BN/TN) of the tile in registers. */
__global__ void __launch_bounds__(MM_THREADS) gemm_kernel(
    const float* __restrict__ A, const float* __restrict__ B{extra_params}, float* __restrict__ C)
{{
    __shared__ float As[BK][BM + 4];  /* A tile, transposed: As[k][m] */
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN);
    const int ty = tid / (BN / TN);
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {{
        for (int idx = tid; idx < BM * BK; idx += MM_THREADS) {{
            const int r = idx / BK, c = idx % BK;
            const int gr = m0 + r, gc = k0 + c;
            As[c][r] = (gr < M && gc < K) ? PROLOGUE(A[(long long)gr * K + gc]) : 0.0f;
        }}
        for (int idx = tid; idx < BK * BN; idx += MM_THREADS) {{
            const int r = idx / BN, c = idx % BN;
            const int gr = k0 + r, gc = n0 + c;
            Bs[r][c] = (gr < K && gc < N) ? B[(long long)gr * N + gc] : 0.0f;
        }}
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {{
            float a[TM], b[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[kk][ty + i * (BM / TM)];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[kk][tx + j * (BN / TN)];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }}
        __syncthreads();
    }}

#pragma unroll
    for (int i = 0; i < TM; ++i) {{
        const int row = m0 + ty + i * (BM / TM);
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {{
            const int col = n0 + tx + j * (BN / TN);
            if (col < N) C[(long long)row * N + col] = {writeback};
        }}
    }}
}}
"""


def _epilogue_fn(prog: RowProgram) -> str:
    (loop,) = prog.steps  # no reduction: one pointwise loop
    assert isinstance(loop, Loop)
    params = ["float x", "long long row", "int j", *_operand_params(prog)]
    lines = ["ArbCell src{&x, j}, dst{&x, j};"]
    lines += [f"const float* {o.name} = {o.row(o.name + '_g', 'row')};" for o in prog.operands]
    lines += list(loop.body) + ["(void)row;", "return x;"]
    return (
        _CELL
        + "\n/* The region's row program (lanes/_scalar_body.py) on one element at writeback. */\n"
        f"__device__ __forceinline__ float epilogue({', '.join(params)})\n{{\n"
        + "\n".join(_indent(lines, 4)) + "\n}\n"
    )


def _emit_fused(region: FusedRegion, config: Config) -> str:
    bm, bn = parse_pair(config["tile"])
    tm, tn = parse_pair(config["micro"])
    bk = int(config["bk"])
    if bm % tm or bn % tn:
        raise EmitError(f"{LANE}: tile {bm}x{bn} is not a multiple of micro {tm}x{tn}")
    threads = (bm // tm) * (bn // tn)
    if threads > 1024:
        raise EmitError(f"{LANE}: {threads} threads per block exceeds 1024")
    idx = {n: i for i, n in enumerate(input_shapes(region))}
    prog = row_program(region.epilogue, region.residual, region.reduction, region.eps)
    reduce = region.reduction is not None
    gemm_defs = [
        ("M", region.M, "rows of A and C"),
        ("N", region.N, "columns of B and C"),
        ("K", region.K, "inner dimension"),
        ("BM", bm, "block tile rows"),
        ("BN", bn, "block tile columns"),
        ("BK", bk, "block tile depth"),
        ("TM", tm, "register tile rows per thread"),
        ("TN", tn, "register tile columns per thread"),
        ("MM_THREADS", threads, "threads per GEMM block"),
    ]
    extra_params, extra_args, writeback = "", [], "acc[i][j]"
    parts = [_header(region, config), _defines(gemm_defs),
             prologue_function(region.prologue, "__device__ __forceinline__")]
    if not reduce and (region.epilogue or region.residual):
        extra_params = "".join(f", {p}" for p in _operand_params(prog))
        extra_args = _operand_args(prog, region)
        wb_args = ["acc[i][j]", "row", "col", *(f"{o.name}_g" for o in prog.operands)]
        parts.append(_epilogue_fn(prog))
        writeback = f"epilogue({', '.join(wb_args)})"
    parts.append(_GEMM.format(extra_params=extra_params, writeback=writeback))
    args = ", ".join([f"in[{idx['A']}]", f"in[{idx['B']}]", *extra_args, "out"])
    launches = [
        "const dim3 mm_grid((N + BN - 1) / BN, (M + BM - 1) / BM);",
        f"gemm_kernel<<<mm_grid, MM_THREADS, 0, stream>>>({args});",
    ]
    if reduce:
        arrays = 1 + len(prog.operands)
        spread = second_pass_spread(region.N, arrays)
        row_defs = [d for d in _row_defines(region, spread) if d[0] not in ("M", "N")]
        parts += [
            "\n/* Second pass: the row program (chain + reduction) in place on C. */\n",
            _defines(row_defs),
            _BLOCK_REDUCE,
            "\n",
            _row_kernel(prog, spread, in_place=True),
        ]
        launches.append(
            "{ const hipError_t e = hipGetLastError(); if (e != hipSuccess) return e; }")
        launches.append(_row_launch(prog, region, "out"))
    return "".join(parts) + runner_tail(region, launches)


_GATED_GEMM = """
/* out[M,N] = act(A @ Wg + bias_g) * (A @ Wu + bias_u): both products of a BM x BN tile in one
 * block from one A tile in shared memory; thread (ty, tx) owns the same cells of both. */
__global__ void __launch_bounds__(MM_THREADS) gated_kernel(
    const float* __restrict__ A, const float* __restrict__ Wg, const float* __restrict__ Wu,
    const float* __restrict__ bias_g, const float* __restrict__ bias_u, float* __restrict__ C)
{{
    __shared__ float As[BK][BM + 4];  /* A tile, transposed: As[k][m] */
    __shared__ float Gs[BK][BN];
    __shared__ float Us[BK][BN];
    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN);
    const int ty = tid / (BN / TN);
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;
    float gate[TM][TN], up[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) gate[i][j] = up[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += BK) {{
        for (int idx = tid; idx < BM * BK; idx += MM_THREADS) {{
            const int r = idx / BK, c = idx % BK;
            const int gr = m0 + r, gc = k0 + c;
            As[c][r] = (gr < M && gc < K) ? A[(long long)gr * K + gc] : 0.0f;
        }}
        for (int idx = tid; idx < BK * BN; idx += MM_THREADS) {{
            const int r = idx / BN, c = idx % BN;
            const int gr = k0 + r, gc = n0 + c;
            const bool in = gr < K && gc < N;
            Gs[r][c] = in ? Wg[(long long)gr * N + gc] : 0.0f;
            Us[r][c] = in ? Wu[(long long)gr * N + gc] : 0.0f;
        }}
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {{
            float a[TM], g[TN], u[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[kk][ty + i * (BM / TM)];
#pragma unroll
            for (int j = 0; j < TN; ++j) {{
                g[j] = Gs[kk][tx + j * (BN / TN)];
                u[j] = Us[kk][tx + j * (BN / TN)];
            }}
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) {{
                    gate[i][j] = fmaf(a[i], g[j], gate[i][j]);
                    up[i][j] = fmaf(a[i], u[j], up[i][j]);
                }}
        }}
        __syncthreads();
    }}

#pragma unroll
    for (int i = 0; i < TM; ++i) {{
        const int row = m0 + ty + i * (BM / TM);
        if (row >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {{
            const int col = n0 + tx + j * (BN / TN);
            if (col >= N) continue;
            const float x = gate[i][j]{bias_g};
            C[(long long)row * N + col] = ({act}) * (up[i][j]{bias_u});
        }}
    }}
    (void)bias_g; (void)bias_u;
}}
"""


def _emit_gated(region: GatedRegion, config: Config) -> str:
    bm, bn = parse_pair(config["tile"])
    tm, tn = parse_pair(config["micro"])
    bk = int(config["bk"])
    if bm % tm or bn % tn:
        raise EmitError(f"{LANE}: tile {bm}x{bn} is not a multiple of micro {tm}x{tn}")
    threads = (bm // tm) * (bn // tn)
    if threads > 1024:
        raise EmitError(f"{LANE}: {threads} threads per block exceeds 1024")
    idx = {n: i for i, n in enumerate(input_shapes(region))}
    defs = [
        ("M", region.M, "rows of A and C"),
        ("N", region.N, "columns of Wg, Wu and C"),
        ("K", region.K, "inner dimension"),
        ("BM", bm, "block tile rows"),
        ("BN", bn, "block tile columns"),
        ("BK", bk, "block tile depth"),
        ("TM", tm, "register tile rows per thread"),
        ("TN", tn, "register tile columns per thread"),
        ("MM_THREADS", threads, "threads per block"),
    ]
    kernel = _GATED_GEMM.format(bias_g=" + bias_g[col]" if region.bias else "",
                                bias_u=" + bias_u[col]" if region.bias else "",
                                act=pointwise(region.activation, "x"))
    bias = ([f"in[{idx['bias_g']}]", f"in[{idx['bias_u']}]"] if region.bias
            else ["NULL", "NULL"])
    args = ", ".join([f"in[{idx['A']}]", f"in[{idx['Wg']}]", f"in[{idx['Wu']}]", *bias, "out"])
    launches = [
        "const dim3 mm_grid((N + BN - 1) / BN, (M + BM - 1) / BM);",
        f"gated_kernel<<<mm_grid, MM_THREADS, 0, stream>>>({args});",
    ]
    return (_header(region, config) + _defines(defs) + kernel
            + runner_tail(region, launches))


def emit(region: Region, config: Config) -> KernelSource:
    if isinstance(region, GatedRegion):
        text = _emit_gated(region, config)
    elif isinstance(region, FusedRegion):
        text = _emit_fused(region, config)
    elif isinstance(region, RowwiseRegion):
        text = _emit_rowwise(region, config)
    else:
        raise EmitError(f"{LANE}: no kernel for {region.kind} regions (attention: the fa2 lane)")
    return KernelSource(LANE, region.key, config, "hip", text)
