"""C source generation for the x86 C lane: one readable translation unit per (region, config).

The per-row math comes from `lanes/_scalar_body.py` (shared with the HIP lane); this module
only decides how loops are spread (plain `for` + `omp simd`), how rows are scheduled across
OpenMP threads, and, for fused regions, the blocked GEMM that feeds the row program.

Entry points of every generated library (plain C ABI):
  long arbiter_workspace_floats(void)   floats of scratch the caller must provide (>= 1)
  int  arbiter_run(const float* const* inputs, float* out, float* work)
`inputs` holds the region's arrays in `arbiter.lane.input_shapes` order; every pointer is
valid (the runner never passes NULL). Returns 0 on success.
"""

from __future__ import annotations

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

from .._scalar_body import (
    C_PRELUDE,
    Loop,
    RowProgram,
    Scalar,
    accumulator_init,
    pointwise,
    prologue_function,
)
from .._scalar_body import defines as _defines
from .._scalar_body import row_program as _row_program

__all__ = ["emit", "parse_tile", "compile_options"]

LANE = "x86_c"


def parse_tile(tile: str) -> tuple[int, int]:
    """"12x32" -> (MR, NR): rows x columns of the register-tiled micro-kernel."""
    mr, _, nr = tile.partition("x")
    return int(mr), int(nr)


def compile_options(config: Config) -> tuple[str, ...]:
    """Lane-chosen flags on top of the base `-O3 -march=native -fopenmp` (never user text)."""
    opts = [f"-mprefer-vector-width={int(config['vec'])}"]
    if config["fast_math"]:
        # Keep inf semantics: the row programs start max-reductions at -INFINITY.
        opts += ["-ffast-math", "-fno-finite-math-only"]
    return tuple(opts)


def _header(region: Region, config: Config) -> str:
    return (
        f"/* arbiter lane {LANE}: generated, do not edit.\n"
        f" * region key: {region.key}\n"
        f" * region:     {region.describe()}\n"
        f" * config:     {config}\n"
        f" * rebuild:    gcc -O3 -march=native -fopenmp -shared -fPIC "
        f"{' '.join(compile_options(config))} kernel.c -o kernel.so\n"
        f" */\n"
    )


def _render_program(prog: RowProgram) -> list[str]:
    """Each Loop -> a plain `for` with `omp simd reduction(...)`; each Scalar -> its lines."""
    lines = [f"    float {name} = {accumulator_init(kind)};" for name, kind in prog.accumulators]
    for step in prog.steps:
        if isinstance(step, Scalar):
            lines += [f"    {s}" for s in step.body]
            continue
        assert isinstance(step, Loop)
        red = "".join(
            f" reduction({'max' if kind == 'max' else '+'}:{name})" for name, kind in step.reduce
        )
        lines.append(f"    #pragma omp simd{red}")
        lines.append("    for (long j = 0; j < N; ++j) {")
        lines += [f"        {s}" for s in step.body]
        lines.append("    }")
    return lines


def _row_function(prog: RowProgram) -> str:
    params = ["const float* src", "float* dst"]
    params += [f"const float* restrict {o.name}" for o in prog.operands]
    body = "\n".join(_render_program(prog))
    # src and dst may be the same row (fused regions work in place), so they are not restrict.
    return (
        "/* The region's per-row program (lanes/_scalar_body.py): chain, residual, reduction. */\n"
        f"static inline void row_program({', '.join(params)})\n{{\n{body}\n}}\n"
    )


def _row_args(prog: RowProgram, idx: dict[str, int], row: str) -> str:
    """The program's operands for row `row`, after src and dst, from the runner's inputs."""
    return "".join(f", {o.row(f'in[{idx[o.input]}]', row)}" for o in prog.operands)


_STREAM_COPY = r"""
/* Copy a finished row to its destination with non-temporal stores: the output is written
 * once and not read again here, so bypassing the cache saves the read-for-ownership. */
static inline void stream_row(float* dst, const float* src)
{
    long j = 0;
#if defined(__AVX512F__) && STREAM_VEC >= 512
    for (; j < N && ((uintptr_t)(dst + j) & 63u); ++j) dst[j] = src[j];
    for (; j + 16 <= N; j += 16) _mm512_stream_ps(dst + j, _mm512_loadu_ps(src + j));
#elif defined(__AVX__)
    for (; j < N && ((uintptr_t)(dst + j) & 31u); ++j) dst[j] = src[j];
    for (; j + 8 <= N; j += 8) _mm256_stream_ps(dst + j, _mm256_loadu_ps(src + j));
#endif
    for (; j < N; ++j) dst[j] = src[j];
}
"""


