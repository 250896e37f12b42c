/* ---- wmma_gemm kernel body (lanes/wmma_gemm/gemm_kernel.hip) ------------------------------
 * Pasted after the generated constants (GEMM_M/N/K, tile sizes, staging, HAS_BIAS, HAS_RES,
 * HAS_REDUCTION, VEC_A/VEC_B), the PROLOGUE(x) macro (_scalar_body.prologue_function) and
 * the generated device function arb_epilogue.
 *
 * out[M,N] = epilogue(prologue(A)[M,K] @ B[K,N]) on arrays of arb_store_t (the region's dtype:
 * f32, or 16-bit storage that is the operand type, GEMM_NATIVE), f16/bf16 operands, f32
 * accumulation. Each block computes a BM x BN tile; each warp a WM x WN part of it made of
 * 16x16 fragments (arb_frag.h). Edges: every global read is bounds-checked (zero fill) or
 * reads a zero-padded copy, every store is bounds-checked, so any M, N, K works.
 *
 * Staging of operands into shared memory (GEMM_PREPASS):
 *   0 "inline":  f32 float4 loads -> prologue -> convert -> 8-byte shared stores. The next K
 *                tile is loaded into registers while the current one is multiplied; with
 *                GEMM_STAGES == 2 shared memory is double-buffered (one barrier per K step).
 *   1 "prepass": a first kernel converts prologue(A) and B once into zero-padded f16/bf16
 *                copies (workspace); the GEMM then streams 16-byte cp.async copies through
 *                GEMM_STAGES shared-memory stages (a plain copy on gfx11) and needs no bounds
 *                checks in its main loop. Half the bytes per K step of "inline".
 *                GEMM_DIRECT (16-bit storage, no prologue, K and N multiples of 8): no pass;
 *                the copies read A and B themselves, zero-filling what lies past M, N or K.
 * Row reductions (softmax / rmsnorm / layer_norm) run as a second kernel over each finished
 * output row (one warp per row): two-phase, so any N works and no tile must span a row.
 */
constexpr int WARPS_M = GEMM_BM / GEMM_WM;
constexpr int WARPS_N = GEMM_BN / GEMM_WN;
constexpr int FM = GEMM_WM / 16;
constexpr int FN = GEMM_WN / 16;
constexpr int LDA_S = GEMM_BK + 8; /* 16-byte row padding: conflict-free ldmatrix / ds_read */
constexpr int LDB_S = GEMM_BN + 8;
constexpr int A_STAGE = GEMM_BM * LDA_S;
constexpr int B_STAGE = GEMM_BK * LDB_S;
constexpr int GRID_M = (GEMM_M + GEMM_BM - 1) / GEMM_BM;
constexpr int GRID_N = (GEMM_N + GEMM_BN - 1) / GEMM_BN;
constexpr int KT = (GEMM_K + GEMM_BK - 1) / GEMM_BK;
constexpr int MP = GRID_M * GEMM_BM; /* padded extents of the prepass copies */
constexpr int NP = GRID_N * GEMM_BN;
constexpr int KP = KT * GEMM_BK;

static_assert(WARPS_M * WARPS_N * 32 == GEMM_THREADS, "one warp per warp tile");
static_assert(GEMM_WM % 16 == 0 && GEMM_WN % 16 == 0 && GEMM_BK % 16 == 0, "16x16 fragments");
#if GEMM_NATIVE && GEMM_PREPASS && !HAS_PROLOGUE && GEMM_K % 8 == 0 && GEMM_N % 8 == 0
#define GEMM_DIRECT 1
#else
#define GEMM_DIRECT 0
#endif

static_assert(GEMM_SMEM_BYTES == GEMM_STAGES * (A_STAGE + B_STAGE) * (int)sizeof(arb_op_t),
              "emit.py and the kernel disagree on shared memory");

/* gfx11 keeps the K-tile loop a loop: at block_k 16 and a short K, clang-19 unrolls it
 * completely and hoists every tile's loads ahead of the WMMAs, which spills (10 of the 46
 * block_k-16 configs bench/gfx1151_fit.py sampled; each fits, at 79-177 VGPRs, as a loop). */
