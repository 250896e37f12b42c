/* FlashAttention-2 forward: O = softmax(scale * Q K^T [+ bottom-right causal mask]) V.
 *
 * Q, K, V and O are stored as arb_store_t (the region's dtype, arb_gpu.h). From f32 storage
 * they are rounded to the operand type (f16 or bf16) as they are loaded; 16-bit storage is the
 * operand type itself (FA2_NATIVE: no conversion anywhere). Every product accumulates in f32. One block owns FA2_BQ query rows of one (batch, head);
 * each warp owns 16 of them and keeps, in registers, its Q fragments, its O accumulator and
 * the running row max / row sum of the online softmax in the accumulator layout
 * (fa2_acc_row / fa2_acc_col say where element x[v] of a lane sits in a 16x16 tile). K/V
 * stream through shared memory FA2_BK keys at a time; one pass; O is written once.
 *
 * Staging of Q/K/V (FA2_PREPASS):
 *   0 "inline":  f32 -> 16-bit conversion happens on the way into shared memory (global
 *                float4 loads into registers, packed stores), no separate conversion kernel.
 *                With FA2_STAGES == 2 the next tile's global loads are issued before the
 *                current tile's math and stored after it.
 *   1 "prepass": a first kernel converts Q, K, V once into zero-padded 16-bit copies (a
 *                workspace freed by arbiter_release), except from 16-bit storage on NVIDIA,
 *                where the tensors are read as they are (no pass; the tail tile of K/V is
 *                zero-filled by the async copy and Q rows are bounds-checked); gfx11 keeps
 *                the pass there as a copy, for V^T. The attention kernel then streams K/V
 *                tiles with 16-byte cp.async copies through FA2_STAGES >= 2 shared-memory
 *                stages issued FA2_STAGES - 1 tiles ahead (a plain copy on gfx11), with no
 *                bounds checks and no staging registers. gfx11 gets V transposed from the
 *                prepass (V^T[d][key]), so its tiles are plain row copies too.
 *
 * Where shared memory is needed beyond K/V and why:
 *  - NVIDIA (mma.sync m16n8k16): the f32 accumulator of two n8 tiles holds, per lane, exactly
 *    the (row, k) pairs the A operand of the next m16n8k16 wants, so P = exp(S - m) is packed
 *    to 16-bit in registers and fed to P @ V directly: no round trip. V is read with
 *    ldmatrix.trans, so it is stored untransposed.
 *  - gfx11 (v_wmma_f32_16x16x16, wave32): the accumulator gives lane l column l & 15 of rows
 *    2v + (l >> 4), but the A operand wants lane l to hold row l & 15 with all 16 k values.
 *    That is a transpose across lanes, so each warp writes P to its own LDS scratch and reads
 *    it back as A fragments (one write + one read of 16 x FA2_BK halves per tile). WMMA also
 *    wants B column-major per lane (16 contiguous k per lane), so V is stored transposed
 *    (V^T[d][key]) when it is converted into LDS.
 *
 * Constants (from emit.py): FA2_B FA2_H FA2_SQ FA2_SK FA2_D FA2_CAUSAL FA2_OFF FA2_SCALE_LOG2
 * FA2_BQ FA2_BK FA2_WARPS FA2_STAGES FA2_PREPASS FA2_SMEM_BYTES FA2_NATIVE, and FA2_BF16
 * (with ARB_FRAG_BF16) for bf16 operands; emit.py also writes the runner's size table
 * (ARB_N_INPUTS, arb_input_elems, arb_output_elems).
 */
#include "arb_frag.h" /* arb_pack2 and arb_cp_async16 for the prepass staging */

#define FA2_THREADS (FA2_WARPS * 32)
#define FA2_NT (FA2_BK / 16)              /* 16-key tiles per K/V tile */
#define FA2_DT (FA2_D / 16)               /* 16-wide head_dim tiles */
/* FA2_OFF (from emit.py): causal key j is visible to query i iff j <= i + FA2_OFF:
 * FA2_SK - FA2_SQ bottom-right (FlashAttention's), 0 top-left (PyTorch's is_causal) */
#define FA2_LDK (FA2_D + 8)               /* LDS row stride in halves: +16 B spreads banks */
/* elements per 16-byte global load: 4 floats, or 8 halves of 16-bit storage */
#if FA2_NATIVE
#define FA2_VEC 8
typedef uint4 fa2_vec;
#else
#define FA2_VEC 4
typedef float4 fa2_vec;
#endif
#define FA2_LOADS (FA2_BK * FA2_D / FA2_VEC / FA2_THREADS) /* per thread per K or V tile */

#if !FA2_PREPASS && (FA2_BK * FA2_D / FA2_VEC) % FA2_THREADS != 0
#error "FA2_BK * FA2_D / FA2_VEC must be a multiple of the thread count"
#endif
#if FA2_PREPASS && FA2_STAGES < 2
#error "prepass staging streams at least two stages"
#endif
#define FA2_SQP (((FA2_SQ + FA2_BQ - 1) / FA2_BQ) * FA2_BQ) /* padded rows of the 16-bit copies */
#define FA2_SKP (((FA2_SK + FA2_BK - 1) / FA2_BK) * FA2_BK)
/* 16-bit storage on NVIDIA needs no copies: the tensors themselves, rows as they are */
#if FA2_NATIVE && FA2_PREPASS && !defined(ARB_GFX11)
#define FA2_DIRECT 1
#else
#define FA2_DIRECT 0
#endif
#if FA2_DIRECT
#define FA2_QROWS FA2_SQ
#define FA2_KROWS FA2_SK
#else
#define FA2_QROWS FA2_SQP
#define FA2_KROWS FA2_SKP
#endif