def _emit_rowwise(region: RowwiseRegion, config: Config) -> str:
    idx = {name: i for i, name in enumerate(input_shapes(region))}
    prog = _row_program(region.epilogue, region.residual, region.reduction, region.eps)
    stream = bool(config["stream"])
    defines = [
        ("M", region.M, "rows"),
        ("N", region.N, "row length"),
        ("THREADS", config["threads"], "OpenMP threads"),
        ("ROW_BLOCK", config["row_block"], "rows handed to a thread at a time"),
        ("STREAM", int(stream), "1: finish rows in scratch, stream them out"),
        ("STREAM_VEC", config["vec"], "store width for streaming"),
        ("WORK_FLOATS", f"({region.N if stream else 1}L * THREADS + 16)", "scratch floats"),
    ]
    dst = "scratch" if stream else "out + r * N"
    run = f"""
long arbiter_workspace_floats(void) {{ return WORK_FLOATS; }}

int arbiter_run(const float* const* in, float* out, float* work)
{{
    const float* X = in[{idx['X']}];
    #pragma omp parallel num_threads(THREADS)
    {{
        float* scratch = work + (long)omp_get_thread_num() * N;
        (void)scratch;
        #pragma omp for schedule({config["schedule"]}, ROW_BLOCK)
        for (long r = 0; r < M; ++r) {{
            row_program(X + r * N, {dst}{_row_args(prog, idx, 'r')});
#if STREAM
            stream_row(out + r * N, scratch);
#endif
        }}
#if STREAM
        _mm_sfence();
#endif
    }}
    return 0;
}}
"""
    return (
        _header(region, config)
        + _includes()
        + _defines(defines)
        + (_STREAM_COPY if stream else "")
        + "\n"
        + _row_function(prog)
        + run
    )


def _includes() -> str:
    return (
        "#include <omp.h>\n#include <stdint.h>\n#include <stdlib.h>\n"
        "#if defined(__AVX__)\n#include <immintrin.h>\n#endif\n" + C_PRELUDE + "\n"
    )


_GEMM = r"""
/* B[K,N] -> Bp: for each KC block of rows, NPANELS panels of NR columns, each panel stored
 * row by row (kc x NR), zero-padded past column N. */
static void pack_b(const float* restrict B, float* restrict Bp)
{
    #pragma omp for schedule(static) collapse(2)
    for (long k0 = 0; k0 < K; k0 += KC) {
        for (long jp = 0; jp < NPANELS; ++jp) {
            const long kc = K - k0 < KC ? K - k0 : KC;
            const long j0 = jp * NR;
            const long nr = N - j0 < NR ? N - j0 : NR;
            float* restrict dst = Bp + k0 * NPAD + jp * kc * NR;
            for (long p = 0; p < kc; ++p) {
                const float* restrict src = B + (k0 + p) * N + j0;
                for (long j = 0; j < nr; ++j) dst[p * NR + j] = src[j];
                for (long j = nr; j < NR; ++j) dst[p * NR + j] = 0.0f;
            }
        }
    }
}

/* A[i0:i0+mc, k0:k0+kc] -> Ap: panels of MR rows stored column by column (kc x MR), zero rows
 * past M; the prologue is applied here, once per element. */
static void pack_a(const float* restrict A, float* restrict Ap, long i0, long mc, long k0, long kc)
{
    const long panels = (mc + MR - 1) / MR;
    #pragma omp for schedule(static)
    for (long ip = 0; ip < panels; ++ip) {
        float* restrict dst = Ap + ip * kc * MR;
        for (long i = 0; i < MR; ++i) {
            const long row = i0 + ip * MR + i;
            if (ip * MR + i < mc) {
                const float* restrict src = A + row * K + k0;
                for (long p = 0; p < kc; ++p) dst[p * MR + i] = PROLOGUE(src[p]);
            } else {
                for (long p = 0; p < kc; ++p) dst[p * MR + i] = 0.0f;
            }
        }
    }
}

/* C[mr x nr] (+)= Ap panel (kc x MR) * Bp panel (kc x NR). The MR x NR accumulator lives in
 * vector registers: the j loop vectorizes to NR / lanes FMAs per row, the i loop unrolls. */
static inline void micro_kernel(long kc, const float* restrict a, const float* restrict b,
                                float* restrict c, long mr, long nr, int first)
{
    float acc[MR][NR];
    #pragma GCC unroll 64
    for (int i = 0; i < MR; ++i) {
        #pragma omp simd
        for (int j = 0; j < NR; ++j) acc[i][j] = 0.0f;
    }
    for (long p = 0; p < kc; ++p) {
        const float* restrict bp = b + p * NR;
        const float* restrict ap = a + p * MR;
        #pragma GCC unroll 64
        for (int i = 0; i < MR; ++i) {
            const float ai = ap[i];
            #pragma omp simd
            for (int j = 0; j < NR; ++j) acc[i][j] += ai * bp[j];
        }
    }
    if (mr == MR && nr == NR) {
        #pragma GCC unroll 64
        for (int i = 0; i < MR; ++i) {
            float* restrict ci = c + i * N;
            #pragma omp simd
            for (int j = 0; j < NR; ++j) ci[j] = first ? acc[i][j] : ci[j] + acc[i][j];
        }
    } else {
        for (long i = 0; i < mr; ++i)
            for (long j = 0; j < nr; ++j)
                c[i * N + j] = first ? acc[i][j] : c[i * N + j] + acc[i][j];
    }
}
"""


