/* ---- gemv kernel body (lanes/gemv/gemv_kernel.hip) ----------------------------------------
 * Pasted after the generated constants (GEMV_M/N/K, GEMV_MMA, GEMV_COLS, GEMV_THREADS,
 * GEMV_SPLIT_K, GEMV_UNROLL, GEMV_KC, GEMV_RM, GEMV_SMEM_FLOATS, HAS_PROLOGUE, HAS_BIAS,
 * HAS_RES), the PROLOGUE(x) macro (_scalar_body.prologue_function) and the generated device
 * function arb_epilogue; arb_frag.h is included before it on the mma path.
 *
 * out[M,N] = epilogue(prologue(A)[M,K] @ B[K,N]) for M <= 16, every array in arb_store_t,
 * f32 accumulation. The matmul is memory bound on B, so B is read exactly once.
 *
 * FMA path (GEMV_MMA 0, any storage):
 *   - a block owns BLOCK_N = 32 * GEMV_COLS columns; lane l of every warp owns columns
 *     l*COLS .. l*COLS+COLS-1, read with 16-byte loads (8-byte where 4 columns of 16-bit
 *     storage are all a thread holds; a warp reads 32*COLS contiguous
 *     elements of one row of B: fully coalesced);
 *   - the block's warps take interleaved rows of its K range, GEMV_UNROLL rows in flight each;
 *   - prologue(A) for a chunk of GEMV_KC rows sits in shared memory as f32 [k][MP], so one
 *     row of B meets its A column through MP/4 broadcast float4 reads;
 *   - the warps' M x BLOCK_N partial sums are added in shared memory (GEMV_RM rows of M at a
 *     time, reusing the A buffer).
 * MMA path (GEMV_MMA 1, 16-bit storage, N and K multiples of 8): at M = 16 the FMA path does
 * about 128 f32 FMAs per 16 bytes of B and is bound by them, not by memory. Here the matmul
 * runs on the tensor cores (arb_frag.h: mma.sync m16n8k16, or gfx11 WMMA), A padded to 16 rows:
 *   - a block owns BLOCK_N = 16 * GEMV_COLS columns; each stage of its K range is KT = 16 *
 *     WARPS rows of B (and the 16 x KT tile of A), copied asynchronously into shared memory
 *     (16-byte copies, rows past the split or past M zero-filled), GEMV_UNROLL stages deep;
 *   - warp w multiplies rows 16w..16w+15 of each stage: one A fragment (prologue applied,
 *     rounded to the storage type) against each of the block's GEMV_COLS column tiles, so
 *     every warp holds all BLOCK_N columns' partial sums for its own rows of K;
 *   - the warps' partial sums are added as on the FMA path.
 * split_k > 1 (either path): blockIdx.y takes one of GEMV_SPLIT_K ranges of K and writes its
 * sums to an f32 workspace [split][M][N]; the last block of a column tile to finish (a ticket counter per
 * tile) adds the splits in order 0..S-1 (deterministic) and applies the epilogue. One launch
 * either way. Edges: the K tail is bounds-checked per row, columns past N are read as zero
 * and never stored; when N is not a multiple of the 16-byte vector, B is read element-wise
 * (FMA path; the MMA path needs whole 16-byte rows).
 */
constexpr int WARPS = GEMV_THREADS / ARB_WARP;
static_assert(GEMV_THREADS % ARB_WARP == 0, "whole warps");
static_assert(GEMV_RM >= 1 && GEMV_RM <= GEMV_M, "rows of M per reduction round");

#if !GEMV_MMA
/* ---- FMA path ------------------------------------------------------------------------- */
constexpr int ESIZE = (int)sizeof(arb_store_t);
constexpr int VEC = GEMV_LOAD_BYTES / ESIZE;          /* elements in one vector load */
constexpr int LOADS = GEMV_COLS / VEC;                /* vector loads per thread per row */
constexpr int BLOCK_N = ARB_WARP * GEMV_COLS;
constexpr int MP = (GEMV_M + 3) / 4 * 4;              /* A's column in shared memory, padded */
constexpr int KS = (GEMV_K + GEMV_SPLIT_K - 1) / GEMV_SPLIT_K; /* rows of K per split */
constexpr bool VEC_B = GEMV_N % VEC == 0;             /* every row of B starts vector aligned */

