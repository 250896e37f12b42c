/* Split-KV ("flash-decoding") attention for few queries over long keys:
 * O = softmax(scale * Q K^T [+ causal mask]) V with DEC_SQ <= 16.
 *
 * A decode step reads every key and value once and does little arithmetic per byte, so the
 * kernel is built around the loads: one block owns DEC_SPLIT_KEYS keys of one (batch, head)
 * for DEC_QB of its queries, and reads that chunk with 16-byte loads, one key row per group
 * of DEC_GP lanes (lane gl of a group holds head_dim elements 8 gl .. 8 gl + 7), so
 * consecutive groups read consecutive rows and a warp's loads are contiguous. Each group
 * takes DEC_KPT keys per iteration (their K and V loads all issued before any arithmetic),
 * forms the scores of every query with f32 FMAs and a butterfly sum inside the group, and
 * keeps per query an online softmax (running max m, sum l, unnormalised acc[8]) in
 * registers. At the end of the chunk the block folds its groups together through shared
 * memory and writes (m, l, acc[d]) per query to a workspace; dec_combine then merges the
 * splits of each query (log-sum-exp) and writes the output. With one split the first kernel
 * writes the output itself and dec_combine is not launched.
 *
 * Scores live in the log2 domain (Q is pre-multiplied by scale * log2 e) so every
 * exponential is one exp2. A key no query of the block can see (past seq_k, or causally
 * masked for the block's last query) is never loaded; a query that sees no key at all
 * outputs zeros (m stays -inf, l stays 0).
 *
 * Storage is arb_store_t (f32, f16 or bf16) for Q, K, V and O; everything is computed in
 * f32. A 16-byte load carries 8 elements of 16-bit storage; f32 storage takes two per row
 * slice, so one lane always owns 8 elements and DEC_G = head_dim / 8 lanes cover a row
 * (DEC_GP is DEC_G rounded up to a power of two; the lanes beyond DEC_G load nothing).
 *
 * Constants (from emit.py): DEC_B DEC_H DEC_SQ DEC_SK DEC_D DEC_CAUSAL DEC_OFF
 * DEC_SCALE_LOG2 DEC_SPLIT_KEYS DEC_SPLITS DEC_WARPS DEC_KPT DEC_QB DEC_QGROUPS DEC_GP, and
 * the runner's size table (ARB_N_INPUTS, arb_input_elems, arb_output_elems).
 */
#include <string.h>

#define DEC_THREADS (DEC_WARPS * ARB_WARP)
#define DEC_G (DEC_D / 8)                    /* lanes that hold one key row */
#define DEC_GROUPS (DEC_THREADS / DEC_GP)    /* key rows a block reads side by side */
#define DEC_TILE (DEC_GROUPS * DEC_KPT)      /* keys per iteration of a block */
#define DEC_DP (DEC_GP * 8)                  /* head_dim padded to whole groups */
#define DEC_BH (DEC_B * DEC_H)
/* DEC_OFF (from emit.py): causal key j is visible to query i iff j <= i + DEC_OFF:
 * DEC_SK - DEC_SQ bottom-right (FlashAttention's), 0 top-left (PyTorch's is_causal) */

#if DEC_D % 8 != 0 || DEC_G > DEC_GP || DEC_GP > ARB_WARP
#error "head_dim must be a multiple of 8 with head_dim / 8 lanes fitting one warp"
#endif
#if DEC_SPLIT_KEYS % DEC_TILE != 0
#error "DEC_SPLIT_KEYS must be a multiple of the keys one iteration reads"
#endif

/* 16-byte loads per lane per row slice of 8 elements: 1 for 16-bit storage, 2 for f32 */
#define DEC_W ((int)(8 * sizeof(arb_store_t) / 16))

#if !defined(ARB_GFX11)
__device__ __forceinline__ float dec_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); /* exp2(-inf) = +0 */
    return y;
}
__device__ __forceinline__ float dec_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ void dec_block_sync() { __syncthreads(); }
#else
__device__ __forceinline__ float dec_exp2(float x) { return __builtin_amdgcn_exp2f(x); }
__device__ __forceinline__ float dec_max(float a, float b) { return __builtin_fmaxf(a, b); }
/* __syncthreads() spelled with builtins: HIP's goes through the device library's
 * __atomic_work_item_fence, a call in an ISA-only (-nogpulib) build; ROCm inlines the same. */
