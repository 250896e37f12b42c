/* Arbiter GPU portability header: kernel sources are written in the HIP dialect; under nvcc
 * this header maps the hip* names they use onto CUDA. Under clang/hipcc it includes HIP.
 * Keep it small: only what generated sources and arb_runner.h actually use. */
#ifndef ARB_GPU_H
#define ARB_GPU_H

#if defined(__CUDACC__) && !defined(__HIP__)
#define ARB_CUDA 1
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
typedef cudaEvent_t hipEvent_t;
typedef cudaFuncAttribute hipFuncAttribute;
#define hipSuccess cudaSuccess
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipEventCreate cudaEventCreate
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipStreamCreate cudaStreamCreate
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipFuncSetAttribute cudaFuncSetAttribute
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define hipGetDeviceCount cudaGetDeviceCount

__device__ __forceinline__ float arb_shfl_xor(float v, int mask) {
    return __shfl_xor_sync(0xffffffffu, v, mask);
}
#if defined(ARB_GFX11_EMU)
#include "arb_gfx11_emu.h"
#endif
#else
#if defined(ARB_GFX11_EMU)
#error "ARB_GFX11_EMU emulates gfx11 on NVIDIA: build with nvcc"
#endif
#define ARB_HIP 1
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>

#if defined(ARB_OCKL_SHIM) && defined(__HIP_DEVICE_COMPILE__)
/* ISA-only builds (-nogpulib, no ROCm device libraries on the machine) leave the work-item
 * queries as calls into ockl. These definitions are what ockl does, so the gate's ISA matches
 * a full ROCm build: no call frames, no forced scratch. A ROCm install's build never defines
 * it; the Debian link (lanes/_gpu/build.py rocm_shared_object, no device libraries) does. */
extern "C" __device__ size_t __ockl_get_local_id(uint d) {
    return d == 0 ? __builtin_amdgcn_workitem_id_x()
                  : d == 1 ? __builtin_amdgcn_workitem_id_y() : __builtin_amdgcn_workitem_id_z();
}
extern "C" __device__ size_t __ockl_get_group_id(uint d) {
    return d == 0 ? __builtin_amdgcn_workgroup_id_x()
                  : d == 1 ? __builtin_amdgcn_workgroup_id_y() : __builtin_amdgcn_workgroup_id_z();
}
extern "C" __device__ size_t __ockl_get_local_size(uint d) {
    return d == 0 ? __builtin_amdgcn_workgroup_size_x()
                  : d == 1 ? __builtin_amdgcn_workgroup_size_y() : __builtin_amdgcn_workgroup_size_z();
}
extern "C" __device__ size_t __ockl_get_global_size(uint d) {
    return d == 0 ? __builtin_amdgcn_grid_size_x()
                  : d == 1 ? __builtin_amdgcn_grid_size_y() : __builtin_amdgcn_grid_size_z();
}
extern "C" __device__ size_t __ockl_get_num_groups(uint d) {
    return (__ockl_get_global_size(d) + __ockl_get_local_size(d) - 1) / __ockl_get_local_size(d);
}
#endif

__device__ __forceinline__ float arb_shfl_xor(float v, int mask) {
    return __shfl_xor(v, mask, 32);
}
#endif

#include <math.h>

/* Device code takes the gfx11 (RDNA3 wave32, WMMA) paths on HIP, and on NVIDIA under the gfx11
 * emulation (arb_gfx11_emu.h); the mma.sync paths otherwise. Host code follows ARB_CUDA. */
#if !defined(ARB_CUDA) || defined(ARB_GFX11_EMU)
#define ARB_GFX11 1
#endif
#if defined(ARB_GFX11) && !defined(ARB_GFX11_EMU)
typedef _Float16 arb_f16_t;
typedef _Float16 arb_v16h __attribute__((ext_vector_type(16)));
typedef short arb_v16s __attribute__((ext_vector_type(16))); /* bf16 as bit patterns */
typedef float arb_v8f __attribute__((ext_vector_type(8)));
#endif

/* gfx11 (RDNA 3/3.5) is compiled wave32 for HIP by default; NVIDIA warps are 32 wide. */
#define ARB_WARP 32
#define ARB_HOST_DEVICE __host__ __device__