static_assert(GEMV_COLS % VEC == 0 && LOADS >= 1, "columns per thread: whole vector loads");
static_assert(GEMV_COLS % 4 == 0, "columns per thread: whole float4 partial stores");
static_assert(GEMV_KC * MP <= GEMV_SMEM_FLOATS, "A chunk fits the shared buffer");
/* 16-byte loads; 8-byte ones only where 16-bit storage keeps 4 columns per thread (gfx11
 * holds M = 16 rows of accumulators for no more). */
#if GEMV_LOAD_BYTES == 16
typedef uint4 gemv_vec_t;
#elif GEMV_LOAD_BYTES == 8
typedef uint2 gemv_vec_t;
#else
#error "GEMV_LOAD_BYTES must be 8 or 16"
#endif

struct gemv_row {
    gemv_vec_t raw[LOADS];
};

/* One thread's GEMV_COLS elements of row k of B from column c0; zero past N. */
__device__ __forceinline__ void gemv_load_row(gemv_row& b, const arb_store_t* __restrict__ B,
                                              int k, int c0) {
    const arb_store_t* p = B + (size_t)k * GEMV_N + c0;
    if (VEC_B && c0 + GEMV_COLS <= GEMV_N) {
#pragma unroll
        for (int l = 0; l < LOADS; ++l)
            b.raw[l] = *reinterpret_cast<const gemv_vec_t*>(p + l * VEC);
    } else {
        arb_store_t* e = reinterpret_cast<arb_store_t*>(b.raw);
#pragma unroll
        for (int j = 0; j < GEMV_COLS; ++j) e[j] = c0 + j < GEMV_N ? p[j] : arb_store(0.0f);
    }
}

/* acc[m][j] += A[m][k] * B[k][c0 + j] for the row in `b`, A[.][k] at `a` in shared memory. */
__device__ __forceinline__ void gemv_fma_row(float (&acc)[GEMV_M][GEMV_COLS], const gemv_row& b,
                                             const float* a) {
    const arb_store_t* e = reinterpret_cast<const arb_store_t*>(b.raw);
    float bv[GEMV_COLS];
#pragma unroll
    for (int j = 0; j < GEMV_COLS; ++j) bv[j] = arb_load(e[j]);
#pragma unroll
    for (int q = 0; q < MP / 4; ++q) {
        const float4 a4 = reinterpret_cast<const float4*>(a)[q];
        const float av[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if (4 * q + i >= GEMV_M) break;
#pragma unroll
            for (int j = 0; j < GEMV_COLS; ++j)
                acc[4 * q + i][j] = fmaf(av[i], bv[j], acc[4 * q + i][j]);
        }
    }
}

__device__ __forceinline__ void gemv_main(float (&acc)[GEMV_M][GEMV_COLS], float* smem,
                                          const arb_store_t* __restrict__ A,
                                          const arb_store_t* __restrict__ B, int warp, int c0,
                                          int k_lo, int k_hi) {
#pragma unroll
    for (int m = 0; m < GEMV_M; ++m)
#pragma unroll
        for (int j = 0; j < GEMV_COLS; ++j) acc[m][j] = 0.0f;

    for (int kc = k_lo; kc < k_hi; kc += GEMV_KC) {
        const int rows = min(GEMV_KC, k_hi - kc);
        __syncthreads(); /* everyone is done with the previous chunk of A */
        /* m fastest: consecutive threads write consecutive floats (no bank conflicts) */
        for (int e = threadIdx.x; e < rows * GEMV_M; e += GEMV_THREADS) {
            const int m = e % GEMV_M, kk = e / GEMV_M;
            smem[kk * MP + m] = PROLOGUE(arb_load(A[(size_t)m * GEMV_K + kc + kk]));
        }
        __syncthreads();
        for (int r = warp; r < rows; r += WARPS * GEMV_UNROLL) {
            gemv_row b[GEMV_UNROLL];
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; ++u)
                if (r + u * WARPS < rows) gemv_load_row(b[u], B, kc + r + u * WARPS, c0);
#pragma unroll
            for (int u = 0; u < GEMV_UNROLL; ++u)
                if (r + u * WARPS < rows) gemv_fma_row(acc, b[u], smem + (r + u * WARPS) * MP);
        }
    }
}

