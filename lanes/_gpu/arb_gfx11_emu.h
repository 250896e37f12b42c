/* gfx11 emulation on NVIDIA (ARB_GFX11_EMU; ARBITER_GFX11_EMULATION=1): the gfx11 code paths
 * of the kernels, compiled by nvcc and run on an NVIDIA GPU, with every __builtin_amdgcn_* they
 * use defined here. A warp is a wave32. The WMMA builtins are warp-collective emulations that
 * take each operand from the lanes the RDNA3 instruction reads and give each lane the
 * accumulator elements the instruction gives it:
 *   A: lane l holds row l & 15, k 0..15; B: lane l holds column l & 15, k 0..15;
 *      lanes 16-31 must hold copies of lanes 0-15 (a mismatch makes the whole tile NaN, so a
 *      kernel that forgets the copies fails its check instead of passing by luck);
 *   C/D: element v of lane l is D[2v + (l >> 4)][l & 15].
 * Slow (about 180 shuffles per 16x16x16 step): it proves layouts, synchronization and LDS
 * use, never speed. What it cannot prove: the AMDGPU code generator (register allocation,
 * scheduling, the ISA itself), which the gfx1151 compile gates and a real GPU answer.
 * Included by arb_gpu.h after the CUDA headers. */
#ifndef ARB_GFX11_EMU_H
#define ARB_GFX11_EMU_H

template <typename T, int N>
struct __align__(16) arb_vec {
    T e[N];
    __device__ __forceinline__ T& operator[](int i) { return e[i]; }
    __device__ __forceinline__ const T& operator[](int i) const { return e[i]; }
};

typedef __half arb_f16_t;
typedef arb_vec<__half, 16> arb_v16h;
typedef arb_vec<short, 16> arb_v16s; /* bf16 as bit patterns, as on HIP */
typedef arb_vec<float, 8> arb_v8f;

__device__ __forceinline__ unsigned __lane_id() {
    unsigned l;
    asm("mov.u32 %0, %%laneid;" : "=r"(l));
    return l;
}

__device__ __forceinline__ unsigned arb_emu_bits(__half h) { return __half_as_ushort(h); }
__device__ __forceinline__ unsigned arb_emu_bits(short s) { return (unsigned short)s; }
__device__ __forceinline__ float arb_emu_value(__half, unsigned bits) {
    return __half2float(__ushort_as_half((unsigned short)bits));
}
__device__ __forceinline__ float arb_emu_value(short, unsigned bits) {
    return __uint_as_float(bits << 16);
}

/* not inlined: one copy per operand type keeps the kernels' compile time down */
template <typename T>
__device__ __noinline__ arb_v8f arb_emu_wmma(const arb_vec<T, 16>& a, const arb_vec<T, 16>& b,
                                                const arb_v8f& c) {
    const unsigned all = 0xffffffffu;
    const int l = (int)__lane_id();
    unsigned a_bits[16], b_bits[16];
    bool copies = true;
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        a_bits[k] = arb_emu_bits(a[k]);
        b_bits[k] = arb_emu_bits(b[k]);
        copies = copies && __shfl_xor_sync(all, a_bits[k], 16) == a_bits[k] &&
                 __shfl_xor_sync(all, b_bits[k], 16) == b_bits[k];
    }
    const bool faulty = !__all_sync(all, copies);
    float bcol[16]; /* column l & 15 of B, as lane l & 15 holds it */
#pragma unroll
    for (int k = 0; k < 16; ++k) bcol[k] = arb_emu_value(T(), __shfl_sync(all, b_bits[k], l & 15));
    arb_v8f d;
#pragma unroll
    for (int v = 0; v < 8; ++v) {
        const int row = 2 * v + (l >> 4); /* row `row` of A is held by lane `row` */
        float s = c[v];
#pragma unroll
        for (int k = 0; k < 16; ++k)
            s = fmaf(arb_emu_value(T(), __shfl_sync(all, a_bits[k], row)), bcol[k], s);
        d[v] = faulty ? __int_as_float(0x7fc00000) : s;
    }
    return d;
}

#define __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c) arb_emu_wmma<__half>(a, b, c)
#define __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a, b, c) arb_emu_wmma<short>(a, b, c)
/* Synchronization: CUDA's forms are at least as strong as the gfx11 ones they stand for. */
#define __builtin_amdgcn_fence(order, scope) __threadfence()
#define __builtin_amdgcn_wave_barrier() __syncwarp()
#define __builtin_amdgcn_s_barrier() __syncthreads()
#define __builtin_amdgcn_sched_barrier(mask) ((void)0)
#define __builtin_amdgcn_exp2f(x) exp2f(x)
#define __hip_atomic_load(p, order, scope) __ldcg(p)
#define __HIP_MEMORY_SCOPE_AGENT 0

#endif /* ARB_GFX11_EMU_H */
