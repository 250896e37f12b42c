"""Plain C attention for the x86 C lane: the correctness-first candidate on CPU. Computes in
f32 whatever the storage: q, k and v convert as they are read, each output value is rounded
once (emit.py's `arb_load` / `arb_store`).

One query row per OpenMP iteration; keys are visited in blocks of KEY_BLOCK with an online
softmax (running max `m`, running sum `l`, the output row rescaled once per block), so a row
needs O(head_dim + KEY_BLOCK) floats of stack and one pass over K and V. Causal masking is
bottom-right aligned (key j visible to query i iff j <= i + seq_k - seq_q) by shortening the
key range; a row that sees no key writes zeros.

Same library ABI as the rest of the lane (see emit.py): `arbiter_workspace_floats` and
`arbiter_run(inputs, out, work)`, inputs in q, k, v order.
"""

from __future__ import annotations

from arbiter.lane import AttentionRegion, Config, EmitError, KernelSource, Region, Tunable

from .._scalar_body import attention_defines, visible_keys
from .emit import storage_prelude

__all__ = ["attention_tunables", "emit_attention"]

_KERNEL_HEAD = r"""
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>
"""

_KERNEL = r"""
long arbiter_workspace_floats(void) { return 1; }

static void attend_row(const arb_store_t* restrict qs, const arb_store_t* restrict kb,
                       const arb_store_t* restrict vb, arb_store_t* restrict orow, long nkeys)
{
    float qr[D];
    float acc[D];
    float s[KEY_BLOCK];
    float m = -INFINITY, l = 0.0f;
    #pragma omp simd
    for (long d = 0; d < D; ++d) qr[d] = arb_load(qs[d]);
    for (long d = 0; d < D; ++d) acc[d] = 0.0f;
    for (long j0 = 0; j0 < nkeys; j0 += KEY_BLOCK) {
        const long nb = nkeys - j0 < KEY_BLOCK ? nkeys - j0 : KEY_BLOCK;
        float bm = -INFINITY;
        for (long j = 0; j < nb; ++j) {
            const arb_store_t* kr = kb + (j0 + j) * D;
            float dot = 0.0f;
            #pragma omp simd reduction(+:dot)
            for (long d = 0; d < D; ++d) dot += qr[d] * arb_load(kr[d]);
            s[j] = dot * SCALE;
            bm = s[j] > bm ? s[j] : bm;
        }
        const float mnew = bm > m ? bm : m;   /* finite: the block has at least one key */
        const float alpha = expf(m - mnew);   /* m = -inf on the first block -> 0 */
        l *= alpha;
        #pragma omp simd
        for (long d = 0; d < D; ++d) acc[d] *= alpha;
        for (long j = 0; j < nb; ++j) {
            const float p = expf(s[j] - mnew);
            const arb_store_t* vr = vb + (j0 + j) * D;
            l += p;
            #pragma omp simd
            for (long d = 0; d < D; ++d) acc[d] += p * arb_load(vr[d]);
        }
        m = mnew;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;  /* no visible key -> zeros */
    #pragma omp simd
    for (long d = 0; d < D; ++d) orow[d] = arb_store(acc[d] * inv);
}

int arbiter_run(const arb_store_t* const* in, arb_store_t* out, float* work)
{
    (void)work;
    const arb_store_t* q = in[0];
    const arb_store_t* k = in[1];
    const arb_store_t* v = in[2];
    #pragma omp parallel for schedule(SCHEDULE) num_threads(THREADS)
    for (long r = 0; r < BH * SQ; ++r) {
        const long bh = r / SQ, i = r % SQ;
        attend_row(q + r * D, k + bh * SK * D, v + bh * SK * D, out + r * D, visible_keys(i));
    }
    return 0;
}
"""


def attention_tunables() -> tuple[Tunable, ...]:
    """Attention-only knobs; the lane adds its common ones (threads, vec, fast_math)."""
    return (
        Tunable("key_block", (32, 128, 512), 128),
        Tunable("schedule", ("static", "dynamic"), "dynamic"),
    )


def emit_attention(region: Region, config: Config, header: str,
                   options: tuple[str, ...]) -> KernelSource:
    if not isinstance(region, AttentionRegion):
        raise EmitError(f"x86_c attention: not an attention region ({region.kind})")
    schedule = {"static": "static", "dynamic": "dynamic, 8"}[config["schedule"]]
    defines = {
        **attention_defines(region),
        "KEY_BLOCK": int(config["key_block"]),
        "THREADS": int(config["threads"]),
        "SCHEDULE": schedule,
    }
    text = (
        header
        + "".join(f"#define {k} {v}\n" for k, v in defines.items())
        + _KERNEL_HEAD
        + storage_prelude(region.dtype)
        + visible_keys("long")
        + _KERNEL
    )
    return KernelSource("x86_c", region.key, config, "c", text, options)