#if defined(ARB_FRAG_BACKEND_WMMA)
#define GEMM_KT_LOOP _Pragma("unroll 1")
#else
#define GEMM_KT_LOOP
#endif

/* Grouped tile order: GEMM_GROUP_M block rows walk across N together, so the B tiles they
 * share stay in L2. */
__device__ __forceinline__ void gemm_tile(int& bm, int& bn) {
    const int pid = blockIdx.x;
    const int per_group = GEMM_GROUP_M * GRID_N;
    const int first_m = (pid / per_group) * GEMM_GROUP_M;
    const int rows = min(GRID_M - first_m, GEMM_GROUP_M);
    bm = first_m + (pid % per_group) % rows;
    bn = (pid % per_group) / rows;
}

__device__ __forceinline__ void gemm_mma_stage(arb_frag_acc (&acc)[FM][FN], const arb_op_t* As,
                                               const arb_op_t* Bs, int wm, int wn) {
#if defined(ARB_FRAG_BACKEND_WMMA)
    /* gfx11 fragments are 8 VGPRs; unrolled k-steps let the scheduler hoist every step's LDS
     * loads at once and spill (32x64 warp tile, BK 64: 256 VGPRs + scratch). */
#pragma unroll 1
#else
#pragma unroll
#endif
    for (int kk = 0; kk < GEMM_BK; kk += 16) {
        arb_frag_a a[FM];
        arb_frag_b b[FN];
#pragma unroll
        for (int i = 0; i < FM; ++i) arb_frag_lds_a(a[i], As + (wm * GEMM_WM + i * 16) * LDA_S + kk, LDA_S);
#pragma unroll
        for (int j = 0; j < FN; ++j) arb_frag_lds_b(b[j], Bs + kk * LDB_S + wn * GEMM_WN + j * 16, LDB_S);
#pragma unroll
        for (int i = 0; i < FM; ++i)
#pragma unroll
            for (int j = 0; j < FN; ++j) arb_frag_mma(acc[i][j], a[i], b[j]);
    }
}

__device__ __forceinline__ void gemm_store4(arb_op_t* dst, float4 v) {
    uint2 p;
    p.x = arb_pack2(v.x, v.y);
    p.y = arb_pack2(v.z, v.w);
    *reinterpret_cast<uint2*>(dst) = p;
}

/* 4 consecutive elements of storage as floats: one 16-byte (f32) or 8-byte (16-bit) load */
__device__ __forceinline__ float4 gemm_load4(const arb_store_t* p) {
#if GEMM_NATIVE
    arb_store_t h[4];
    *reinterpret_cast<uint2*>(h) = *reinterpret_cast<const uint2*>(p);
    return make_float4(arb_load(h[0]), arb_load(h[1]), arb_load(h[2]), arb_load(h[3]));
#else
    return *reinterpret_cast<const float4*>(p);
#endif
}

#if GEMM_PREPASS
/* ---- prepass staging ------------------------------------------------------------------- */
constexpr int A_CHUNKS = GEMM_BM * GEMM_BK / 8; /* 16-byte chunks of 8 elements */
constexpr int B_CHUNKS = GEMM_BK * GEMM_BN / 8;
constexpr int A_ITERS = (A_CHUNKS + GEMM_THREADS - 1) / GEMM_THREADS;
constexpr int B_ITERS = (B_CHUNKS + GEMM_THREADS - 1) / GEMM_THREADS;
constexpr int CONVERT_THREADS = 256;