#if !defined(ARB_GFX11)
/* ---------------------------------------------------------------- NVIDIA: mma.sync m16n8k16 */
#define FA2_SLOTS 2 /* rows per lane in an accumulator tile: g and g + 8 */
typedef unsigned int fa2_u32;
struct fa2_a { fa2_u32 r[4]; };   /* 16 x 16 A operand, standard m16n8k16 layout */
struct fa2_b { fa2_u32 r[4]; };   /* 16 (k) x 16 (n) B operand = two n8 tiles: r[0..1], r[2..3] */
struct fa2_acc { float x[8]; };   /* x[0..3] n-tile 0, x[4..7] n-tile 1 */

__device__ __forceinline__ int fa2_lane() { return threadIdx.x & 31; }
__device__ __forceinline__ int fa2_acc_row(int v) { return (fa2_lane() >> 2) + ((v >> 1) & 1) * 8; }
__device__ __forceinline__ int fa2_acc_col(int v) {
    return (v >> 2) * 8 + 2 * (fa2_lane() & 3) + (v & 1);
}
__device__ __forceinline__ int fa2_slot(int v) { return (v >> 1) & 1; }
__device__ __forceinline__ int fa2_slot_row(int s) { return (fa2_lane() >> 2) + 8 * s; }
#define FA2_ROW_SHUFFLES {1, 2}   /* lanes sharing a row differ in lane & 3 */

__device__ __forceinline__ fa2_u32 fa2_pack2(float lo, float hi) {
#if defined(FA2_BF16)
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
#else
    __half2 h = __floats2half2_rn(lo, hi);
#endif
    return *reinterpret_cast<fa2_u32*>(&h);
}

__device__ __forceinline__ void fa2_mma(fa2_acc& c, const fa2_a& a, const fa2_b& b) {
#if defined(FA2_BF16)
#define FA2_MMA "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#else
#define FA2_MMA "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#endif
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float* d = c.x + 4 * h;
        asm volatile(FA2_MMA "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]),
                       "r"(b.r[2 * h]), "r"(b.r[2 * h + 1]));
    }
#undef FA2_MMA
}

__device__ __forceinline__ void fa2_ldmatrix4(fa2_u32 (&r)[4], const void* p, bool trans) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    if (trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

/* Q rows [row0, row0 + 16) x head_dim [k0, k0 + 16) from global storage into an A fragment:
 * f32 rounded to the operand type, 16-bit storage as it is; rows past seq_q are zeros. */
__device__ __forceinline__ void fa2_load_q(fa2_a& a, const arb_store_t* q, int row0, int k0) {
    const int g = fa2_lane() >> 2, t = fa2_lane() & 3;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = row0 + g + (i & 1) * 8, col = k0 + 2 * t + (i >> 1) * 8;
#if FA2_NATIVE
        a.r[i] = row < FA2_SQ ? *reinterpret_cast<const fa2_u32*>(q + (long long)row * FA2_D + col)
                              : 0u;
#else
        float2 f = make_float2(0.0f, 0.0f);
        if (row < FA2_SQ) f = *reinterpret_cast<const float2*>(q + (long long)row * FA2_D + col);
        a.r[i] = fa2_pack2(f.x, f.y);
#endif
    }
}

/* The same A fragment from the 16-bit copy (rows zero-padded) or, FA2_DIRECT, the tensor. */
__device__ __forceinline__ void fa2_load_q16(fa2_a& a, const unsigned short* q, int row0, int k0) {
    const int g = fa2_lane() >> 2, t = fa2_lane() & 3;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = row0 + g + (i & 1) * 8, col = k0 + 2 * t + (i >> 1) * 8;
        a.r[i] = FA2_DIRECT && row >= FA2_SQ
                     ? 0u : *reinterpret_cast<const fa2_u32*>(q + (long long)row * FA2_D + col);
    }
}

/* B = K^T for keys [n0, n0 + 16) x head_dim [k0, k0 + 16): K rows are B columns. */
__device__ __forceinline__ void fa2_load_kt(fa2_b& b, const void* sK, int n0, int k0) {
    const int l = fa2_lane();
    const int key = n0 + (l & 7) + ((l >> 4) & 1) * 8, col = k0 + ((l >> 3) & 1) * 8;
    fa2_ldmatrix4(b.r, static_cast<const unsigned short*>(sK) + key * FA2_LDK + col, false);
}

/* B = V for keys [k0, k0 + 16) x head_dim [n0, n0 + 16), V stored [key][d]. */
__device__ __forceinline__ void fa2_load_v(fa2_b& b, const void* sV, int k0, int n0) {
    const int l = fa2_lane();
    const int key = k0 + (l & 7) + ((l >> 3) & 1) * 8, col = n0 + ((l >> 4) & 1) * 8;
    fa2_ldmatrix4(b.r, static_cast<const unsigned short*>(sV) + key * FA2_LDK + col, true);
}

/* P (two accumulator n8 tiles, f32) -> A operand for P @ V, in registers: the layouts agree. */
__device__ __forceinline__ void fa2_p_to_a(fa2_a& a, const fa2_acc& p, void* /*scratch*/,
                                           int /*kt*/) {
    a.r[0] = fa2_pack2(p.x[0], p.x[1]);
    a.r[1] = fa2_pack2(p.x[2], p.x[3]);
    a.r[2] = fa2_pack2(p.x[4], p.x[5]);
    a.r[3] = fa2_pack2(p.x[6], p.x[7]);
}
#define FA2_P_SCRATCH_HALVES 0
#define FA2_V_TRANSPOSED 0
#define FA2_Q_IN_LDS 0
#define FA2_Q_HALVES 0