/* Helpers the shared row programs (lanes/_scalar_body.py) call. Accurate forms, not the
 * fast intrinsics: results must stay within the f32 budget against the float64 oracle.
 * On HIP they lower to native instructions through LLVM builtins rather than calls into the
 * ROCm device libraries (ocml), so the same ISA comes out with or without those libraries
 * (the compile gate builds with -nogpulib) and no call frame forces scratch on. */
#if defined(ARB_CUDA)
__device__ __forceinline__ float arb_exp(float x) { return expf(x); }
__device__ __forceinline__ float arb_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ float arb_rsqrt(float x) { return rsqrtf(x); }
#else
__device__ __forceinline__ float arb_exp(float x) { return __builtin_expf(x); }
__device__ __forceinline__ float arb_tanh(float x) {
    /* |x| < 0.625: odd minimax polynomial (Cephes tanhf, as the C prelude), since
     * 1 - 2/(e^2x + 1) loses relative accuracy to cancellation near zero. */
    const float a = __builtin_fabsf(x);
    if (a < 0.625f) {
        const float z = x * x;
        return ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z
                 + 1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    }
    const float t = 1.0f - 2.0f / (__builtin_expf(2.0f * a) + 1.0f);
    return __builtin_copysignf(t, x);
}
__device__ __forceinline__ float arb_rsqrt(float x) { return 1.0f / __builtin_sqrtf(x); }
#endif
__device__ __forceinline__ float arb_sigmoid(float x) { return 1.0f / (1.0f + arb_exp(-x)); }

#if defined(ARB_GFX11)
/* bf16 on HIP travels as its bit pattern: f32 -> bf16 bits, round to nearest even, a NaN stays
 * a (quiet) NaN. The storage type and arb_frag.h's bf16 operands both round through this. */
__device__ __forceinline__ unsigned short arb_bf16_bits(float f) {
    unsigned int u = __builtin_bit_cast(unsigned int, f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
#endif

/* The region's storage type (every input and the output), chosen by the generated source
 * before it includes this header: ARB_STORE_F16 or ARB_STORE_BF16, else float. Kernels read
 * and write it through arb_load / arb_store (round to nearest even) and compute in float. */
#if defined(ARB_STORE_F16) && defined(ARB_STORE_BF16)
#error "define at most one of ARB_STORE_F16 and ARB_STORE_BF16"
#elif defined(ARB_STORE_F16)
#if defined(ARB_CUDA)
typedef __half arb_store_t;
__device__ __forceinline__ float arb_load(arb_store_t h) { return __half2float(h); }
__device__ __forceinline__ arb_store_t arb_store(float f) { return __float2half_rn(f); }
#else
typedef _Float16 arb_store_t;
__device__ __forceinline__ float arb_load(arb_store_t h) { return (float)h; }
__device__ __forceinline__ arb_store_t arb_store(float f) { return (arb_store_t)f; }
#endif
#define ARB_POISON_STORE 0x7EADu /* arbiter.check.POISON_BITS_16["f16"] */
#elif defined(ARB_STORE_BF16)
#if defined(ARB_CUDA)
typedef __nv_bfloat16 arb_store_t;
__device__ __forceinline__ float arb_load(arb_store_t h) { return __bfloat162float(h); }
__device__ __forceinline__ arb_store_t arb_store(float f) { return __float2bfloat16_rn(f); }
#else
/* bf16 travels as its bit pattern (as arb_frag.h's operands do) */
typedef unsigned short arb_store_t;
__device__ __forceinline__ float arb_load(arb_store_t h) {
    return __builtin_bit_cast(float, (unsigned int)h << 16);
}
__device__ __forceinline__ arb_store_t arb_store(float f) { return arb_bf16_bits(f); }
#endif
#define ARB_POISON_STORE 0x7FEDu /* arbiter.check.POISON_BITS_16["bf16"] */
#else
typedef float arb_store_t;
__device__ __forceinline__ float arb_load(arb_store_t f) { return f; }
__device__ __forceinline__ arb_store_t arb_store(float f) { return f; }
#define ARB_POISON_STORE 0x7FC0DEADu /* arbiter.check.POISON_BITS */
#endif

__device__ __forceinline__ float arb_warp_sum(float v) {
    for (int m = ARB_WARP / 2; m > 0; m >>= 1) v += arb_shfl_xor(v, m);
    return v;
}
__device__ __forceinline__ float arb_warp_max(float v) {
    for (int m = ARB_WARP / 2; m > 0; m >>= 1) v = fmaxf(v, arb_shfl_xor(v, m));
    return v;
}

#endif /* ARB_GPU_H */