#if !GEMM_DIRECT
/* prologue(A) -> A16[MP][KP], zero outside M x K. 8 elements (one 16-byte store) per step. */
__global__ void __launch_bounds__(CONVERT_THREADS) gemm_convert_a(const arb_store_t* __restrict__ A,
                                                                  arb_op_t* __restrict__ A16) {
    const long long total = (long long)MP * (KP / 8);
    for (long long i = (long long)blockIdx.x * CONVERT_THREADS + threadIdx.x; i < total;
         i += (long long)gridDim.x * CONVERT_THREADS) {
        const int r = (int)(i / (KP / 8)), k = (int)(i % (KP / 8)) * 8;
        float v[8];
        if (VEC_A && r < GEMM_M && k + 8 <= GEMM_K) {
            const float4 lo = gemm_load4(A + (size_t)r * GEMM_K + k);
            const float4 hi = gemm_load4(A + (size_t)r * GEMM_K + k + 4);
            v[0] = lo.x; v[1] = lo.y; v[2] = lo.z; v[3] = lo.w;
            v[4] = hi.x; v[5] = hi.y; v[6] = hi.z; v[7] = hi.w;
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = PROLOGUE(v[e]);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e)
                v[e] = (r < GEMM_M && k + e < GEMM_K)
                           ? PROLOGUE(arb_load(A[(size_t)r * GEMM_K + k + e])) : 0.0f;
        }
        uint4 p;
        p.x = arb_pack2(v[0], v[1]); p.y = arb_pack2(v[2], v[3]);
        p.z = arb_pack2(v[4], v[5]); p.w = arb_pack2(v[6], v[7]);
        *reinterpret_cast<uint4*>(A16 + (size_t)r * KP + k) = p;
    }
}

/* B -> B16[KP][NP], zero outside K x N. */
__global__ void __launch_bounds__(CONVERT_THREADS) gemm_convert_b(const arb_store_t* __restrict__ B,
                                                                  arb_op_t* __restrict__ B16) {
    const long long total = (long long)KP * (NP / 8);
    for (long long i = (long long)blockIdx.x * CONVERT_THREADS + threadIdx.x; i < total;
         i += (long long)gridDim.x * CONVERT_THREADS) {
        const int r = (int)(i / (NP / 8)), n = (int)(i % (NP / 8)) * 8;
        float v[8];
        if (VEC_B && r < GEMM_K && n + 8 <= GEMM_N) {
            const float4 lo = gemm_load4(B + (size_t)r * GEMM_N + n);
            const float4 hi = gemm_load4(B + (size_t)r * GEMM_N + n + 4);
            v[0] = lo.x; v[1] = lo.y; v[2] = lo.z; v[3] = lo.w;
            v[4] = hi.x; v[5] = hi.y; v[6] = hi.z; v[7] = hi.w;
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e)
                v[e] = (r < GEMM_K && n + e < GEMM_N) ? arb_load(B[(size_t)r * GEMM_N + n + e])
                                                      : 0.0f;
        }
        uint4 p;
        p.x = arb_pack2(v[0], v[1]); p.y = arb_pack2(v[2], v[3]);
        p.z = arb_pack2(v[4], v[5]); p.w = arb_pack2(v[6], v[7]);
        *reinterpret_cast<uint4*>(B16 + (size_t)r * NP + n) = p;
    }
}
#endif

__device__ __forceinline__ void gemm_issue(const arb_op_t* __restrict__ A16,
                                           const arb_op_t* __restrict__ B16, arb_op_t* As,
                                           arb_op_t* Bs, int m0, int n0, int k0) {
#pragma unroll
    for (int it = 0; it < A_ITERS; ++it) {
        const int c = threadIdx.x + it * GEMM_THREADS;
        if (A_CHUNKS % GEMM_THREADS == 0 || c < A_CHUNKS) {
            const int r = c / (GEMM_BK / 8), k = (c % (GEMM_BK / 8)) * 8;
#if GEMM_DIRECT /* A itself: rows past M and columns past K read as zeros */
            const bool in = m0 + r < GEMM_M && k0 + k < GEMM_K;
            arb_cp_async16_zfill(As + r * LDA_S + k,
                                 A16 + (in ? (size_t)(m0 + r) * GEMM_K + k0 + k : 0), in);
#else
            arb_cp_async16(As + r * LDA_S + k, A16 + (size_t)(m0 + r) * KP + k0 + k);
#endif
        }
    }
#pragma unroll
    for (int it = 0; it < B_ITERS; ++it) {
        const int c = threadIdx.x + it * GEMM_THREADS;
        if (B_CHUNKS % GEMM_THREADS == 0 || c < B_CHUNKS) {
            const int r = c / (GEMM_BN / 8), n = (c % (GEMM_BN / 8)) * 8;
#if GEMM_DIRECT
            const bool in = k0 + r < GEMM_K && n0 + n < GEMM_N;
            arb_cp_async16_zfill(Bs + r * LDB_S + n,
                                 B16 + (in ? (size_t)(k0 + r) * GEMM_N + n0 + n : 0), in);
#else
            arb_cp_async16(Bs + r * LDB_S + n, B16 + (size_t)(k0 + r) * NP + n0 + n);
#endif
        }
    }
}