__device__ __forceinline__ float fa2_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ void fa2_warp_sync() { __syncwarp(); }
__device__ __forceinline__ void fa2_sched_fence() {}
__device__ __forceinline__ void fa2_block_sync() { __syncthreads(); }

#else
/* ---------------------------------------------------------- gfx11: v_wmma_f32_16x16x16 w32 */
#define FA2_SLOTS 8 /* rows per lane in an accumulator tile: 2v + (lane >> 4) */
typedef arb_v8f fa2_v8f;
#if defined(FA2_BF16)
typedef arb_v16s fa2_v16;
typedef short fa2_h;
#else
typedef arb_v16h fa2_v16;
typedef arb_f16_t fa2_h;
#endif
struct fa2_a { fa2_v16 v; };   /* lane l: row l & 15, k 0..15 (lanes 16-31 duplicate) */
struct fa2_b { fa2_v16 v; };   /* lane l: column l & 15, k 0..15 (lanes 16-31 duplicate) */
struct fa2_acc { fa2_v8f x; }; /* x[v] = D[2v + (l >> 4)][l & 15] */

__device__ __forceinline__ int fa2_lane() { return threadIdx.x & 31; }
__device__ __forceinline__ int fa2_acc_row(int v) { return 2 * v + (fa2_lane() >> 4); }
__device__ __forceinline__ int fa2_acc_col(int v) { return fa2_lane() & 15; }
__device__ __forceinline__ int fa2_slot(int v) { return v; }
__device__ __forceinline__ int fa2_slot_row(int s) { return 2 * s + (fa2_lane() >> 4); }
#define FA2_ROW_SHUFFLES {1, 2, 4, 8}   /* lanes sharing a row differ in lane & 15 */

__device__ __forceinline__ fa2_h fa2_cvt(float f) {
#if defined(FA2_BF16)
    unsigned u = __builtin_bit_cast(unsigned, f);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (short)(u >> 16);
#else
    return (fa2_h)f;
#endif
}

__device__ __forceinline__ void fa2_mma(fa2_acc& c, const fa2_a& a, const fa2_b& b) {
#if defined(FA2_BF16)
    c.x = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a.v, b.v, c.x);
#else
    c.x = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a.v, b.v, c.x);
#endif
}

/* 16 contiguous halves from LDS (16 B aligned) as two 16-byte reads. */
__device__ __forceinline__ fa2_v16 fa2_lds16(const fa2_h* p) {
    union { uint4 u[2]; fa2_v16 v; } r;
    r.u[0] = reinterpret_cast<const uint4*>(p)[0];
    r.u[1] = reinterpret_cast<const uint4*>(p)[1];
    return r.v;
}

/* Q stays in LDS on gfx11 (this warp's 16 rows, converted once) and is re-read as A
 * fragments per K tile: holding all FA2_DT fragments in VGPRs next to O spills at d >= 64. */
#define FA2_Q_IN_LDS 1
#define FA2_Q_HALVES (16 * FA2_LDK)
__device__ __forceinline__ void fa2_stage_q(fa2_h* sQ, const arb_store_t* q, int row0) {
#if FA2_NATIVE
    for (int i = fa2_lane(); i < 16 * FA2_D / 8; i += 32) {
        const int r = i / (FA2_D / 8), c = (i % (FA2_D / 8)) * 8;
        uint4 u = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + r < FA2_SQ)
            u = *reinterpret_cast<const uint4*>(q + (long long)(row0 + r) * FA2_D + c);
        *reinterpret_cast<uint4*>(sQ + r * FA2_LDK + c) = u;
    }
#else
    for (int i = fa2_lane(); i < 16 * FA2_D / 4; i += 32) {
        const int r = i / (FA2_D / 4), c = (i % (FA2_D / 4)) * 4;
        float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row0 + r < FA2_SQ)
            f = *reinterpret_cast<const float4*>(q + (long long)(row0 + r) * FA2_D + c);
        fa2_h* p = sQ + r * FA2_LDK + c;
        p[0] = fa2_cvt(f.x);
        p[1] = fa2_cvt(f.y);
        p[2] = fa2_cvt(f.z);
        p[3] = fa2_cvt(f.w);
    }
#endif
}
__device__ __forceinline__ void fa2_stage_q16(fa2_h* sQ, const unsigned short* q, int row0) {
    for (int i = fa2_lane(); i < 16 * FA2_D / 8; i += 32) {
        const int r = i / (FA2_D / 8), c = (i % (FA2_D / 8)) * 8;
        *reinterpret_cast<uint4*>(sQ + r * FA2_LDK + c) =
            *reinterpret_cast<const uint4*>(q + (long long)(row0 + r) * FA2_D + c);
    }
}
__device__ __forceinline__ void fa2_load_q_lds(fa2_a& a, const fa2_h* sQ, int k0) {
    a.v = fa2_lds16(sQ + (fa2_lane() & 15) * FA2_LDK + k0);
}

__device__ __forceinline__ void fa2_load_kt(fa2_b& b, const void* sK, int n0, int k0) {
    const int key = n0 + (fa2_lane() & 15);
    b.v = fa2_lds16(static_cast<const fa2_h*>(sK) + key * FA2_LDK + k0);
}

