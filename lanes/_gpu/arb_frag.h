/* Arbiter matrix-fragment layer: one warp computes a 16x16 f32 tile += A(16x16) * B(16x16)
 * with f16 or bf16 operands, on gfx11 WMMA or NVIDIA mma.sync, behind one API.
 *
 * Include after arb_gpu.h. Define ARB_FRAG_BF16 for bf16 operands (else f16).
 *
 * API (all __device__, the lane id is implicit; every lane of the warp must call):
 *   arb_op_t                       the 16-bit operand element type
 *   arb_op_from_float(f)           float -> arb_op_t, round to nearest even
 *   arb_op_to_float(h)             arb_op_t -> float
 *   arb_pack2(lo, hi)              two floats -> two arb_op_t in one 32-bit word (lo first in memory)
 *   arb_frag_a / arb_frag_b / arb_frag_acc   (acc: `float x[8]` on both backends)
 *   arb_frag_load_a(a, p, ld)      A 16 rows x 16 k, row-major, any alignment
 *   arb_frag_load_b(b, p, ld)      B 16 k x 16 n, row-major, any alignment
 *   arb_frag_load_bt(b, p, ld)     B given as 16 n x 16 k row-major (K^T for attention)
 *   arb_frag_lds_a / _lds_b / _lds_bt   same, from SHARED memory with every row start
 *                                  16-byte aligned (p and ld*2 bytes multiples of 16):
 *                                  ldmatrix on NVIDIA, 16-byte ds_read on gfx11
 *   arb_frag_zero(c), arb_frag_mma(c, a, b)   c += a * b
 *   arb_acc_row(v), arb_acc_col(v)  (row, col) in the 16x16 tile of this lane's c.x[v]
 *   arb_cp_async16(dst_smem, src_global), arb_cp_async_commit(), arb_cp_async_wait<N>()
 *                                  16-byte global->shared copy: cp.async on sm_80+, a plain
 *                                  copy elsewhere (commit/wait are then no-ops)
 *   arb_cp_async16_zfill(dst, src, valid)   the same, writing 16 zero bytes (src not read)
 *                                  when !valid: a tail past the end of a tensor
 *
 * Register layouts (l = lane 0..31):
 *   gfx11 (__builtin_amdgcn_wmma_f32_16x16x16_{f16,bf16}_w32, wave32):
 *     A: lane l holds row (l & 15), k 0..15 as 16 elements; lanes 16-31 duplicate lanes 0-15.
 *     B: lane l holds column (l & 15), k 0..15 as 16 elements; lanes 16-31 duplicate 0-15.
 *     C/D: x[v] is D[2v + (l >> 4)][l & 15]   (8 floats per lane)
 *   NVIDIA (two mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16} per 16x16 tile),
 *   g = l >> 2, t = l & 3; each 32-bit register holds two consecutive k (lower k in low half):
 *     A: r0 = (row g,   k 2t..2t+1)   r1 = (row g+8, k 2t..2t+1)
 *        r2 = (row g,   k 2t+8..)     r3 = (row g+8, k 2t+8..)
 *     B: r0 = (k 2t..2t+1, col g)  r1 = (k 2t+8.., col g)     -> n-tile 0 (cols 0..7)
 *        r2 = (k 2t..2t+1, col g+8) r3 = (k 2t+8.., col g+8)  -> n-tile 1 (cols 8..15)
 *     C/D: x[0..3] n-tile 0, x[4..7] n-tile 1; in each, c0,c1 at (row g, cols 2t, 2t+1)
 *          and c2,c3 at (row g+8, cols 2t, 2t+1).
 *     So an accumulator converts to an A fragment in registers (P @ V in attention):
 *     a.r[0] = pack(x0,x1), r[1] = pack(x2,x3), r[2] = pack(x4,x5), r[3] = pack(x6,x7)
 *     (arb_frag_acc_to_a; on gfx11 that needs a trip through LDS: arb_frag_acc_to_a_lds).
 */
#ifndef ARB_FRAG_H
#define ARB_FRAG_H

#include "arb_gpu.h"

/* ------------------------------------------------------------------------------------------ */
#if !defined(ARB_GFX11)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "arb_frag.h: the NVIDIA backend needs sm_80 or newer (mma.sync m16n8k16, bf16, cp.async)"
#endif

#define ARB_FRAG_BACKEND_MMA_SYNC 1