__device__ __forceinline__ void gemm_main_loop(arb_frag_acc (&acc)[FM][FN], arb_op_t* smem,
                                               const arb_store_t* __restrict__ A,
                                               const arb_store_t* __restrict__ B,
                                               const arb_op_t* __restrict__ A16,
                                               const arb_op_t* __restrict__ B16, int m0, int n0,
                                               int wm, int wn) {
    static_assert(GEMM_STAGES >= 2, "prepass staging streams at least two stages");
    arb_op_t* As = smem;
    arb_op_t* Bs = smem + GEMM_STAGES * A_STAGE;
#pragma unroll
    for (int s = 0; s < GEMM_STAGES - 1; ++s) {
        if (s < KT) gemm_issue(A16, B16, As + s * A_STAGE, Bs + s * B_STAGE, m0, n0, s * GEMM_BK);
        arb_cp_async_commit();
    }
    GEMM_KT_LOOP
    for (int kt = 0; kt < KT; ++kt) {
        arb_cp_async_wait<GEMM_STAGES - 2>();
        __syncthreads(); /* tile kt landed for everyone; stage (kt-1) % STAGES is free */
        const int nk = kt + GEMM_STAGES - 1;
        if (nk < KT) {
            const int s = nk % GEMM_STAGES;
            gemm_issue(A16, B16, As + s * A_STAGE, Bs + s * B_STAGE, m0, n0, nk * GEMM_BK);
        }
        arb_cp_async_commit();
        const int cur = kt % GEMM_STAGES;
        gemm_mma_stage(acc, As + cur * A_STAGE, Bs + cur * B_STAGE, wm, wn);
    }
}

#else
/* ---- inline staging -------------------------------------------------------------------- */
constexpr int A_VECS = GEMM_BM * GEMM_BK / 4; /* float4 loads */
constexpr int B_VECS = GEMM_BK * GEMM_BN / 4;
constexpr int A_ITERS = (A_VECS + GEMM_THREADS - 1) / GEMM_THREADS;
constexpr int B_ITERS = (B_VECS + GEMM_THREADS - 1) / GEMM_THREADS;

struct gemm_regs {
    float4 a[A_ITERS];
    float4 b[B_ITERS];
};

__device__ __forceinline__ float4 gemm_load_a4(const arb_store_t* __restrict__ A, int r, int k) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r >= GEMM_M) return v;
    const arb_store_t* p = A + (size_t)r * GEMM_K + k;
    if (VEC_A) {
        if (k < GEMM_K) v = gemm_load4(p); /* K % 4 == 0: all or none */
    } else {
        if (k + 0 < GEMM_K) v.x = arb_load(p[0]);
        if (k + 1 < GEMM_K) v.y = arb_load(p[1]);
        if (k + 2 < GEMM_K) v.z = arb_load(p[2]);
        if (k + 3 < GEMM_K) v.w = arb_load(p[3]);
    }
    /* the prologue touches real elements only: padding stays zero even where f(0) != 0 */
    if (k + 0 < GEMM_K) v.x = PROLOGUE(v.x);
    if (k + 1 < GEMM_K) v.y = PROLOGUE(v.y);
    if (k + 2 < GEMM_K) v.z = PROLOGUE(v.z);
    if (k + 3 < GEMM_K) v.w = PROLOGUE(v.w);
    return v;
}