#define FA2_LDV (FA2_BK + 8) /* V^T row stride in halves */
__device__ __forceinline__ void fa2_load_v(fa2_b& b, const void* sVt, int k0, int n0) {
    const int d = n0 + (fa2_lane() & 15);
    b.v = fa2_lds16(static_cast<const fa2_h*>(sVt) + d * FA2_LDV + k0);
}

/* Accumulator -> A operand goes through this warp's LDS scratch (a cross-lane transpose). */
#define FA2_LDP (FA2_BK + 8)
#define FA2_P_SCRATCH_HALVES (16 * FA2_LDP)
#define FA2_V_TRANSPOSED 1
__device__ __forceinline__ void fa2_warp_sync() {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
    __builtin_amdgcn_wave_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
/* The AMDGPU scheduler otherwise hoists every B fragment of the loop nest ahead of the first
 * v_wmma (8 VGPRs each) and spills; a fence per k-step keeps one step's loads in flight. */
__device__ __forceinline__ void fa2_sched_fence() { __builtin_amdgcn_sched_barrier(0); }
/* What __syncthreads() means, written with builtins: HIP's version goes through the device
 * library's __atomic_work_item_fence, which an ISA-only (-nogpulib) build leaves as a call
 * that clobbers every caller-saved VGPR; a full ROCm build inlines it to this same code. */
__device__ __forceinline__ void fa2_block_sync() {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
__device__ __forceinline__ void fa2_p_store(const fa2_acc& p, fa2_h* sP, int kt) {
#pragma unroll
    for (int v = 0; v < 8; ++v) sP[fa2_acc_row(v) * FA2_LDP + kt * 16 + fa2_acc_col(v)] = fa2_cvt(p.x[v]);
}
__device__ __forceinline__ void fa2_p_load(fa2_a& a, const fa2_h* sP, int kt) {
    a.v = fa2_lds16(sP + (fa2_lane() & 15) * FA2_LDP + kt * 16);
}

__device__ __forceinline__ float fa2_exp2(float x) { return __builtin_amdgcn_exp2f(x); }
#endif

/* ------------------------------------------------------------------ K/V tile staging */
struct fa2_stage { fa2_vec r[FA2_LOADS]; };

/* The FA2_BK x FA2_D tile starting at key0 is contiguous in global memory: thread i loads
 * 16-byte vector number i, i + THREADS, ...; keys past seq_k read as zeros (never NaN into
 * P @ V). */
__device__ __forceinline__ void fa2_fetch(fa2_stage& s, const arb_store_t* base, int key0) {
    const fa2_vec* src = reinterpret_cast<const fa2_vec*>(base + (long long)key0 * FA2_D) + threadIdx.x;
    if (key0 + FA2_BK <= FA2_SK) { /* whole tile: one base address, constant offsets */
#pragma unroll
        for (int i = 0; i < FA2_LOADS; ++i) s.r[i] = src[i * FA2_THREADS];
    } else {
#pragma unroll
        for (int i = 0; i < FA2_LOADS; ++i) {
            const int key = key0 + (threadIdx.x + i * FA2_THREADS) / (FA2_D / FA2_VEC);
            s.r[i] = key < FA2_SK ? src[i * FA2_THREADS] : fa2_vec{};
        }
    }
}

__device__ __forceinline__ void fa2_put_rows(const fa2_stage& s, void* dst) {
#pragma unroll
    for (int i = 0; i < FA2_LOADS; ++i) {
        const int idx = threadIdx.x + i * FA2_THREADS;
        const int key = idx / (FA2_D / FA2_VEC), c = (idx % (FA2_D / FA2_VEC)) * FA2_VEC;
#if FA2_NATIVE /* already the operand type: one 16-byte store (rows are 16-byte aligned) */
        *reinterpret_cast<uint4*>(static_cast<unsigned short*>(dst) + key * FA2_LDK + c) = s.r[i];
#elif !defined(ARB_GFX11)
        uint2 w = make_uint2(fa2_pack2(s.r[i].x, s.r[i].y), fa2_pack2(s.r[i].z, s.r[i].w));
        *reinterpret_cast<uint2*>(static_cast<unsigned short*>(dst) + key * FA2_LDK + c) = w;
#else
        fa2_h* p = static_cast<fa2_h*>(dst) + key * FA2_LDK + c;
        p[0] = fa2_cvt(s.r[i].x);
        p[1] = fa2_cvt(s.r[i].y);
        p[2] = fa2_cvt(s.r[i].z);
        p[3] = fa2_cvt(s.r[i].w);
#endif
    }
}

__device__ __forceinline__ void fa2_put_v(const fa2_stage& s, void* dst) {
#if FA2_V_TRANSPOSED
#pragma unroll
    for (int i = 0; i < FA2_LOADS; ++i) {
        const int idx = threadIdx.x + i * FA2_THREADS;
        const int key = idx / (FA2_D / FA2_VEC), c = (idx % (FA2_D / FA2_VEC)) * FA2_VEC;
        fa2_h* p = static_cast<fa2_h*>(dst) + c * FA2_LDV + key;
#if FA2_NATIVE
        const unsigned w[4] = {s.r[i].x, s.r[i].y, s.r[i].z, s.r[i].w};
#pragma unroll
        for (int e = 0; e < 8; ++e)
            p[e * FA2_LDV] = __builtin_bit_cast(fa2_h, (unsigned short)(w[e >> 1] >> (16 * (e & 1))));
#else
        p[0 * FA2_LDV] = fa2_cvt(s.r[i].x);
        p[1 * FA2_LDV] = fa2_cvt(s.r[i].y);
        p[2 * FA2_LDV] = fa2_cvt(s.r[i].z);
        p[3 * FA2_LDV] = fa2_cvt(s.r[i].w);
#endif
    }
#else
    fa2_put_rows(s, dst);
#endif
}

#if FA2_V_TRANSPOSED
#define FA2_V_HALVES (FA2_D * FA2_LDV)
#else
#define FA2_V_HALVES (FA2_BK * FA2_LDK)
#endif
#define FA2_K_HALVES (FA2_BK * FA2_LDK)
#define FA2_STAGE_HALVES (FA2_K_HALVES + FA2_V_HALVES)

#if FA2_PREPASS
/* ------------------------------------------------------------------ prepass staging */
#if !FA2_DIRECT
#define FA2_CVT_THREADS 256
/* src [bh][rows][D] -> dst 16-bit, rows zero-padded to rows_pad: [bh][rows_pad][D], or
 * with TRANS [bh][D][rows_pad] (gfx11's V^T). One 16-byte store of 8 elements per step.
 * From 16-bit storage (FA2_NATIVE, on gfx11 only) the rounding is exact: a copy. */
template <int TRANS>
__global__ void __launch_bounds__(FA2_CVT_THREADS)
fa2_convert(const arb_store_t* __restrict__ src, unsigned short* __restrict__ dst, int rows,
            int rows_pad) {
    const long long total = (long long)FA2_B * FA2_H * rows_pad * (FA2_D / 8);
    for (long long i = (long long)blockIdx.x * FA2_CVT_THREADS + threadIdx.x; i < total;
         i += (long long)gridDim.x * FA2_CVT_THREADS) {
        float f[8];
        long long out;
        if (!TRANS) {
            const long long row = i / (FA2_D / 8); /* bh * rows_pad + r */
            const int c = (int)(i % (FA2_D / 8)) * 8;
            const long long bh = row / rows_pad;
            const int r = (int)(row % rows_pad);
#if FA2_NATIVE
#pragma unroll
            for (int e = 0; e < 8; ++e)
                f[e] = r < rows ? arb_load(src[(bh * rows + r) * FA2_D + c + e]) : 0.0f;
#else
            float4 lo = make_float4(0.0f, 0.0f, 0.0f, 0.0f), hi = lo;
            if (r < rows) {
                const float* s = src + (bh * rows + r) * FA2_D + c;
                lo = *reinterpret_cast<const float4*>(s);
                hi = *reinterpret_cast<const float4*>(s + 4);
            }
            f[0] = lo.x; f[1] = lo.y; f[2] = lo.z; f[3] = lo.w;
            f[4] = hi.x; f[5] = hi.y; f[6] = hi.z; f[7] = hi.w;
#endif
            out = row * FA2_D + c;
        } else { /* d fastest across threads: coalesced reads, 16-byte strided writes */
            const int d = (int)(i % FA2_D);
            const long long grp = i / FA2_D; /* bh * (rows_pad / 8) + key group */
            const long long bh = grp / (rows_pad / 8);
            const int k0 = (int)(grp % (rows_pad / 8)) * 8;
#pragma unroll
            for (int e = 0; e < 8; ++e)
                f[e] = k0 + e < rows ? arb_load(src[(bh * rows + k0 + e) * FA2_D + d]) : 0.0f;
            out = (bh * FA2_D + d) * rows_pad + k0;
        }
        uint4 p;
        p.x = arb_pack2(f[0], f[1]); p.y = arb_pack2(f[2], f[3]);
        p.z = arb_pack2(f[4], f[5]); p.w = arb_pack2(f[6], f[7]);
        *reinterpret_cast<uint4*>(dst + out) = p;
    }
}
#endif

#define FA2_K_CHUNKS (FA2_BK * FA2_D / 8) /* 16-byte chunks per K (or V) tile */
#define FA2_CHUNK_ITERS ((FA2_K_CHUNKS + FA2_THREADS - 1) / FA2_THREADS)
/* Async copies of K and V tile [key0, key0 + FA2_BK) into one stage; the copies are padded,
 * so no bounds checks; read directly (FA2_DIRECT), keys past seq_k are zero-filled instead.
 * vp is V [rows][D], or V^T [D][SKP] where V is stored transposed. */
__device__ __forceinline__ void fa2_issue(unsigned short* sK, const unsigned short* kp,
                                          const unsigned short* vp, int key0) {
    unsigned short* sV = sK + FA2_K_HALVES;
#pragma unroll
    for (int it = 0; it < FA2_CHUNK_ITERS; ++it) {
        const int c = threadIdx.x + it * FA2_THREADS;
        if (FA2_K_CHUNKS % FA2_THREADS == 0 || c < FA2_K_CHUNKS) {
            const int r = c / (FA2_D / 8), col = (c % (FA2_D / 8)) * 8;
#if FA2_DIRECT
            const bool in = key0 + r < FA2_SK;
            const long long at = (long long)(in ? key0 + r : 0) * FA2_D + col;
            arb_cp_async16_zfill(sK + r * FA2_LDK + col, kp + at, in);
            arb_cp_async16_zfill(sV + r * FA2_LDK + col, vp + at, in);
#elif FA2_V_TRANSPOSED
            arb_cp_async16(sK + r * FA2_LDK + col, kp + (long long)(key0 + r) * FA2_D + col);
            const int d = c / (FA2_BK / 8), kc = (c % (FA2_BK / 8)) * 8;
            arb_cp_async16(sV + d * FA2_LDV + kc, vp + (long long)d * FA2_SKP + key0 + kc);
#else
            arb_cp_async16(sK + r * FA2_LDK + col, kp + (long long)(key0 + r) * FA2_D + col);
            arb_cp_async16(sV + r * FA2_LDK + col, vp + (long long)(key0 + r) * FA2_D + col);
#endif
        }
    }
}
#endif

/* ------------------------------------------------------------------ the kernel */
#if FA2_PREPASS
/* An explicit minimum of one block per SM: without it ptxas picked a register target below
 * need and spilled small prepass configs (d32, 4 warps, block_k 64: 16 bytes at 96 regs). */
#define FA2_LAUNCH_BOUNDS __launch_bounds__(FA2_THREADS, 1)
#else
#define FA2_LAUNCH_BOUNDS __launch_bounds__(FA2_THREADS)
#endif
extern "C" __global__ void FA2_LAUNCH_BOUNDS
fa2_forward(const arb_store_t* __restrict__ q, const arb_store_t* __restrict__ k,
            const arb_store_t* __restrict__ v, const unsigned short* __restrict__ q16,
            const unsigned short* __restrict__ k16, const unsigned short* __restrict__ v16,
            arb_store_t* __restrict__ o) {
    extern __shared__ __align__(16) unsigned short fa2_smem[];
    const int warp = threadIdx.x >> 5;
    /* causal: the last query blocks see the most keys; start them first */
    const int qb = FA2_CAUSAL ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const long long bh = blockIdx.y;
    const int q0 = qb * FA2_BQ, qw = q0 + warp * 16;
    const arb_store_t* qp = q + bh * FA2_SQ * FA2_D;
    const arb_store_t* kp = k + bh * FA2_SK * FA2_D;
    const arb_store_t* vp = v + bh * FA2_SK * FA2_D;
    arb_store_t* op = o + bh * FA2_SQ * FA2_D;
#if FA2_PREPASS
    const unsigned short* qp16 = q16 + bh * FA2_QROWS * FA2_D;
    const unsigned short* kp16 = k16 + bh * FA2_KROWS * FA2_D;
    const unsigned short* vp16 = v16 + bh * FA2_KROWS * FA2_D; /* [rows][D] or [D][SKP] */
    (void)qp; (void)kp; (void)vp;
#else
    (void)q16; (void)k16; (void)v16;
#endif

    /* keys any row of the block sees: [0, kend); of this warp: [0, wend) */
    int kend = FA2_SK, wend = FA2_SK;
    if (FA2_CAUSAL) {
        kend = min(FA2_SK, max(0, q0 + FA2_BQ + FA2_OFF));
        wend = min(FA2_SK, max(0, qw + 16 + FA2_OFF));
    }
    const int ntiles = (kend + FA2_BK - 1) / FA2_BK;

    unsigned short* sbase = fa2_smem + FA2_STAGES * FA2_STAGE_HALVES;
    void* sP = sbase + warp * (FA2_P_SCRATCH_HALVES + FA2_Q_HALVES);
    (void)sP;
#if FA2_Q_IN_LDS
    fa2_h* sQ = static_cast<fa2_h*>(sP) + FA2_P_SCRATCH_HALVES;
#if FA2_PREPASS
    fa2_stage_q16(sQ, qp16, qw);
#else
    fa2_stage_q(sQ, qp, qw);
#endif
    fa2_warp_sync();
#else
    fa2_a qa[FA2_DT];
#pragma unroll
    for (int d = 0; d < FA2_DT; ++d) {
#if FA2_PREPASS
        fa2_load_q16(qa[d], qp16, qw, d * 16);
#else
        fa2_load_q(qa[d], qp, qw, d * 16);
#endif
    }
#endif

    fa2_acc oacc[FA2_DT];
#pragma unroll
    for (int d = 0; d < FA2_DT; ++d)
#pragma unroll
        for (int e = 0; e < 8; ++e) oacc[d].x[e] = 0.0f;
    float m[FA2_SLOTS], l[FA2_SLOTS];
#pragma unroll
    for (int s = 0; s < FA2_SLOTS; ++s) {
        m[s] = -INFINITY;
        l[s] = 0.0f;
    }

#if FA2_PREPASS
    /* tiles 0 .. STAGES-2 in flight; one commit group per tile (empty past the last) */
#pragma unroll
    for (int s = 0; s < FA2_STAGES - 1; ++s) {
        if (s < ntiles) fa2_issue(fa2_smem + s * FA2_STAGE_HALVES, kp16, vp16, s * FA2_BK);
        arb_cp_async_commit();
    }
    int rs = 0, ws = FA2_STAGES - 1; /* stage read this tile, stage written for tile + S-1 */
#define FA2_INLINE2 0
#else
#define FA2_INLINE2 (FA2_STAGES == 2)
    fa2_stage st;
#endif
#if FA2_INLINE2
    if (ntiles > 0) {
        fa2_fetch(st, kp, 0);
        fa2_put_rows(st, fa2_smem);
        fa2_fetch(st, vp, 0);
        fa2_put_v(st, fa2_smem + FA2_K_HALVES);
    }
    fa2_block_sync();
#endif

    for (int t = 0; t < ntiles; ++t) {
        const int key0 = t * FA2_BK;
#if FA2_PREPASS
        arb_cp_async_wait<FA2_STAGES - 2>();
        fa2_block_sync(); /* tile t landed for everyone; the stage of tile t - 1 is free */
        if (t + FA2_STAGES - 1 < ntiles)
            fa2_issue(fa2_smem + ws * FA2_STAGE_HALVES, kp16, vp16, key0 + (FA2_STAGES - 1) * FA2_BK);
        arb_cp_async_commit();
        unsigned short* sK = fa2_smem + rs * FA2_STAGE_HALVES;
        rs = rs + 1 == FA2_STAGES ? 0 : rs + 1;
        ws = ws + 1 == FA2_STAGES ? 0 : ws + 1;
#elif FA2_INLINE2
        unsigned short* sK = fa2_smem + (t & 1) * FA2_STAGE_HALVES;
        unsigned short* sKn = fa2_smem + ((t + 1) & 1) * FA2_STAGE_HALVES;
        const bool more = t + 1 < ntiles;
        if (more) fa2_fetch(st, kp, key0 + FA2_BK);
#else
        unsigned short* sK = fa2_smem;
        fa2_fetch(st, kp, key0);
        fa2_put_rows(st, sK);
        fa2_fetch(st, vp, key0);
        fa2_put_v(st, sK + FA2_K_HALVES);
        fa2_block_sync();
#endif
        unsigned short* sV = sK + FA2_K_HALVES;
        const bool active = key0 < wend; /* warp-uniform: some row of this warp sees a key */

        fa2_acc s[FA2_NT];
        if (active) {
            /* S = Q K^T */
#pragma unroll
            for (int n = 0; n < FA2_NT; ++n)
#pragma unroll
                for (int e = 0; e < 8; ++e) s[n].x[e] = 0.0f;
#pragma unroll
            for (int d = 0; d < FA2_DT; ++d) {
#if FA2_Q_IN_LDS
                fa2_a qd;
                fa2_load_q_lds(qd, sQ, d * 16);
#else
                const fa2_a& qd = qa[d];
#endif
#pragma unroll
                for (int n = 0; n < FA2_NT; ++n) {
                    fa2_b b;
                    fa2_load_kt(b, sK, n * 16, d * 16);
                    fa2_mma(s[n], qd, b);
                }
                fa2_sched_fence();
            }
            /* mask only tiles that cross seq_k or the causal diagonal of this warp's rows */
            const bool edge = key0 + FA2_BK > FA2_SK ||
                              (FA2_CAUSAL && key0 + FA2_BK - 1 > qw + FA2_OFF);
            if (edge) {
#pragma unroll
                for (int n = 0; n < FA2_NT; ++n)
#pragma unroll
                    for (int e = 0; e < 8; ++e) {
                        const int key = key0 + n * 16 + fa2_acc_col(e);
                        const int row = qw + fa2_acc_row(e);
                        if (key >= FA2_SK || (FA2_CAUSAL && key > row + FA2_OFF))
                            s[n].x[e] = -INFINITY;
                    }
            }
            /* online softmax: new running max, rescale, P = exp2(S*c - m*c) */
            float mx[FA2_SLOTS];
#pragma unroll
            for (int r = 0; r < FA2_SLOTS; ++r) mx[r] = m[r];
#pragma unroll
            for (int n = 0; n < FA2_NT; ++n)
#pragma unroll
                for (int e = 0; e < 8; ++e) mx[fa2_slot(e)] = fmaxf(mx[fa2_slot(e)], s[n].x[e]);
            const int shuffles[] = FA2_ROW_SHUFFLES;
            float mc[FA2_SLOTS], alpha[FA2_SLOTS];
#pragma unroll
            for (int r = 0; r < FA2_SLOTS; ++r) {
#pragma unroll
                for (int i = 0; i < (int)(sizeof(shuffles) / sizeof(int)); ++i)
                    mx[r] = fmaxf(mx[r], arb_shfl_xor(mx[r], shuffles[i]));
                /* a row that has seen no key keeps m = -inf; subtract 0 instead so that
                 * exp2(-inf - m) never becomes -inf - -inf = NaN */
                mc[r] = mx[r] == -INFINITY ? 0.0f : mx[r] * FA2_SCALE_LOG2;
                alpha[r] = fa2_exp2(m[r] * FA2_SCALE_LOG2 - mc[r]); /* m = -inf -> 0 */
                m[r] = mx[r];
                l[r] *= alpha[r];
            }
#pragma unroll
            for (int d = 0; d < FA2_DT; ++d)
#pragma unroll
                for (int e = 0; e < 8; ++e) oacc[d].x[e] *= alpha[fa2_slot(e)];
#pragma unroll
            for (int n = 0; n < FA2_NT; ++n)
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const float p = fa2_exp2(fmaf(s[n].x[e], FA2_SCALE_LOG2, -mc[fa2_slot(e)]));
                    s[n].x[e] = p;
                    l[fa2_slot(e)] += p; /* per-lane partial; reduced across lanes at the end */
                }
        }
#if FA2_INLINE2
        if (more) {
            fa2_put_rows(st, sKn);
            fa2_fetch(st, vp, key0 + FA2_BK);
        }
#endif
        if (active) {
            /* O += P V */
#if defined(ARB_GFX11)
#pragma unroll
            for (int n = 0; n < FA2_NT; ++n) fa2_p_store(s[n], static_cast<fa2_h*>(sP), n);
            fa2_warp_sync();
#endif
#pragma unroll
            for (int n = 0; n < FA2_NT; ++n) {
                fa2_a pa;
#if !defined(ARB_GFX11)
                fa2_p_to_a(pa, s[n], sP, n);
#else
                fa2_p_load(pa, static_cast<const fa2_h*>(sP), n);
#endif
#pragma unroll
                for (int d = 0; d < FA2_DT; ++d) {
                    fa2_b b;
                    fa2_load_v(b, sV, n * 16, d * 16);
                    fa2_mma(oacc[d], pa, b);
                    if (d & 1) fa2_sched_fence();
                }
                fa2_sched_fence();
            }
        }
#if FA2_INLINE2
        if (more) fa2_put_v(st, sKn + FA2_K_HALVES);
#endif
#if !FA2_PREPASS
        fa2_block_sync();
#endif
    }
#if FA2_PREPASS
    arb_cp_async_wait<0>(); /* no copy may outlive the block (empty groups only, here) */
#endif

    /* finish the row sums across the lanes that share a row; fully masked rows -> zeros */
    const int shuffles[] = FA2_ROW_SHUFFLES;
    float inv[FA2_SLOTS];
#pragma unroll
    for (int r = 0; r < FA2_SLOTS; ++r) {
#pragma unroll
        for (int i = 0; i < (int)(sizeof(shuffles) / sizeof(int)); ++i)
            l[r] += arb_shfl_xor(l[r], shuffles[i]);
        inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    }
#pragma unroll
    for (int d = 0; d < FA2_DT; ++d)
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int row = qw + fa2_acc_row(e);
            if (row < FA2_SQ)
                op[(long long)row * FA2_D + d * 16 + fa2_acc_col(e)] =
                    arb_store(oacc[d].x[e] * inv[fa2_slot(e)]);
        }
}

