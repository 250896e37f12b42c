"""C source generation for the x86 C lane: one readable translation unit per (region, config).

The per-row math comes from `lanes/_scalar_body.py` (shared with the HIP lane); this module
only decides how loops are spread (plain `for` + `omp simd`), how rows are scheduled across
OpenMP threads, and, for fused regions, the blocked GEMM that feeds the row program.

Entry points of every generated library (plain C ABI):
  long arbiter_workspace_floats(void)   floats of scratch the caller must provide (>= 1)
  int  arbiter_run(const arb_store_t* const* inputs, arb_store_t* out, float* work)
`inputs` holds the region's arrays in `arbiter.lane.input_shapes` order; every pointer is
valid (the runner never passes NULL). Returns 0 on success.

`arb_store_t` is the region's storage type (float, or the 16 bits of an f16 / bf16). Every
kernel computes in f32: inputs convert as they are read (`arb_load`, where A and B are packed
for the GEMM, free), results are finished in f32 rows and rounded once to the output
(`arb_store`, to nearest even). For f32 both are the identity and inline away.
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

__all__ = ["emit", "parse_tile", "compile_options", "storage_prelude"]

LANE = "x86_c"

# The storage type and its conversions, by region dtype. Bit manipulation rather than
# _Float16: gcc 12 does not vectorize _Float16 conversions without AVX512-FP16, these integer
# forms (plus one exact float add) vectorize everywhere. Every select is written as a mask so
# gcc if-converts it under its default -ftrapping-math. Checked exhaustively against the
# hardware's f16 conversion (all 2^16 loads, all 2^32 stores).
_STORAGE = {
    "f32": r"""
/* Storage: f32. */
typedef float arb_store_t;
static inline float arb_load(arb_store_t x) { return x; }
static inline arb_store_t arb_store(float x) { return x; }
""",
    "f16": r"""
/* Storage: f16 (IEEE binary16) as its 16 bits. */
typedef uint16_t arb_store_t;
#if defined(__F16C__)
#define STORE_F16C 1  /* store_row uses the vector conversion */
#else
#define STORE_F16C 0
#endif

/* Exact: rebias the exponent; inf/NaN keep an all-ones exponent; subnormals are renormalised
 * by one exact float subtraction of 2^-14. */