__device__ __forceinline__ float4 gemm_load_b4(const arb_store_t* __restrict__ B, int r, int n) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r >= GEMM_K) return v;
    const arb_store_t* p = B + (size_t)r * GEMM_N + n;
    if (VEC_B) {
        if (n < GEMM_N) v = gemm_load4(p);
    } else {
        if (n + 0 < GEMM_N) v.x = arb_load(p[0]);
        if (n + 1 < GEMM_N) v.y = arb_load(p[1]);
        if (n + 2 < GEMM_N) v.z = arb_load(p[2]);
        if (n + 3 < GEMM_N) v.w = arb_load(p[3]);
    }
    return v;
}

__device__ __forceinline__ void gemm_load(gemm_regs& g, const arb_store_t* __restrict__ A,
                                          const arb_store_t* __restrict__ B, int m0, int n0,
                                          int k0) {
#pragma unroll
    for (int it = 0; it < A_ITERS; ++it) {
        const int c = threadIdx.x + it * GEMM_THREADS;
        if (A_VECS % GEMM_THREADS == 0 || c < A_VECS)
            g.a[it] = gemm_load_a4(A, m0 + c / (GEMM_BK / 4), k0 + (c % (GEMM_BK / 4)) * 4);
    }
#pragma unroll
    for (int it = 0; it < B_ITERS; ++it) {
        const int c = threadIdx.x + it * GEMM_THREADS;
        if (B_VECS % GEMM_THREADS == 0 || c < B_VECS)
            g.b[it] = gemm_load_b4(B, k0 + c / (GEMM_BN / 4), n0 + (c % (GEMM_BN / 4)) * 4);
    }
}

__device__ __forceinline__ void gemm_store(const gemm_regs& g, arb_op_t* As, arb_op_t* Bs) {
#pragma unroll
    for (int it = 0; it < A_ITERS; ++it) {
        const int c = threadIdx.x + it * GEMM_THREADS;
        if (A_VECS % GEMM_THREADS == 0 || c < A_VECS)
            gemm_store4(As + (c / (GEMM_BK / 4)) * LDA_S + (c % (GEMM_BK / 4)) * 4, g.a[it]);
    }
#pragma unroll
    for (int it = 0; it < B_ITERS; ++it) {
        const int c = threadIdx.x + it * GEMM_THREADS;
        if (B_VECS % GEMM_THREADS == 0 || c < B_VECS)
            gemm_store4(Bs + (c / (GEMM_BN / 4)) * LDB_S + (c % (GEMM_BN / 4)) * 4, g.b[it]);
    }
}

__device__ __forceinline__ void gemm_main_loop(arb_frag_acc (&acc)[FM][FN], arb_op_t* smem,
                                               const arb_store_t* __restrict__ A,
                                               const arb_store_t* __restrict__ B,
                                               const arb_op_t* __restrict__ A16,
                                               const arb_op_t* __restrict__ B16, int m0, int n0,
                                               int wm, int wn) {
    static_assert(GEMM_STAGES == 1 || GEMM_STAGES == 2, "inline staging: 1 or 2 stages");
    arb_op_t* As = smem;
    arb_op_t* Bs = smem + GEMM_STAGES * A_STAGE;
    gemm_regs g;
    gemm_load(g, A, B, m0, n0, 0);
    gemm_store(g, As, Bs);
    __syncthreads();
    GEMM_KT_LOOP
    for (int kt = 0; kt < KT; ++kt) {
        const int cur = GEMM_STAGES == 1 ? 0 : (kt & 1);
        const int nxt = GEMM_STAGES == 1 ? 0 : (cur ^ 1);
        if (kt + 1 < KT) gemm_load(g, A, B, m0, n0, (kt + 1) * GEMM_BK); /* in flight over the MMAs */
        gemm_mma_stage(acc, As + cur * A_STAGE, Bs + cur * B_STAGE, wm, wn);
        if (kt + 1 < KT) {
            if (GEMM_STAGES == 1) __syncthreads(); /* single buffer: everyone done reading */
            gemm_store(g, As + nxt * A_STAGE, Bs + nxt * B_STAGE);
        }
        __syncthreads();
    }
}
#endif /* staging */