#if FA2_PREPASS && !FA2_DIRECT
static unsigned short* fa2_workspace = NULL; /* Q16, K16, V16 (or V^T), allocated on first launch */

static void fa2_release_workspace(void) {
    if (fa2_workspace) (void)hipFree(fa2_workspace);
    fa2_workspace = NULL;
}
#define ARB_RELEASE_HOOK fa2_release_workspace

static hipError_t fa2_convert_launch(const arb_store_t* src, unsigned short* dst, int rows,
                                     int rows_pad, bool trans, hipStream_t stream) {
    const long long chunks = (long long)FA2_B * FA2_H * rows_pad * (FA2_D / 8);
    long long g = (chunks + FA2_CVT_THREADS - 1) / FA2_CVT_THREADS;
    const int grid = (int)(g < 65535 ? g : 65535);
    if (trans)
        fa2_convert<1><<<grid, FA2_CVT_THREADS, 0, stream>>>(src, dst, rows, rows_pad);
    else
        fa2_convert<0><<<grid, FA2_CVT_THREADS, 0, stream>>>(src, dst, rows, rows_pad);
    return hipGetLastError();
}
#endif

static hipError_t arb_launch(const arb_store_t* const* in, arb_store_t* out,
                             hipStream_t stream) {
    hipError_t e;
    if (FA2_SMEM_BYTES > 48 * 1024) {
        static bool raised = false;
        if (!raised) {
            e = hipFuncSetAttribute((const void*)fa2_forward,
                                    hipFuncAttributeMaxDynamicSharedMemorySize, FA2_SMEM_BYTES);
            if (e != hipSuccess) return e;
            raised = true;
        }
    }
    const unsigned short *q16 = NULL, *k16 = NULL, *v16 = NULL;
#if FA2_DIRECT /* 16-bit storage is the operand type: the async copies read the tensors */
    q16 = reinterpret_cast<const unsigned short*>(in[0]);
    k16 = reinterpret_cast<const unsigned short*>(in[1]);
    v16 = reinterpret_cast<const unsigned short*>(in[2]);
#elif FA2_PREPASS
    const long long bh = (long long)FA2_B * FA2_H;
    const size_t qe = (size_t)(bh * FA2_SQP * FA2_D), ke = (size_t)(bh * FA2_SKP * FA2_D);
    if (fa2_workspace == NULL) {
        e = hipMalloc((void**)&fa2_workspace, (qe + 2 * ke) * sizeof(unsigned short));
        if (e != hipSuccess) return e;
    }
    q16 = fa2_workspace;
    k16 = fa2_workspace + qe;
    v16 = fa2_workspace + qe + ke;
    /* FA2_BENCH_SKIP_CONVERT (bench/attention.py only, never emitted): convert on the first
     * launch only, so timing shows the attention kernel without its prepass. */
#if defined(FA2_BENCH_SKIP_CONVERT)
    static bool converted = false;
    const bool convert = !converted;
    converted = true;
#else
    const bool convert = true;
#endif
    if (convert) {
        if ((e = fa2_convert_launch(in[0], (unsigned short*)q16, FA2_SQ, FA2_SQP, false,
                                    stream)) != hipSuccess)
            return e;
        if ((e = fa2_convert_launch(in[1], (unsigned short*)k16, FA2_SK, FA2_SKP, false,
                                    stream)) != hipSuccess)
            return e;
        if ((e = fa2_convert_launch(in[2], (unsigned short*)v16, FA2_SK, FA2_SKP,
                                    FA2_V_TRANSPOSED != 0, stream)) != hipSuccess)
            return e;
    }
#endif
    dim3 grid((FA2_SQ + FA2_BQ - 1) / FA2_BQ, FA2_B * FA2_H);
    fa2_forward<<<grid, FA2_THREADS, FA2_SMEM_BYTES, stream>>>(in[0], in[1], in[2], q16, k16,
                                                                v16, out);
    return hipGetLastError();
}

#include "arb_runner.h"