static inline float arb_load(arb_store_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t em = (uint32_t)(h & 0x7fffu) << 13;
    const uint32_t e = em & 0x0f800000u;
    const uint32_t normal = em + (e == 0x0f800000u ? (224u << 23) : (112u << 23));
    const uint32_t biased = em + (113u << 23);
    float sub;
    memcpy(&sub, &biased, sizeof sub);
    sub -= 6.103515625e-05f;
    uint32_t sub_bits;
    memcpy(&sub_bits, &sub, sizeof sub_bits);
    const uint32_t is_sub = 0u - (uint32_t)(e == 0);
    const uint32_t u = (sub_bits & is_sub) | (normal & ~is_sub) | sign;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even. Normals: add half an ulp (minus one, plus the kept lsb) to the f32
 * bits; below 2^-14 a float add of 0.5 rounds to the subnormal grid; >= 2^16 is inf (the
 * normal path carries 65520.. into inf itself); NaN is a quiet NaN. */
static inline arb_store_t arb_store(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint32_t sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    const uint32_t normal = (u - (112u << 23) + 0xfffu + ((u >> 13) & 1u)) >> 13;
    float t;
    memcpy(&t, &u, sizeof t);
    t += 0.5f;
    uint32_t t_bits;
    memcpy(&t_bits, &t, sizeof t_bits);
    const uint32_t is_sub = 0u - (uint32_t)(u < (113u << 23));
    const uint32_t finite = ((t_bits - (126u << 23)) & is_sub) | (normal & ~is_sub);
    const uint32_t is_big = 0u - (uint32_t)(u >= (143u << 23));
    const uint32_t special = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
    return (arb_store_t)(((special & is_big) | (finite & ~is_big)) | sign);
}
""",
    "bf16": r"""
/* Storage: bf16 as its 16 bits (the top half of an f32). */
typedef uint16_t arb_store_t;
#define STORE_F16C 0

static inline float arb_load(arb_store_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even on the f32 bits; NaN stays NaN (quieted, sign and payload kept). */
static inline arb_store_t arb_store(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet = (u >> 16) | 0x40u;
    return (arb_store_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}
""",
}

_STORE_ROW = r"""
/* A finished f32 row -> the output's storage type: the one rounding of every output value.
 * f16 on a CPU with F16C: its vector conversion (round to nearest even), cheaper than the
 * bit manipulation of arb_store. */
static inline void store_row(arb_store_t* restrict dst, const float* restrict src)
{
    long j = 0;
#if STORE_F16C
    for (; j + 8 <= N; j += 8)
        _mm_storeu_si128((__m128i*)(dst + j),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT));
#endif
    #pragma omp simd
    for (long t = j; t < N; ++t) dst[t] = arb_store(src[t]);
}
"""


def storage_prelude(dtype: str) -> str:
    """`arb_store_t`, `arb_load` and `arb_store` for storage `dtype` (needs <stdint.h>,
    <string.h>)."""
    return _STORAGE[dtype]


def parse_tile(tile: str) -> tuple[int, int]:
    """"12x32" -> (MR, NR): rows x columns of the register-tiled micro-kernel."""
    mr, _, nr = tile.partition("x")
    return int(mr), int(nr)


# -ffast-math spelled out, less -ffinite-math-only (the row programs start max-reductions at
# -INFINITY). Not the flag itself: gcc 12 then links crtfastmath.o into the library, whose
# constructor turns on flush-to-zero / denormals-are-zero for the whole process that loads it,
# every later kernel and numpy included (bf16 subnormals would then read as zero).
FAST_MATH = ("-fno-math-errno", "-fno-signed-zeros", "-fno-trapping-math", "-fassociative-math",
             "-freciprocal-math", "-fno-rounding-math", "-fno-signaling-nans",
             "-fcx-limited-range")


def compile_options(config: Config) -> tuple[str, ...]:
    """Lane-chosen flags on top of the base `-O3 -march=native -fopenmp` (never user text)."""
    opts = [f"-mprefer-vector-width={int(config['vec'])}"]
    if config["fast_math"]:
        opts += list(FAST_MATH)
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


def _row_function(prog: RowProgram, src_type: str) -> str:
    params = [f"const {src_type}* src", "float* dst"]
    params += [f"const arb_store_t* restrict {o.name}" for o in prog.operands]
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
static inline void stream_row(arb_store_t* dst, const arb_store_t* src)
{
    long j = 0;
#if defined(__AVX512F__) && STREAM_VEC >= 512
    const long lanes = 64 / (long)sizeof(arb_store_t);
    for (; j < N && ((uintptr_t)(dst + j) & 63u); ++j) dst[j] = src[j];
    for (; j + lanes <= N; j += lanes)
        _mm512_stream_si512((void*)(dst + j), _mm512_loadu_si512((const void*)(src + j)));
#elif defined(__AVX__)
    const long lanes = 32 / (long)sizeof(arb_store_t);
    for (; j < N && ((uintptr_t)(dst + j) & 31u); ++j) dst[j] = src[j];
    for (; j + lanes <= N; j += lanes)
        _mm256_stream_si256((__m256i*)(dst + j), _mm256_loadu_si256((const __m256i*)(src + j)));
#endif
    for (; j < N; ++j) dst[j] = src[j];
}
"""


def _emit_rowwise(region: RowwiseRegion, config: Config) -> str:
    idx = {name: i for i, name in enumerate(input_shapes(region))}
    prog = _row_program(region.epilogue, region.residual, region.reduction, region.eps,
                        src_load="arb_load", operand_load="arb_load")
    stream = bool(config["stream"])
    wide = region.dtype == "f32"
    # f32 rows are finished in place (or in scratch when streamed); 16-bit rows always in an
    # f32 scratch row, rounded once into the output (through a second, packed row to stream).
    scratch_floats = (1 if wide else 2) * region.N if stream or not wide else 1
    defines = [
        ("M", region.M, "rows"),
        ("N", region.N, "row length"),
        ("THREADS", config["threads"], "OpenMP threads"),
        ("ROW_BLOCK", config["row_block"], "rows handed to a thread at a time"),
        ("STREAM", int(stream), "1: finish rows in scratch, stream them out"),
        ("STREAM_VEC", config["vec"], "store width for streaming"),
        ("SCRATCH", scratch_floats, "scratch floats per thread"),
        ("WORK_FLOATS", "(SCRATCH * (long)THREADS + 16)", "scratch floats"),
    ]
    if wide:
        dst = "scratch" if stream else "out + r * N"
        finish = ["#if STREAM", "            stream_row(out + r * N, scratch);", "#endif"]
    elif stream:
        dst = "scratch"
        finish = ["            store_row(packed, scratch);",
                  "            stream_row(out + r * N, packed);"]
    else:
        dst = "scratch"
        finish = ["            store_row(out + r * N, scratch);"]
    finish_text = "\n".join(finish)
    packed = ("\n        arb_store_t* packed = (arb_store_t*)(scratch + N);"
              if stream and not wide else "")
    run = f"""
long arbiter_workspace_floats(void) {{ return WORK_FLOATS; }}

int arbiter_run(const arb_store_t* const* in, arb_store_t* out, float* work)
{{
    const arb_store_t* X = in[{idx['X']}];
    #pragma omp parallel num_threads(THREADS)
    {{
        float* scratch = work + (long)omp_get_thread_num() * SCRATCH;
        (void)scratch;{packed}
        #pragma omp for schedule({config["schedule"]}, ROW_BLOCK)
        for (long r = 0; r < M; ++r) {{
            row_program(X + r * N, {dst}{_row_args(prog, idx, 'r')});
{finish_text}
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
        + _includes(region)
        + _defines(defines)
        + (_STREAM_COPY if stream else "")
        + ("" if wide else _STORE_ROW)
        + "\n"
        + _row_function(prog, "arb_store_t")
        + run
    )


def _includes(region: Region) -> str:
    return (
        "#include <omp.h>\n#include <stdint.h>\n#include <stdlib.h>\n"
        "#if defined(__AVX__)\n#include <immintrin.h>\n#endif\n" + C_PRELUDE
        + storage_prelude(region.dtype) + "\n"
    )


_GEMM = r"""
/* B[K,N] -> Bp (f32): for each KC block of rows, NPANELS panels of NR columns, each panel stored
 * row by row (kc x NR), zero-padded past column N. */
static void pack_b(const arb_store_t* restrict B, float* restrict Bp)
{
    #pragma omp for schedule(static) collapse(2)
    for (long k0 = 0; k0 < K; k0 += KC) {
        for (long jp = 0; jp < NPANELS; ++jp) {
            const long kc = K - k0 < KC ? K - k0 : KC;
            const long j0 = jp * NR;
            const long nr = N - j0 < NR ? N - j0 : NR;
            float* restrict dst = Bp + k0 * NPAD + jp * kc * NR;
            for (long p = 0; p < kc; ++p) {
                const arb_store_t* restrict src = B + (k0 + p) * N + j0;
                for (long j = 0; j < nr; ++j) dst[p * NR + j] = arb_load(src[j]);
                for (long j = nr; j < NR; ++j) dst[p * NR + j] = 0.0f;
            }
        }
    }
}

/* A[i0:i0+mc, k0:k0+kc] -> Ap (f32): panels of MR rows stored column by column (kc x MR), zero rows
 * past M; the prologue is applied here, once per element. */
static void pack_a(const arb_store_t* restrict A, float* restrict Ap, long i0, long mc, long k0,
                   long kc)
{
    const long panels = (mc + MR - 1) / MR;
    #pragma omp for schedule(static)
    for (long ip = 0; ip < panels; ++ip) {
        float* restrict dst = Ap + ip * kc * MR;
        for (long i = 0; i < MR; ++i) {
            const long row = i0 + ip * MR + i;
            if (ip * MR + i < mc) {
                const arb_store_t* restrict src = A + row * K + k0;
                for (long p = 0; p < kc; ++p) dst[p * MR + i] = PROLOGUE(arb_load(src[p]));
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


def _c_block(region: FusedRegion | GatedRegion, after: str) -> tuple[str, str, str]:
    """Where the GEMM accumulates a block of MC rows of C in f32: (its C expression, the extra
    workspace floats, the line declaring that workspace at `after`, the end of the last
    buffer). f32 storage accumulates in `out` itself; 16-bit storage in one f32 block that is
    rounded into `out` once its rows are finished."""
    if region.dtype == "f32":
        return "out + i0 * N", "", ""
    return "Cb", " + (long)MC * N", f"\n    float* Cb = {after};"


def _emit_fused(region: FusedRegion, config: Config) -> str:
    idx = {name: i for i, name in enumerate(input_shapes(region))}
    prog = _row_program(region.epilogue, region.residual, region.reduction, region.eps,
                        operand_load="arb_load")
    c_block, c_floats, c_decl = _c_block(region, "Ap + (long)MC * KC")
    defines = _gemm_defines(region, config) + [
        ("WORK_FLOATS", f"((long)K * NPAD + (long)MC * KC{c_floats} + 16)",
         "packed B + packed A block" + (" + f32 C block" if c_floats else "")),
    ]
    store = "" if region.dtype == "f32" else "\n                store_row(out + r * N, row);"
    run = f"""
long arbiter_workspace_floats(void) {{ return WORK_FLOATS; }}

/* Blocked GEMM into the f32 C block, then the row program on each finished block of MC rows
 * while it is still in cache. Threads split B panels in the GEMM and rows in the epilogue. */
int arbiter_run(const arb_store_t* const* in, arb_store_t* out, float* work)
{{
    const arb_store_t* A = in[{idx['A']}];
    const arb_store_t* B = in[{idx['B']}];
    float* Bp = work;
    float* Ap = work + (long)K * NPAD;{c_decl}
    #pragma omp parallel num_threads(THREADS)
    {{
        pack_b(B, Bp);
        for (long i0 = 0; i0 < M; i0 += MC) {{
            const long mc = M - i0 < MC ? M - i0 : MC;
            const long apanels = (mc + MR - 1) / MR;
            float* C = {c_block};
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
                                     C + ip * MR * N + jp * NR, mr, nr, k0 == 0);
                    }}
                }}
            }}
            #pragma omp for schedule(static)
            for (long r = i0; r < i0 + mc; ++r) {{
                float* row = C + (r - i0) * N;
                row_program(row, row{_row_args(prog, idx, 'r')});{store}
            }}
        }}
    }}
    return 0;
}}
"""
    return (
        _header(region, config)
        + _includes(region)
        + _defines(defines)
        + "\n"
        + prologue_function(region.prologue)
        + _GEMM
        + ("" if region.dtype == "f32" else _STORE_ROW)
        + "\n"
        + _row_function(prog, "float")
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

/* Both products of each block of MC rows with the same packed A: the gate into the f32 C
 * block, the up projection into `U`; then act(gate + bias_g) * (up + bias_u) per row while
 * both are in cache, rounded once into `out`. Threads split B panels in the GEMMs and rows in
 * the combine. */
int arbiter_run(const arb_store_t* const* in, arb_store_t* out, float* work)
{{
    const arb_store_t* A = in[{a}];
    float* Bg = work;
    float* Bu = Bg + (long)K * NPAD;
    float* Ap = Bu + (long)K * NPAD;
    float* U = Ap + (long)MC * KC;{c_decl}
    #pragma omp parallel num_threads(THREADS)
    {{
        pack_b(in[{wg}], Bg);
        pack_b(in[{wu}], Bu);
        for (long i0 = 0; i0 < M; i0 += MC) {{
            const long mc = M - i0 < MC ? M - i0 : MC;
            const long apanels = (mc + MR - 1) / MR;
            float* C = {c_block};
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
                        micro_kernel(kc, a, Bg + k0 * NPAD + jp * kc * NR, C + c, mr, nr,
                                     k0 == 0);
                        micro_kernel(kc, a, Bu + k0 * NPAD + jp * kc * NR, U + c, mr, nr,
                                     k0 == 0);
                    }}
                }}
            }}
            #pragma omp for schedule(static)
            for (long r = i0; r < i0 + mc; ++r) {{
                const float* gate = C + (r - i0) * N;
                const float* up = U + (r - i0) * N;
                arb_store_t* dst = out + r * N;
                #pragma omp simd
                for (long j = 0; j < N; ++j) {{
                    float g = gate[j]{bias_g};
                    const float u = up[j]{bias_u};
                    dst[j] = arb_store(({act}) * u);
                }}
            }}
        }}
    }}
    return 0;
}}
"""


def _emit_gated(region: GatedRegion, config: Config) -> str:
    idx = {name: i for i, name in enumerate(input_shapes(region))}
    c_block, c_floats, c_decl = _c_block(region, "U + (long)MC * N")
    defines = _gemm_defines(region, config) + [
        ("WORK_FLOATS", f"(2L * K * NPAD + (long)MC * KC + (long)MC * N{c_floats} + 16)",
         "packed Wg and Wu + packed A block + the up projection of one block"
         + (" + f32 gate block" if c_floats else "")),
    ]
    run = _GATED_RUN.format(
        a=idx["A"], wg=idx["Wg"], wu=idx["Wu"], c_block=c_block, c_decl=c_decl,
        bias_g=f" + arb_load(in[{idx['bias_g']}][j])" if region.bias else "",
        bias_u=f" + arb_load(in[{idx['bias_u']}][j])" if region.bias else "",
        act=pointwise(region.activation, "g"))
    return (_header(region, config) + _includes(region) + _defines(defines) + "\n"
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