/* This thread's sums of rows m0 .. m0+GEMV_RM-1 at dst, the warp's [GEMV_RM][BLOCK_N] block. */
__device__ __forceinline__ void gemv_partials(const float (&acc)[GEMV_M][GEMV_COLS], float* dst,
                                              int m0, int lane) {
#pragma unroll
    for (int mm = 0; mm < GEMV_RM; ++mm) {
        if (m0 + mm >= GEMV_M) break;
        float* row = dst + mm * BLOCK_N + lane * GEMV_COLS;
#pragma unroll
        for (int j = 0; j < GEMV_COLS; j += 4)
            *reinterpret_cast<float4*>(row + j) =
                make_float4(acc[m0 + mm][j], acc[m0 + mm][j + 1], acc[m0 + mm][j + 2],
                            acc[m0 + mm][j + 3]);
    }
}
typedef float gemv_acc_t[GEMV_M][GEMV_COLS];

#else
/* ---- MMA path ------------------------------------------------------------------------- */
constexpr int BLOCK_N = 16 * GEMV_COLS;
constexpr int KT = 16 * WARPS;                        /* rows of K per stage, 16 per warp */
constexpr int STAGES = GEMV_UNROLL;                   /* (the unroll tunable, on this path) */
constexpr int LDA = KT + 8;                           /* rows padded by 16 bytes: ldmatrix */
constexpr int LDB = BLOCK_N + 8;                      /* reads them without bank conflicts */
constexpr int A_TILE = 16 * LDA;
constexpr int STAGE = A_TILE + KT * LDB;              /* elements of one stage */
constexpr int KS = ((GEMV_K + GEMV_SPLIT_K - 1) / GEMV_SPLIT_K + 7) / 8 * 8; /* rows a split */
constexpr int CHUNKS_A = KT / 8, CHUNKS_B = BLOCK_N / 8; /* 16-byte copies per row */

static_assert(sizeof(arb_store_t) == 2 && sizeof(arb_op_t) == 2, "16-bit storage");
static_assert(GEMV_N % 8 == 0 && GEMV_K % 8 == 0, "rows of A and B are whole 16-byte copies");
static_assert(STAGES * STAGE * 2 <= GEMV_SMEM_FLOATS * 4, "the stages fit the shared buffer");

/* Stage: A[0..15][k0 .. k0+KT) and B[k0 .. k0+KT)[n0 .. n0+BLOCK_N) into shared memory;
 * zeros past M, past the split's rows and past N. */
__device__ __forceinline__ void gemv_stage(arb_op_t* s, const arb_store_t* __restrict__ A,
                                           const arb_store_t* __restrict__ B, int k0, int k_hi,
                                           int n0) {
    for (int e = threadIdx.x; e < 16 * CHUNKS_A; e += GEMV_THREADS) {
        const int m = e / CHUNKS_A, kk = e % CHUNKS_A * 8;
        const bool ok = m < GEMV_M && k0 + kk < k_hi;
        arb_cp_async16_zfill(s + m * LDA + kk, ok ? A + (size_t)m * GEMV_K + k0 + kk : A, ok);
    }
    arb_op_t* bs = s + A_TILE;
    for (int e = threadIdx.x; e < KT * CHUNKS_B; e += GEMV_THREADS) {
        const int r = e / CHUNKS_B, c = e % CHUNKS_B * 8;
        const bool ok = k0 + r < k_hi && n0 + c < GEMV_N;
        arb_cp_async16_zfill(bs + r * LDB + c, ok ? B + (size_t)(k0 + r) * GEMV_N + n0 + c : B,
                             ok);
    }
}

#if HAS_PROLOGUE
__device__ __forceinline__ unsigned short gemv_prologue16(unsigned short bits) {
    const float x = arb_op_to_float(__builtin_bit_cast(arb_op_t, bits));
    return __builtin_bit_cast(unsigned short, arb_op_from_float(PROLOGUE(x)));
}
#endif

/* prologue(A) on a fragment, rounded back to the operand type (identity without one). */
__device__ __forceinline__ void gemv_prologue_frag(arb_frag_a& a) {
#if HAS_PROLOGUE && defined(ARB_FRAG_BACKEND_MMA_SYNC)
#pragma unroll
    for (int i = 0; i < 4; ++i)
        a.r[i] = (unsigned int)gemv_prologue16((unsigned short)(a.r[i] & 0xffffu)) |
                 ((unsigned int)gemv_prologue16((unsigned short)(a.r[i] >> 16)) << 16);
#elif HAS_PROLOGUE
#pragma unroll
    for (int k = 0; k < 16; ++k)
        a.x[k] = __builtin_bit_cast(arb_frag_elem,
                                    gemv_prologue16(__builtin_bit_cast(unsigned short, a.x[k])));
#else
    (void)a;
#endif
}