def _emit_fused(region: FusedRegion, config: Config) -> str:
    idx = {name: i for i, name in enumerate(input_shapes(region))}
    prog = _row_program(region.epilogue, region.residual, region.reduction, region.eps)
    defines = _gemm_defines(region, config) + [
        ("WORK_FLOATS", "((long)K * NPAD + (long)MC * KC + 16)", "packed B + packed A block"),
    ]
    run = f"""
long arbiter_workspace_floats(void) {{ return WORK_FLOATS; }}

/* Blocked GEMM into `out`, then the row program on each finished block of MC rows while it
 * is still in cache. Threads split B panels in the GEMM and rows in the epilogue. */
int arbiter_run(const float* const* in, float* out, float* work)
{{
    const float* A = in[{idx['A']}];
    const float* B = in[{idx['B']}];
    float* Bp = work;
    float* Ap = work + (long)K * NPAD;
    #pragma omp parallel num_threads(THREADS)
    {{
        pack_b(B, Bp);
        for (long i0 = 0; i0 < M; i0 += MC) {{
            const long mc = M - i0 < MC ? M - i0 : MC;
            const long apanels = (mc + MR - 1) / MR;
            for (long k0 = 0; k0 < K; k0 += KC) {{
                const long kc = K - k0 < KC ? K - k0 : KC;
                pack_a(A, Ap, i0, mc, k0, kc);
                #pragma omp for schedule(static)
                for (long jp = 0; jp < NPANELS; ++jp) {{
                    const long nr = N - jp * NR < NR ? N - jp * NR : NR;
                    const float* bpanel = Bp + k0 * NPAD + jp * kc * NR;
                    for (long ip = 0; ip < apanels; ++ip) {{
                        const long mr = mc - ip * MR < MR ? mc - ip * MR : MR;
                        micro_kernel(kc, Ap + ip * kc * MR, bpanel,
                                     out + (i0 + ip * MR) * N + jp * NR, mr, nr, k0 == 0);
                    }}
                }}
            }}
            #pragma omp for schedule(static)
            for (long r = i0; r < i0 + mc; ++r) {{
                float* row = out + r * N;
                row_program(row, row{_row_args(prog, idx, 'r')});
            }}
        }}
    }}
    return 0;
}}
"""
    return (
        _header(region, config)
        + _includes()
        + _defines(defines)
        + "\n"
        + prologue_function(region.prologue)
        + _GEMM
        + "\n"
        + _row_function(prog)
        + run
    )