#if defined(ARB_FRAG_BF16)
typedef __nv_bfloat16 arb_op_t;
#define ARB_FRAG_MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
__device__ __forceinline__ arb_op_t arb_op_from_float(float f) { return __float2bfloat16_rn(f); }
__device__ __forceinline__ float arb_op_to_float(arb_op_t h) { return __bfloat162float(h); }
__device__ __forceinline__ unsigned int arb_pack2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned int*>(&v);
}
#else
typedef __half arb_op_t;
#define ARB_FRAG_MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
__device__ __forceinline__ arb_op_t arb_op_from_float(float f) { return __float2half_rn(f); }
__device__ __forceinline__ float arb_op_to_float(arb_op_t h) { return __half2float(h); }
__device__ __forceinline__ unsigned int arb_pack2(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned int*>(&v);
}
#endif

struct arb_frag_a { unsigned int r[4]; };
struct arb_frag_b { unsigned int r[4]; };
struct arb_frag_acc { float x[8]; };

__device__ __forceinline__ int arb_lane_id() { return threadIdx.x & 31; }

__device__ __forceinline__ unsigned int arb_pair_strided(const arb_op_t* p, int stride) {
    unsigned short lo = *reinterpret_cast<const unsigned short*>(p);
    unsigned short hi = *reinterpret_cast<const unsigned short*>(p + stride);
    return (unsigned int)lo | ((unsigned int)hi << 16);
}

__device__ __forceinline__ void arb_frag_load_a(arb_frag_a& a, const arb_op_t* p, int ld) {
    const int l = arb_lane_id(), g = l >> 2, t = l & 3;
    a.r[0] = arb_pair_strided(p + g * ld + 2 * t, 1);
    a.r[1] = arb_pair_strided(p + (g + 8) * ld + 2 * t, 1);
    a.r[2] = arb_pair_strided(p + g * ld + 2 * t + 8, 1);
    a.r[3] = arb_pair_strided(p + (g + 8) * ld + 2 * t + 8, 1);
}

__device__ __forceinline__ void arb_frag_load_b(arb_frag_b& b, const arb_op_t* p, int ld) {
    const int l = arb_lane_id(), g = l >> 2, t = l & 3;
    b.r[0] = arb_pair_strided(p + (2 * t) * ld + g, ld);
    b.r[1] = arb_pair_strided(p + (2 * t + 8) * ld + g, ld);
    b.r[2] = arb_pair_strided(p + (2 * t) * ld + g + 8, ld);
    b.r[3] = arb_pair_strided(p + (2 * t + 8) * ld + g + 8, ld);
}

__device__ __forceinline__ void arb_frag_load_bt(arb_frag_b& b, const arb_op_t* p, int ld) {
    const int l = arb_lane_id(), g = l >> 2, t = l & 3;
    b.r[0] = arb_pair_strided(p + g * ld + 2 * t, 1);
    b.r[1] = arb_pair_strided(p + g * ld + 2 * t + 8, 1);
    b.r[2] = arb_pair_strided(p + (g + 8) * ld + 2 * t, 1);
    b.r[3] = arb_pair_strided(p + (g + 8) * ld + 2 * t + 8, 1);
}

__device__ __forceinline__ unsigned int arb_smem_addr(const void* p) {
    return (unsigned int)__cvta_generic_to_shared(p);
}

#define ARB_LDMATRIX_X4(op, r, addr)                                                  \
    asm volatile(op " {%0, %1, %2, %3}, [%4];\n"                                      \
                 : "=r"((r)[0]), "=r"((r)[1]), "=r"((r)[2]), "=r"((r)[3])             \
                 : "r"(addr))

/* Lane l supplies the row address of 8x8 matrix (l >> 3); matrix i lands in register i. */
__device__ __forceinline__ void arb_frag_lds_a(arb_frag_a& a, const arb_op_t* p, int ld) {
    const int l = arb_lane_id(), i = l >> 3;
    const arb_op_t* row = p + ((l & 7) + 8 * (i & 1)) * ld + 8 * (i >> 1);
    ARB_LDMATRIX_X4("ldmatrix.sync.aligned.m8n8.x4.shared.b16", a.r, arb_smem_addr(row));
}

__device__ __forceinline__ void arb_frag_lds_b(arb_frag_b& b, const arb_op_t* p, int ld) {
    const int l = arb_lane_id(), i = l >> 3;
    const arb_op_t* row = p + ((l & 7) + 8 * (i & 1)) * ld + 8 * (i >> 1);
    ARB_LDMATRIX_X4("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", b.r, arb_smem_addr(row));
}

__device__ __forceinline__ void arb_frag_lds_bt(arb_frag_b& b, const arb_op_t* p, int ld) {
    const int l = arb_lane_id(), i = l >> 3;
    const arb_op_t* row = p + ((l & 7) + 8 * (i >> 1)) * ld + 8 * (i & 1);
    ARB_LDMATRIX_X4("ldmatrix.sync.aligned.m8n8.x4.shared.b16", b.r, arb_smem_addr(row));
}