__device__ __forceinline__ void gemv_main(arb_frag_acc (&acc)[GEMV_COLS], float* smem,
                                          const arb_store_t* __restrict__ A,
                                          const arb_store_t* __restrict__ B, int warp, int n0,
                                          int k_lo, int k_hi) {
#pragma unroll
    for (int f = 0; f < GEMV_COLS; ++f) arb_frag_zero(acc[f]);
    arb_op_t* pipe = reinterpret_cast<arb_op_t*>(smem);
    const int tiles = k_hi > k_lo ? (k_hi - k_lo + KT - 1) / KT : 0;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < tiles) gemv_stage(pipe + s * STAGE, A, B, k_lo + s * KT, k_hi, n0);
        arb_cp_async_commit(); /* (an empty group too: the waits count groups) */
    }
    for (int t = 0; t < tiles; ++t) {
        const int next = t + STAGES - 1;
        if (next < tiles) gemv_stage(pipe + next % STAGES * STAGE, A, B, k_lo + next * KT, k_hi,
                                     n0);
        arb_cp_async_commit();
        arb_cp_async_wait<STAGES - 1>(); /* stage t has landed (this thread's copies) */
        __syncthreads();                 /* ... and everyone's */
        const arb_op_t* s = pipe + t % STAGES * STAGE;
        arb_frag_a a;
        arb_frag_lds_a(a, s + 16 * warp, LDA);
        gemv_prologue_frag(a);
        const arb_op_t* bs = s + A_TILE + 16 * warp * LDB;
#pragma unroll
        for (int f = 0; f < GEMV_COLS; ++f) {
            arb_frag_b b;
            arb_frag_lds_b(b, bs + 16 * f, LDB);
            arb_frag_mma(acc[f], a, b);
        }
        __syncthreads(); /* stage t is read: the next iteration may copy over it */
    }
    arb_cp_async_wait<0>();
}

__device__ __forceinline__ void gemv_partials(const arb_frag_acc (&acc)[GEMV_COLS], float* dst,
                                              int m0, int lane) {
    (void)lane;
#pragma unroll
    for (int f = 0; f < GEMV_COLS; ++f)
#pragma unroll
        for (int v = 0; v < 8; ++v) {
            const int mm = arb_acc_row(v) - m0;
            if (mm >= 0 && mm < GEMV_RM)
                dst[mm * BLOCK_N + 16 * f + arb_acc_col(v)] = acc[f].x[v];
        }
}
typedef arb_frag_acc gemv_acc_t[GEMV_COLS];
#endif

constexpr int GRID_N = (GEMV_N + BLOCK_N - 1) / BLOCK_N;
static_assert(GEMV_RM * WARPS * BLOCK_N <= GEMV_SMEM_FLOATS, "partials fit the shared buffer");

/* A partial sum read back by the tile's last block: past L1, which is not coherent. */
__device__ __forceinline__ float gemv_load_partial(const float* p) {
#if !defined(ARB_GFX11)
    return __ldcg(p);
#else
    return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#endif
}