/* ---- the GEMM kernel: main loop, then the fused epilogue straight from the accumulators -- */
/* What the GEMM writes: the output itself, or f32 rows for the row reduction to finish
 * (16-bit storage with a reduction: the reduction reads unrounded values). */
#if HAS_REDUCTION && GEMM_NATIVE
typedef float gemm_out_t;
__device__ __forceinline__ float gemm_put(float y) { return y; }
#else
typedef arb_store_t gemm_out_t;
__device__ __forceinline__ arb_store_t gemm_put(float y) { return arb_store(y); }
#endif
/* two adjacent elements, the first at an even column: one 8- or 4-byte store */
__device__ __forceinline__ void gemm_put2(gemm_out_t* dst, float y0, float y1) {
    gemm_out_t pair[2] = {gemm_put(y0), gemm_put(y1)};
    if (sizeof(gemm_out_t) == 4)
        *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(pair);
    else
        *reinterpret_cast<unsigned*>(dst) = *reinterpret_cast<const unsigned*>(pair);
}

__global__ void __launch_bounds__(GEMM_THREADS) gemm_kernel(
    const arb_store_t* __restrict__ A, const arb_store_t* __restrict__ B,
    const arb_op_t* __restrict__ A16, const arb_op_t* __restrict__ B16,
    const arb_store_t* __restrict__ bias, const arb_store_t* __restrict__ res,
    gemm_out_t* __restrict__ out) {
    extern __shared__ __attribute__((aligned(16))) unsigned char gemm_smem_raw[];
    arb_op_t* smem = reinterpret_cast<arb_op_t*>(gemm_smem_raw);
    int bm, bn;
    gemm_tile(bm, bn);
    const int m0 = bm * GEMM_BM, n0 = bn * GEMM_BN;
    const int warp = threadIdx.x / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;

    arb_frag_acc acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) arb_frag_zero(acc[i][j]);

    gemm_main_loop(acc, smem, A, B, A16, B16, m0, n0, wm, wn);

#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
#if defined(ARB_FRAG_BACKEND_MMA_SYNC)
            /* x[v], x[v+1] are adjacent columns: one 8-byte store when N is even */
#pragma unroll
            for (int v = 0; v < 8; v += 2) {
                const int r = m0 + wm * GEMM_WM + i * 16 + arb_acc_row(v);
                const int c = n0 + wn * GEMM_WN + j * 16 + arb_acc_col(v);
                if (r >= GEMM_M) continue;
                const float y0 = c < GEMM_N ? arb_epilogue(acc[i][j].x[v], r, c, bias, res) : 0.f;
                const float y1 =
                    c + 1 < GEMM_N ? arb_epilogue(acc[i][j].x[v + 1], r, c + 1, bias, res) : 0.f;
                gemm_out_t* dst = out + (size_t)r * GEMM_N + c;
                if (GEMM_N % 2 == 0 && c + 1 < GEMM_N) {
                    gemm_put2(dst, y0, y1);
                } else {
                    if (c < GEMM_N) dst[0] = gemm_put(y0);
                    if (c + 1 < GEMM_N) dst[1] = gemm_put(y1);
                }
            }
#else
#pragma unroll
            for (int v = 0; v < 8; ++v) {
                const int r = m0 + wm * GEMM_WM + i * 16 + arb_acc_row(v);
                const int c = n0 + wn * GEMM_WN + j * 16 + arb_acc_col(v);
                if (r < GEMM_M && c < GEMM_N)
                    out[(size_t)r * GEMM_N + c] =
                        gemm_put(arb_epilogue(acc[i][j].x[v], r, c, bias, res));
            }
#endif
}

/* ---- host side: the runner ABI's launch ----------------------------------------------- */
/* Device buffers arb_launch allocates on first use: A16 then B16 (the prepass copies), and
 * the f32 rows a 16-bit output's row reduction starts from. */
#define GEMM_WORK_COPIES (GEMM_PREPASS && !GEMM_DIRECT)
#define GEMM_WORK_ROWS (HAS_REDUCTION && GEMM_NATIVE)
#if GEMM_WORK_COPIES || GEMM_WORK_ROWS
static arb_op_t* gemm_workspace = NULL;
static float* gemm_rows = NULL;

