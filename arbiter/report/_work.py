"""What a region costs: FLOPs and bytes per call, and the ceilings it is measured against.

Bytes count every input read once and the output written once, in the region's storage dtype:
the least traffic any implementation can have, so achieved GB/s is a lower bound on what the
kernel moved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..region import (
    AttentionRegion,
    FusedRegion,
    GatedRegion,
    Region,
    RowwiseRegion,
    input_shapes,
    numpy_dtype,
    output_shape,
    region_from_canonical,
)

__all__ = [
    "BANDWIDTH",
    "MATMUL",
    "REFERENCE_MODELS",
    "ReferenceModel",
    "Work",
    "region_from_canonical",
    "work",
]

# Ceiling names as stored in the `ceilings` table (values in B/s and FLOP/s).
BANDWIDTH = "copy_bandwidth"
MATMUL = "matmul_f32"


@dataclass(frozen=True)
class Work:
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """FLOP per byte; 0 for bytes-only regions."""
        return self.flops / self.bytes if self.bytes else 0.0


def _elements(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def work(region: Region) -> Work:
    """FLOPs and minimum bytes of one call.

    fused: 2*M*N*K (the matmul; the epilogue is noise beside it); gated: 4*M*N*K (two
    matmuls); rowwise: bytes only;
    attention: 4*B*H*Sq*Sk*D (QK^T and PV), halved when causal.
    """
    moved = sum(_elements(s) for s in input_shapes(region).values())
    moved += _elements(output_shape(region))
    nbytes = float(moved * numpy_dtype(region.dtype).itemsize)
    if isinstance(region, FusedRegion):
        return Work(2.0 * region.M * region.N * region.K, nbytes)
    if isinstance(region, GatedRegion):
        return Work(4.0 * region.M * region.N * region.K, nbytes)
    if isinstance(region, RowwiseRegion):
        return Work(0.0, nbytes)
    if isinstance(region, AttentionRegion):
        r = region
        flops = 4.0 * r.batch * r.heads * r.seq_q * r.seq_k * r.head_dim
        return Work(flops / 2 if r.causal else flops, nbytes)
    raise TypeError(f"not a region: {region!r}")


@dataclass(frozen=True)
class ReferenceModel:
    """Published peaks of a machine, for comparing against what was measured."""

    name: str
    bandwidth: float  # B/s
    flops: dict[str, float]  # precision -> FLOP/s
    source: str

    @property
    def matmul(self) -> float:
        return self.flops["f32"]


REFERENCE_MODELS: dict[str, ReferenceModel] = {
    "gfx1151": ReferenceModel(
        name="gfx1151",
        bandwidth=256e9,
        flops={"f16": 59.4e12, "bf16": 59.4e12, "f32": 29.7e12},
        source="AMD published peaks: Strix Halo (40 CU RDNA 3.5) WMMA f16 59.4 TFLOPS, "
        "f32 29.7 TFLOPS, LPDDR5X-8000 256 GB/s",
    ),
}