__device__ __forceinline__ void dec_block_sync() {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
#endif

/* The 8 elements of one row slice, unpacked from its raw 16-byte words into f32. */
__device__ __forceinline__ void dec_unpack(const uint4 (&raw)[DEC_W], float (&f)[8]) {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        arb_store_t x;
        memcpy(&x, reinterpret_cast<const char*>(raw) + e * sizeof(arb_store_t), sizeof x);
        f[e] = arb_load(x);
    }
}

/* Unconditional: callers clamp the address to a valid row, so the loads of one iteration
 * carry no branches between them and are all in flight together. */
__device__ __forceinline__ void dec_load(const arb_store_t* p, uint4 (&raw)[DEC_W]) {
#pragma unroll
    for (int w = 0; w < DEC_W; ++w) raw[w] = reinterpret_cast<const uint4*>(p)[w];
}

/* Sum over the DEC_GP lanes of a group (groups are aligned runs of lanes in a warp). */
__device__ __forceinline__ float dec_group_sum(float v) {
#pragma unroll
    for (int m = DEC_GP / 2; m > 0; m >>= 1) v += arb_shfl_xor(v, m);
    return v;
}

/* Workspace of the splits (f32): acc[bh][sq][split][d], then m[bh][sq][split], l[...]. */
#define DEC_WS_ROWS ((long long)DEC_BH * DEC_SQ * DEC_SPLITS)
#define DEC_WS_FLOATS (DEC_WS_ROWS * (DEC_D + 2))

/* ---------------------------------------------------------------- one chunk of keys */
/* An explicit minimum of one block per SM: without it ptxas chose a 128-register target and
 * spilled the 8-lane rows (head_dim 8) at 4 queries x 4 keys. */
extern "C" __global__ void __launch_bounds__(DEC_THREADS, 1)
dec_split(const arb_store_t* __restrict__ q, const arb_store_t* __restrict__ k,
          const arb_store_t* __restrict__ v, float* __restrict__ ws,
          arb_store_t* __restrict__ out) {
    const int blk = blockIdx.x;
    const int qg = blk % DEC_QGROUPS; /* query groups of one chunk are neighbours: they share */
    const int split = (blk / DEC_QGROUPS) % DEC_SPLITS; /* its K/V through the L2 */
    const int bh = blk / (DEC_QGROUPS * DEC_SPLITS);
    const int tid = threadIdx.x;
    const int grp = tid / DEC_GP;
    const int gl = tid % DEC_GP;
    const bool lane_on = DEC_G == DEC_GP || gl < DEC_G;
    const int q0 = qg * DEC_QB;
    const int nq = DEC_SQ - q0 < DEC_QB ? DEC_SQ - q0 : DEC_QB;
    const int kbeg = split * DEC_SPLIT_KEYS;
    int kend = kbeg + DEC_SPLIT_KEYS < DEC_SK ? kbeg + DEC_SPLIT_KEYS : DEC_SK;
#if DEC_CAUSAL
    const int last_seen = q0 + nq - 1 + DEC_OFF; /* the block's last query sees keys <= this */
    if (last_seen + 1 < kend) kend = last_seen + 1;
#endif

    /* A lane beyond the row (DEC_G < DEC_GP) reads the row's first slice with Q zero, so it
     * adds nothing to a score, and its accumulator columns (>= DEC_D) are never written. */
    const int col = lane_on ? gl * 8 : 0;
    const arb_store_t* kp = k + (long long)bh * DEC_SK * DEC_D + col;
    const arb_store_t* vp = v + (long long)bh * DEC_SK * DEC_D + col;

    float qr[DEC_QB][8];
#pragma unroll
    for (int i = 0; i < DEC_QB; ++i) {
        const int row = q0 + i < DEC_SQ ? q0 + i : DEC_SQ - 1; /* padding rows repeat the last */
        uint4 raw[DEC_W];
        dec_load(q + ((long long)bh * DEC_SQ + row) * DEC_D + col, raw);
        dec_unpack(raw, qr[i]);
#pragma unroll
        for (int e = 0; e < 8; ++e) qr[i][e] = lane_on ? qr[i][e] * DEC_SCALE_LOG2 : 0.0f;
    }

    float m[DEC_QB], l[DEC_QB], acc[DEC_QB][8];
#pragma unroll
    for (int i = 0; i < DEC_QB; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][e] = 0.0f;
    }

    for (int base = kbeg; base < kend; base += DEC_TILE) {
        uint4 kraw[DEC_KPT][DEC_W], vraw[DEC_KPT][DEC_W];
        /* keys past kend read the last key of the chunk: their scores are masked to -inf,
         * so their weights are 0 and the (finite) values they load add nothing */
#pragma unroll
        for (int t = 0; t < DEC_KPT; ++t) {
            const int j = base + t * DEC_GROUPS + grp;
            dec_load(kp + (long long)(j < kend ? j : kend - 1) * DEC_D, kraw[t]);
        }
#pragma unroll
        for (int t = 0; t < DEC_KPT; ++t) {
            const int j = base + t * DEC_GROUPS + grp;
            dec_load(vp + (long long)(j < kend ? j : kend - 1) * DEC_D, vraw[t]);
        }

        float s[DEC_KPT][DEC_QB];
#pragma unroll
        for (int t = 0; t < DEC_KPT; ++t) {
            const int j = base + t * DEC_GROUPS + grp;
            float kf[8];
            dec_unpack(kraw[t], kf);
#pragma unroll
            for (int i = 0; i < DEC_QB; ++i) {
                float d = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; ++e) d = fmaf(qr[i][e], kf[e], d);
                d = dec_group_sum(d);
                bool seen = j < kend;
#if DEC_CAUSAL
                seen = seen && j <= q0 + i + DEC_OFF;
#endif
                s[t][i] = seen ? d : -INFINITY;
            }
        }

        float p[DEC_KPT][DEC_QB];