__device__ __forceinline__ void arb_frag_zero(arb_frag_acc& c) {
#pragma unroll
    for (int v = 0; v < 8; ++v) c.x[v] = 0.0f;
}

__device__ __forceinline__ void arb_frag_mma(arb_frag_acc& c, const arb_frag_a& a,
                                             const arb_frag_b& b) {
    /* not volatile: a pure register op, so the compiler may interleave it with the next
     * k-step's ldmatrix (which stays volatile: it reads shared memory behind barriers) */
    asm(ARB_FRAG_MMA_OP " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c.x[0]), "+f"(c.x[1]), "+f"(c.x[2]), "+f"(c.x[3])
                 : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[0]), "r"(b.r[1]));
    asm(ARB_FRAG_MMA_OP " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c.x[4]), "+f"(c.x[5]), "+f"(c.x[6]), "+f"(c.x[7])
                 : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[2]), "r"(b.r[3]));
}

__device__ __forceinline__ int arb_acc_row(int v) {
    return (arb_lane_id() >> 2) + 8 * ((v >> 1) & 1);
}
__device__ __forceinline__ int arb_acc_col(int v) {
    return 2 * (arb_lane_id() & 3) + (v & 1) + 8 * (v >> 2);
}

/* Accumulator (rounded to the operand type) -> A fragment, in registers: the C layout of two
 * n-tiles is the A layout of one k16 step. */
__device__ __forceinline__ void arb_frag_acc_to_a(arb_frag_a& a, const arb_frag_acc& c) {
    a.r[0] = arb_pack2(c.x[0], c.x[1]);
    a.r[1] = arb_pack2(c.x[2], c.x[3]);
    a.r[2] = arb_pack2(c.x[4], c.x[5]);
    a.r[3] = arb_pack2(c.x[6], c.x[7]);
}

__device__ __forceinline__ void arb_cp_async16(void* dst_smem, const void* src_global) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
                 :: "r"(arb_smem_addr(dst_smem)), "l"(src_global));
}
__device__ __forceinline__ void arb_cp_async16_zfill(void* dst_smem, const void* src_global,
                                                     bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(arb_smem_addr(dst_smem)), "l"(src_global), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void arb_cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void arb_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
}

/* ------------------------------------------------------------------------------------------ */
#else /* gfx11 WMMA, wave32 (HIP, or NVIDIA under arb_gfx11_emu.h) */

#define ARB_FRAG_BACKEND_WMMA 1

#if defined(ARB_FRAG_BF16)
/* bf16 travels as its bit pattern; the builtin takes vectors of 16 shorts. */
typedef unsigned short arb_op_t;
typedef arb_v16s arb_frag_vec;
typedef short arb_frag_elem;
__device__ __forceinline__ arb_op_t arb_op_from_float(float f) { return arb_bf16_bits(f); }
__device__ __forceinline__ float arb_op_to_float(arb_op_t h) {
    return __builtin_bit_cast(float, (unsigned int)h << 16);
}
#define ARB_WMMA(a, b, c) __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a, b, c)
#else
typedef arb_f16_t arb_op_t;
typedef arb_v16h arb_frag_vec;
typedef arb_f16_t arb_frag_elem;
__device__ __forceinline__ arb_op_t arb_op_from_float(float f) { return (arb_op_t)f; }
__device__ __forceinline__ float arb_op_to_float(arb_op_t h) { return (float)h; }
#define ARB_WMMA(a, b, c) __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c)
#endif

typedef arb_v8f arb_frag_v8f;

__device__ __forceinline__ unsigned int arb_pack2(float lo, float hi) {
    const arb_op_t l = arb_op_from_float(lo), h = arb_op_from_float(hi);
    return (unsigned int)__builtin_bit_cast(unsigned short, l) |
           ((unsigned int)__builtin_bit_cast(unsigned short, h) << 16);
}

struct arb_frag_a { arb_frag_vec x; };
struct arb_frag_b { arb_frag_vec x; };
struct arb_frag_acc { float x[8]; };

__device__ __forceinline__ int arb_lane_id() { return __lane_id() & 31; }

__device__ __forceinline__ short arb_op_bits(arb_op_t h) { return __builtin_bit_cast(short, h); }