__global__ void __launch_bounds__(GEMV_THREADS) gemv_kernel(
    const arb_store_t* __restrict__ A, const arb_store_t* __restrict__ B,
    const arb_store_t* __restrict__ bias, const arb_store_t* __restrict__ res,
    arb_store_t* __restrict__ out, float* __restrict__ ws, unsigned int* __restrict__ tickets) {
    __shared__ __attribute__((aligned(16))) float smem[GEMV_SMEM_FLOATS];
    const int tile = blockIdx.x, split = blockIdx.y;
    const int warp = threadIdx.x / ARB_WARP, lane = threadIdx.x % ARB_WARP;
    const int n0 = tile * BLOCK_N;
    const int k_lo = split * KS;
    const int k_hi = min(GEMV_K, k_lo + KS);
    (void)ws; (void)tickets;

    gemv_acc_t acc;
#if GEMV_MMA
    gemv_main(acc, smem, A, B, warp, n0, k_lo, k_hi);
#else
    gemv_main(acc, smem, A, B, warp, n0 + lane * GEMV_COLS, k_lo, k_hi);
#endif

    /* Add the warps' partial sums, GEMV_RM rows of M per round: red[warp][mm][column]. */
#pragma unroll
    for (int m0 = 0; m0 < GEMV_M; m0 += GEMV_RM) {
        __syncthreads();
        gemv_partials(acc, smem + warp * GEMV_RM * BLOCK_N, m0, lane);
        __syncthreads();
        for (int e = threadIdx.x; e < GEMV_RM * BLOCK_N; e += GEMV_THREADS) {
            const int mm = e / BLOCK_N, cl = e % BLOCK_N;
            const int m = m0 + mm, c = n0 + cl;
            if (m >= GEMV_M || c >= GEMV_N) continue;
            float v = 0.0f;
#pragma unroll
            for (int w = 0; w < WARPS; ++w) v += smem[(w * GEMV_RM + mm) * BLOCK_N + cl];
#if GEMV_SPLIT_K == 1
            out[(size_t)m * GEMV_N + c] = arb_store(arb_epilogue(v, m, c, bias, res));
#else
            ws[((size_t)split * GEMV_M + m) * GEMV_N + c] = v;
#endif
        }
    }

#if GEMV_SPLIT_K > 1
    /* Last block of this column tile: every split's sums are in ws. */
    __shared__ int gemv_last;
    __threadfence(); /* this thread's partials are visible before the ticket is taken */
    __syncthreads();
    if (threadIdx.x == 0)
        gemv_last = atomicAdd(&tickets[tile], 1u) == (unsigned int)(GEMV_SPLIT_K - 1);
    __syncthreads();
    if (!gemv_last) return;
    __threadfence();
    for (int e = threadIdx.x; e < GEMV_M * BLOCK_N; e += GEMV_THREADS) {
        const int m = e / BLOCK_N, c = n0 + e % BLOCK_N;
        if (c >= GEMV_N) continue;
        float v = 0.0f;
#pragma unroll 8
        for (int s = 0; s < GEMV_SPLIT_K; ++s)
            v += gemv_load_partial(ws + ((size_t)s * GEMV_M + m) * GEMV_N + c);
        out[(size_t)m * GEMV_N + c] = arb_store(arb_epilogue(v, m, c, bias, res));
    }
    if (threadIdx.x == 0) tickets[tile] = 0u; /* ready for the next launch on this stream */
#endif
}

/* ---- host side: the runner ABI's launch ----------------------------------------------- */
#if GEMV_SPLIT_K > 1
static float* gemv_ws = NULL; /* [split][M][N] partial sums, then GRID_N tickets */

static void gemv_release_workspace(void) {
    if (gemv_ws) (void)hipFree(gemv_ws);
    gemv_ws = NULL;
}
#define ARB_RELEASE_HOOK gemv_release_workspace
#endif

static hipError_t arb_launch(const arb_store_t* const* in, arb_store_t* out,
                             hipStream_t stream) {
    const arb_store_t* A = in[0];
    const arb_store_t* B = in[1];
    const arb_store_t* bias = HAS_BIAS ? in[2] : NULL;
    const arb_store_t* res = HAS_RES ? in[2 + HAS_BIAS] : NULL;
    float* ws = NULL;
    unsigned int* tickets = NULL;
    hipError_t e;
#if GEMV_SPLIT_K > 1
    const size_t partials = (size_t)GEMV_SPLIT_K * GEMV_M * GEMV_N;
    if (gemv_ws == NULL) {
        const size_t bytes = partials * sizeof(float) + GRID_N * sizeof(unsigned int);
        if ((e = hipMalloc((void**)&gemv_ws, bytes)) != hipSuccess) return e;
        if ((e = hipMemsetAsync(gemv_ws + partials, 0, GRID_N * sizeof(unsigned int), stream)) !=
            hipSuccess)
            return e;
    }
    ws = gemv_ws;
    tickets = reinterpret_cast<unsigned int*>(gemv_ws + partials);
#endif
    gemv_kernel<<<dim3(GRID_N, GEMV_SPLIT_K), GEMV_THREADS, 0, stream>>>(A, B, bias, res, out, ws,
                                                                         tickets);
    if ((e = hipGetLastError()) != hipSuccess) return e;
    return hipSuccess;
}

#include "arb_runner.h"