static void gemm_release_workspace(void) {
    if (gemm_workspace) (void)hipFree(gemm_workspace);
    if (gemm_rows) (void)hipFree(gemm_rows);
    gemm_workspace = NULL;
    gemm_rows = NULL;
}
#define ARB_RELEASE_HOOK gemm_release_workspace
#endif

static hipError_t arb_launch(const arb_store_t* const* in, arb_store_t* out,
                             hipStream_t stream) {
    const arb_store_t* A = in[0];
    const arb_store_t* B = in[1];
    const arb_store_t* bias = HAS_BIAS ? in[2] : NULL;
    const arb_store_t* res = HAS_RES ? in[2 + HAS_BIAS] : NULL;
    const arb_op_t* A16 = NULL;
    const arb_op_t* B16 = NULL;
    hipError_t e;
#if GEMM_WORK_ROWS
    if (gemm_rows == NULL &&
        (e = hipMalloc((void**)&gemm_rows, (size_t)GEMM_M * GEMM_N * sizeof(float))) != hipSuccess)
        return e;
    gemm_out_t* rows = gemm_rows;
#else
    gemm_out_t* rows = out;
#endif
#if GEMM_DIRECT /* 16-bit storage is the operand type: the copies read A and B themselves */
    A16 = reinterpret_cast<const arb_op_t*>(A);
    B16 = reinterpret_cast<const arb_op_t*>(B);
#elif GEMM_PREPASS
    /* GEMM_BENCH_SKIP_CONVERT (bench/gemm.py only, never emitted): convert on the first launch
     * only, so timing shows the GEMM without its prepass. Results are then stale. */
#if defined(GEMM_BENCH_SKIP_CONVERT)
    const bool convert = gemm_workspace == NULL;
#else
    const bool convert = true;
#endif
    if (gemm_workspace == NULL) {
        const size_t elems = (size_t)MP * KP + (size_t)KP * NP;
        if ((e = hipMalloc((void**)&gemm_workspace, elems * sizeof(arb_op_t))) != hipSuccess)
            return e;
    }
    A16 = gemm_workspace;
    B16 = gemm_workspace + (size_t)MP * KP;
    if (convert) {
        const long long ca = (long long)MP * (KP / 8), cb = (long long)KP * (NP / 8);
        const int ga = (int)((ca + CONVERT_THREADS - 1) / CONVERT_THREADS);
        const int gb = (int)((cb + CONVERT_THREADS - 1) / CONVERT_THREADS);
        gemm_convert_a<<<ga < 65535 ? ga : 65535, CONVERT_THREADS, 0, stream>>>(
            A, (arb_op_t*)A16);
        if ((e = hipGetLastError()) != hipSuccess) return e;
        gemm_convert_b<<<gb < 65535 ? gb : 65535, CONVERT_THREADS, 0, stream>>>(
            B, (arb_op_t*)B16);
        if ((e = hipGetLastError()) != hipSuccess) return e;
    }
#endif
    if (GEMM_SMEM_BYTES > 48 * 1024) {
        static bool raised = false;
        if (!raised) {
            e = hipFuncSetAttribute((const void*)gemm_kernel,
                                    hipFuncAttributeMaxDynamicSharedMemorySize, GEMM_SMEM_BYTES);
            if (e != hipSuccess) return e;
            raised = true;
        }
    }
    gemm_kernel<<<GRID_M * GRID_N, GEMM_THREADS, GEMM_SMEM_BYTES, stream>>>(A, B, A16, B16, bias,
                                                                            res, rows);
    if ((e = hipGetLastError()) != hipSuccess) return e;
#if HAS_REDUCTION
    row_reduce_kernel<<<(GEMM_M + ROW_WARPS - 1) / ROW_WARPS, ROW_WARPS * 32, 0, stream>>>(rows,
                                                                                           out);
    if ((e = hipGetLastError()) != hipSuccess) return e;
#endif
    return hipSuccess;
}

#include "arb_runner.h"