#pragma unroll
        for (int i = 0; i < DEC_QB; ++i) {
            float mx = m[i];
#pragma unroll
            for (int t = 0; t < DEC_KPT; ++t) mx = dec_max(mx, s[t][i]);
            /* while nothing is seen, subtract 0: exp2(-inf - -inf) would be NaN */
            const float mu = mx == -INFINITY ? 0.0f : mx;
            const float alpha = dec_exp2(m[i] - mu);
            float sum = 0.0f;
#pragma unroll
            for (int t = 0; t < DEC_KPT; ++t) {
                p[t][i] = dec_exp2(s[t][i] - mu);
                sum += p[t][i];
            }
            l[i] = fmaf(l[i], alpha, sum);
            m[i] = mx;
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[i][e] *= alpha;
        }
#pragma unroll
        for (int t = 0; t < DEC_KPT; ++t) {
            float vf[8];
            dec_unpack(vraw[t], vf);
#pragma unroll
            for (int i = 0; i < DEC_QB; ++i)
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[i][e] = fmaf(p[t][i], vf[e], acc[i][e]);
        }
    }

    /* Fold the block's groups: every group holds its own (m, l, acc) per query. */
    __shared__ float sm_m[DEC_GROUPS][DEC_QB];
    __shared__ float sm_l[DEC_GROUPS][DEC_QB];
    __shared__ float sm_acc[DEC_GROUPS * DEC_DP];
    if (gl == 0) {
#pragma unroll
        for (int i = 0; i < DEC_QB; ++i) {
            sm_m[grp][i] = m[i];
            sm_l[grp][i] = l[i];
        }
    }
    dec_block_sync();