/* A: lane l takes row l & 15 (k contiguous); B: lane l takes column l & 15 (k strided). */
__device__ __forceinline__ void arb_frag_load_a(arb_frag_a& a, const arb_op_t* p, int ld) {
    const arb_op_t* row = p + (arb_lane_id() & 15) * ld;
#pragma unroll
    for (int k = 0; k < 16; ++k) a.x[k] = __builtin_bit_cast(arb_frag_elem, row[k]);
}

__device__ __forceinline__ void arb_frag_load_b(arb_frag_b& b, const arb_op_t* p, int ld) {
    const arb_op_t* col = p + (arb_lane_id() & 15);
#pragma unroll
    for (int k = 0; k < 16; ++k) b.x[k] = __builtin_bit_cast(arb_frag_elem, col[k * ld]);
}

__device__ __forceinline__ void arb_frag_load_bt(arb_frag_b& b, const arb_op_t* p, int ld) {
    const arb_op_t* row = p + (arb_lane_id() & 15) * ld;
#pragma unroll
    for (int k = 0; k < 16; ++k) b.x[k] = __builtin_bit_cast(arb_frag_elem, row[k]);
}

/* Shared-memory forms: a row of 16 elements is two 16-byte loads. */
__device__ __forceinline__ arb_frag_vec arb_lds_row16(const arb_op_t* row) {
    return *reinterpret_cast<const arb_frag_vec*>(row);
}
__device__ __forceinline__ void arb_frag_lds_a(arb_frag_a& a, const arb_op_t* p, int ld) {
    a.x = arb_lds_row16(p + (arb_lane_id() & 15) * ld);
}
__device__ __forceinline__ void arb_frag_lds_b(arb_frag_b& b, const arb_op_t* p, int ld) {
    arb_frag_load_b(b, p, ld);
}
__device__ __forceinline__ void arb_frag_lds_bt(arb_frag_b& b, const arb_op_t* p, int ld) {
    b.x = arb_lds_row16(p + (arb_lane_id() & 15) * ld);
}

__device__ __forceinline__ void arb_frag_zero(arb_frag_acc& c) {
#pragma unroll
    for (int v = 0; v < 8; ++v) c.x[v] = 0.0f;
}

__device__ __forceinline__ void arb_frag_mma(arb_frag_acc& c, const arb_frag_a& a,
                                             const arb_frag_b& b) {
    arb_frag_v8f acc;
#pragma unroll
    for (int v = 0; v < 8; ++v) acc[v] = c.x[v];
    acc = ARB_WMMA(a.x, b.x, acc);
#pragma unroll
    for (int v = 0; v < 8; ++v) c.x[v] = acc[v];
}

#if defined(ARB_GFX11_FAULT_C_LAYOUT)
/* A test's deliberately wrong layout (rows in halves, not interleaved): the gfx11 emulation's
 * check must fail it. Never defined by a lane. */
__device__ __forceinline__ int arb_acc_row(int v) { return v + 8 * (arb_lane_id() >> 4); }
#else
__device__ __forceinline__ int arb_acc_row(int v) { return 2 * v + (arb_lane_id() >> 4); }
#endif
__device__ __forceinline__ int arb_acc_col(int v) { return arb_lane_id() & 15; }

__device__ __forceinline__ void arb_cp_async16(void* dst_smem, const void* src_global) {
    *reinterpret_cast<uint4*>(dst_smem) = *reinterpret_cast<const uint4*>(src_global);
}
__device__ __forceinline__ void arb_cp_async16_zfill(void* dst_smem, const void* src_global,
                                                     bool valid) {
    *reinterpret_cast<uint4*>(dst_smem) =
        valid ? *reinterpret_cast<const uint4*>(src_global) : make_uint4(0u, 0u, 0u, 0u);
}
__device__ __forceinline__ void arb_cp_async_commit() {}
template <int N>
__device__ __forceinline__ void arb_cp_async_wait() {}

#endif /* backend */

/* Accumulator -> A fragment through a per-warp 16x16 arb_op_t scratch in shared memory (rows
 * 16-byte aligned, ld elements apart). Works on both backends; on NVIDIA prefer
 * arb_frag_acc_to_a, which stays in registers. */
__device__ __forceinline__ void arb_frag_acc_to_a_lds(arb_frag_a& a, const arb_frag_acc& c,
                                                      arb_op_t* scratch, int ld) {
#pragma unroll
    for (int v = 0; v < 8; ++v)
        scratch[arb_acc_row(v) * ld + arb_acc_col(v)] = arb_op_from_float(c.x[v]);
#if !defined(ARB_GFX11)
    __syncwarp();
#else
    __builtin_amdgcn_wave_barrier();
    __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "wavefront");
#endif
    arb_frag_lds_a(a, scratch, ld);
}

#endif /* ARB_FRAG_H */
