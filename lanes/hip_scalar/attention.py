"""Plain f32 attention for the hip_scalar lane: the correctness-first candidate on GPU.

One query row per warp (HIP dialect, builds for gfx1151 and sm_90 through arb_gpu.h). The row's
scaled q sits in shared memory; keys go 32 at a time, one key per lane for the dot product, then
an online softmax over the 32 scores (warp max / warp sum), and the output row, spread over
the lanes (head_dim / 32 floats each), is rescaled once per group and accumulates p_j * v_j
with coalesced reads of V. Causal masking is bottom-right aligned by shortening the key range;
a row that sees no key writes zeros.
"""

from __future__ import annotations

from arbiter.lane import AttentionRegion, Config, EmitError, KernelSource, Region, Space, Tunable

from .._gpu.abi import REBUILD_TEXT, runner_tail
from .._scalar_body import attention_defines, visible_keys

__all__ = ["attention_space", "emit_attention"]

_KERNEL = r"""
#if !defined(ARB_GFX11)
#define ATT_WARP_SYNC() __syncwarp()
#else
#define ATT_WARP_SYNC()                                     \
    do {                                                    \
        __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront"); \
        __builtin_amdgcn_wave_barrier();                    \
        __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront"); \
    } while (0)
#endif

#define DPL ((D + ARB_WARP - 1) / ARB_WARP) /* output floats per lane */

extern "C" __global__ void __launch_bounds__(WARPS * ARB_WARP)
attention_rows(const float* __restrict__ q, const float* __restrict__ k,
               const float* __restrict__ v, float* __restrict__ o)
{
    __shared__ float sq[WARPS][D];
    __shared__ float sp[WARPS][ARB_WARP];
    const int lane = threadIdx.x % ARB_WARP, warp = threadIdx.x / ARB_WARP;
    const long long row = (long long)blockIdx.x * WARPS + warp;
    if (row >= (long long)BH * SQ) return; /* whole warp leaves; no block barrier below */
    const long long bh = row / SQ, i = row % SQ;
    const float* kb = k + bh * SK * D;
    const float* vb = v + bh * SK * D;
    for (int d = lane; d < D; d += ARB_WARP) sq[warp][d] = q[row * D + d] * SCALE;
    ATT_WARP_SYNC();

    const long long nkeys = visible_keys(i);
    float acc[DPL];
#pragma unroll
    for (int t = 0; t < DPL; ++t) acc[t] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (long long j0 = 0; j0 < nkeys; j0 += ARB_WARP) {
        const long long j = j0 + lane;
        float s = -INFINITY;
        if (j < nkeys) {
            const float* kr = kb + j * D;
            float dot = 0.0f;
            for (int d = 0; d < D; ++d) dot += sq[warp][d] * kr[d];
            s = dot;
        }
        const float mnew = fmaxf(m, arb_warp_max(s)); /* finite: key j0 is visible */
        const float alpha = arb_exp(m - mnew);          /* m = -inf on the first group -> 0 */
        const float p = j < nkeys ? arb_exp(s - mnew) : 0.0f;
        l = l * alpha + arb_warp_sum(p);
        m = mnew;
        sp[warp][lane] = p;
        ATT_WARP_SYNC();
        const int nb = nkeys - j0 < ARB_WARP ? (int)(nkeys - j0) : ARB_WARP;
#pragma unroll
        for (int t = 0; t < DPL; ++t) acc[t] *= alpha;
        for (int jj = 0; jj < nb; ++jj) {
            const float pj = sp[warp][jj];
            const float* vr = vb + (j0 + jj) * D;
#pragma unroll
            for (int t = 0; t < DPL; ++t) {
                const int d = lane + t * ARB_WARP;
                if (d < D) acc[t] += pj * vr[d];
            }
        }
        ATT_WARP_SYNC();
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f; /* no visible key -> zeros */
#pragma unroll
    for (int t = 0; t < DPL; ++t) {
        const int d = lane + t * ARB_WARP;
        if (d < D) o[row * D + d] = acc[t] * inv;
    }
}
"""


_LAUNCH = [
    "const long long rows = (long long)BH * SQ;",
    "attention_rows<<<(unsigned)((rows + WARPS - 1) / WARPS), WARPS * ARB_WARP, 0, stream>>>(",
    "    in[0], in[1], in[2], out);",
]


def attention_space(region: AttentionRegion) -> Space:
    return Space((Tunable("warps", (2, 4, 8), 4),), ())


def emit_attention(region: Region, config: Config, lane: str) -> KernelSource:
    if not isinstance(region, AttentionRegion):
        raise EmitError(f"{lane} attention: not an attention region ({region.kind})")
    defines = {**attention_defines(region), "WARPS": int(config["warps"])}
    header = (
        f"/* arbiter lane {lane}: generated, do not edit. f32 attention, one query row per warp.\n"
        f" * region key: {region.key}\n"
        f" * region:     {region.describe()} scale={region.scale!r}\n"
        f" * config:     {config}\n"
        + REBUILD_TEXT
        + " */\n#include \"arb_gpu.h\"\n\n"
    )
    text = (
        header
        + "".join(f"#define {k} {v}\n" for k, v in defines.items())
        + visible_keys("long long", "static __device__ __forceinline__")
        + _KERNEL
        + runner_tail(region, _LAUNCH)
    )
    return KernelSource(lane, region.key, config, "hip", text)