#pragma unroll
    for (int i = 0; i < DEC_QB; ++i) {
        float mb = -INFINITY;
        for (int g = 0; g < DEC_GROUPS; ++g) mb = dec_max(mb, sm_m[g][i]);
        const float mu = mb == -INFINITY ? 0.0f : mb;
        const float f = dec_exp2(m[i] - mu);
        if (i > 0) dec_block_sync(); /* the last query's sums are read */
#pragma unroll
        for (int e = 0; e < 8; ++e) sm_acc[grp * DEC_DP + gl * 8 + e] = acc[i][e] * f;
        dec_block_sync();
        if (i >= nq) continue; /* (uniform over the block) */
        float lb = 0.0f;
        for (int g = 0; g < DEC_GROUPS; ++g) lb += sm_l[g][i] * dec_exp2(sm_m[g][i] - mu);
        const long long row = (long long)bh * DEC_SQ + q0 + i;
        for (int c = tid; c < DEC_D; c += DEC_THREADS) {
            float o = 0.0f;
            for (int g = 0; g < DEC_GROUPS; ++g) o += sm_acc[g * DEC_DP + c];
#if DEC_SPLITS == 1
            out[row * DEC_D + c] = arb_store(lb > 0.0f ? o / lb : 0.0f);
#else
            ws[(row * DEC_SPLITS + split) * DEC_D + c] = o;
#endif
        }
#if DEC_SPLITS > 1
        if (tid == 0) {
            ws[(long long)DEC_WS_ROWS * DEC_D + row * DEC_SPLITS + split] = mb;
            ws[(long long)DEC_WS_ROWS * (DEC_D + 1) + row * DEC_SPLITS + split] = lb;
        }
#endif
    }
}

/* ---------------------------------------------------------------- merge the splits */
#define DEC_CT (((DEC_D + ARB_WARP - 1) / ARB_WARP) * ARB_WARP) /* combine threads */

extern "C" __global__ void __launch_bounds__(DEC_CT)
dec_combine(const float* __restrict__ ws, arb_store_t* __restrict__ out) {
    const long long row = blockIdx.x; /* bh * DEC_SQ + query */
    const float* ms = ws + (long long)DEC_WS_ROWS * DEC_D + row * DEC_SPLITS;
    const float* ls = ws + (long long)DEC_WS_ROWS * (DEC_D + 1) + row * DEC_SPLITS;
    const float* as = ws + row * DEC_SPLITS * DEC_D;
    float mb = -INFINITY;
    for (int s = 0; s < DEC_SPLITS; ++s) mb = dec_max(mb, ms[s]);
    const float mu = mb == -INFINITY ? 0.0f : mb;
    const int c = threadIdx.x;
    float lb = 0.0f, o = 0.0f;
    for (int s = 0; s < DEC_SPLITS; ++s) {
        const float w = dec_exp2(ms[s] - mu); /* an empty split: m = -inf, weight 0 */
        lb = fmaf(ls[s], w, lb);
        if (c < DEC_D) o = fmaf(as[(long long)s * DEC_D + c], w, o);
    }
    if (c < DEC_D) out[row * DEC_D + c] = arb_store(lb > 0.0f ? o / lb : 0.0f);
}

/* ---------------------------------------------------------------- launch */
#if DEC_SPLITS > 1
static float* dec_workspace = NULL; /* the splits' partials, allocated on the first launch */

static void dec_release_workspace(void) {
    if (dec_workspace) (void)hipFree(dec_workspace);
    dec_workspace = NULL;
}
#define ARB_RELEASE_HOOK dec_release_workspace
#endif

static hipError_t arb_launch(const arb_store_t* const* in, arb_store_t* out,
                             hipStream_t stream) {
    float* ws = NULL;
#if DEC_SPLITS > 1
    if (dec_workspace == NULL) {
        hipError_t e = hipMalloc((void**)&dec_workspace, (size_t)DEC_WS_FLOATS * sizeof(float));
        if (e != hipSuccess) return e;
    }
    ws = dec_workspace;
#endif
    const long long blocks = (long long)DEC_QGROUPS * DEC_SPLITS * DEC_BH;
    dec_split<<<(unsigned)blocks, DEC_THREADS, 0, stream>>>(in[0], in[1], in[2], ws, out);
#if DEC_SPLITS > 1
    hipError_t e = hipGetLastError();
    if (e != hipSuccess) return e;
    dec_combine<<<(unsigned)(DEC_BH * DEC_SQ), DEC_CT, 0, stream>>>(ws, out);
#endif
    return hipGetLastError();
}

#include "arb_runner.h"