def _gemm_defines(region: FusedRegion | GatedRegion, config: Config) -> list:
    mr, nr = parse_tile(str(config["tile"]))
    return [
        ("M", region.M, "rows of A and C"),
        ("N", region.N, "columns of B and C"),
        ("K", region.K, "inner dimension"),
        ("THREADS", config["threads"], "OpenMP threads"),
        ("MC", config["mc"], "rows of C per block (A block kept in L2)"),
        ("KC", config["kc"], "depth of one packed block"),
        ("MR", mr, "micro-tile rows"),
        ("NR", nr, "micro-tile columns"),
        ("NPANELS", "((N + NR - 1) / NR)", "column panels of B"),
        ("NPAD", "(NPANELS * NR)", "N rounded up to NR"),
    ]


_GATED_RUN = """
long arbiter_workspace_floats(void) {{ return WORK_FLOATS; }}

/* Both products of each block of MC rows with the same packed A: the gate into `out`, the up
 * projection into `U`; then act(gate + bias_g) * (up + bias_u) per row while both are in
 * cache. Threads split B panels in the GEMMs and rows in the combine. */
int arbiter_run(const float* const* in, float* out, float* work)
{{
    const float* A = in[{a}];
    float* Bg = work;
    float* Bu = Bg + (long)K * NPAD;
    float* Ap = Bu + (long)K * NPAD;
    float* U = Ap + (long)MC * KC;
    #pragma omp parallel num_threads(THREADS)
    {{
        pack_b(in[{wg}], Bg);
        pack_b(in[{wu}], Bu);
        for (long i0 = 0; i0 < M; i0 += MC) {{
            const long mc = M - i0 < MC ? M - i0 : MC;
            const long apanels = (mc + MR - 1) / MR;
            for (long k0 = 0; k0 < K; k0 += KC) {{
                const long kc = K - k0 < KC ? K - k0 : KC;
                pack_a(A, Ap, i0, mc, k0, kc);
                #pragma omp for schedule(static)
                for (long jp = 0; jp < NPANELS; ++jp) {{
                    const long nr = N - jp * NR < NR ? N - jp * NR : NR;
                    for (long ip = 0; ip < apanels; ++ip) {{
                        const long mr = mc - ip * MR < MR ? mc - ip * MR : MR;
                        const float* a = Ap + ip * kc * MR;
                        const long c = (ip * MR) * N + jp * NR;
                        micro_kernel(kc, a, Bg + k0 * NPAD + jp * kc * NR, out + i0 * N + c,
                                     mr, nr, k0 == 0);
                        micro_kernel(kc, a, Bu + k0 * NPAD + jp * kc * NR, U + c, mr, nr,
                                     k0 == 0);
                    }}
                }}
            }}
            #pragma omp for schedule(static)
            for (long r = i0; r < i0 + mc; ++r) {{
                float* row = out + r * N;
                const float* up = U + (r - i0) * N;
                #pragma omp simd
                for (long j = 0; j < N; ++j) {{
                    float g = row[j]{bias_g};
                    const float u = up[j]{bias_u};
                    row[j] = ({act}) * u;
                }}
            }}
        }}
    }}
    return 0;
}}
"""


def _emit_gated(region: GatedRegion, config: Config) -> str:
    idx = {name: i for i, name in enumerate(input_shapes(region))}
    defines = _gemm_defines(region, config) + [
        ("WORK_FLOATS", "(2L * K * NPAD + (long)MC * KC + (long)MC * N + 16)",
         "packed Wg and Wu + packed A block + the up projection of one block"),
    ]
    run = _GATED_RUN.format(
        a=idx["A"], wg=idx["Wg"], wu=idx["Wu"],
        bias_g=f" + in[{idx['bias_g']}][j]" if region.bias else "",
        bias_u=f" + in[{idx['bias_u']}][j]" if region.bias else "",
        act=pointwise(region.activation, "g"))
    return (_header(region, config) + _includes() + _defines(defines) + "\n"
            + prologue_function(()) + _GEMM + run)


def emit(region: Region, config: Config) -> KernelSource:
    if isinstance(region, GatedRegion):
        text = _emit_gated(region, config)
    elif isinstance(region, FusedRegion):
        text = _emit_fused(region, config)
    elif isinstance(region, RowwiseRegion):
        text = _emit_rowwise(region, config)
    else:
        raise EmitError(f"{LANE}: no kernel for {region.kind} regions yet")
    return KernelSource(LANE, region.key, config, "c", text, compile_options(config))
