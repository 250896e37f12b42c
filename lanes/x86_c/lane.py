"""The x86 C lane: generated C (shared row programs + blocked GEMM), gcc, OpenMP, ctypes."""

from __future__ import annotations

from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from arbiter.lane import (
    Artifact,
    AttentionRegion,
    Availability,
    Config,
    FusedRegion,
    GatedRegion,
    KernelSource,
    Platform,
    Region,
    Rule,
    Space,
    Tunable,
    settings,
    usable_cores,
)

from . import build as _build
from .attention import attention_tunables, emit_attention
from .emit import _header, compile_options, parse_tile
from .emit import emit as _emit

if TYPE_CHECKING:
    from .run import CRunner

__all__ = ["X86CLane", "lane"]

# Micro-tiles (rows x columns) worth trying; NR is a multiple of 16 so one row is whole
# 512-bit vectors (or pairs of 256-bit ones).
TILES = ("6x16", "8x16", "6x32", "8x32", "12x32")


@cache
def _cpu_flags() -> frozenset[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _thread_choices() -> tuple[int, ...]:
    # the CPUs the sweep may use: under `taskset -c 2,3` on a 16-core host, 16 threads would
    # crowd 2 cores (192 of the 321 configs of that host's exhaustive sweep were such)
    n = usable_cores()
    out = []
    t = 1
    while t < n:
        out.append(t)
        t *= 2
    out.append(n)
    return tuple(out)


def _vector_registers() -> int:
    return 32 if "avx512f" in _cpu_flags() else 16


def _vec_choices() -> tuple[int, ...]:
    return (256, 512) if "avx512f" in _cpu_flags() else (256,)


def _tile_fits(values) -> bool:
    mr, nr = parse_tile(values["tile"])
    lanes = values["vec"] // 32
    return nr % lanes == 0 and mr * nr // lanes + nr // lanes + 1 <= _vector_registers()


class X86CLane:
    name = "x86_c"
    platform = Platform.CPU
    precisions = ("f32",)
    dtypes = ("f32", "f16", "bf16")  # storage; the generated C computes in f32 for all three
    version = "2"

    def available(self) -> Availability:
        ok, why = _build.probe(settings().cc)
        return Availability(ok, why)

    def applies_to(self, region: Region) -> str | None:
        return None

    def space(self, region: Region) -> Space:
        return _space(region)

    def emit(self, region: Region, config: Config) -> KernelSource:
        if isinstance(region, AttentionRegion):
            return emit_attention(region, config, _header(region, config),
                                  compile_options(config))
        return _emit(region, config)

    def build(self, source: KernelSource) -> Artifact:
        return _build.build(source, self.version)

    def runner(self, artifact: Artifact, region: Region) -> CRunner:
        from .run import CRunner  # numpy: not needed for a build

        return CRunner(artifact, region)


@lru_cache(maxsize=64)
def _space(region: Region) -> Space:
    """A region's space, made once (a worker asks for it several times a check)."""
    threads = _thread_choices()
    vec = _vec_choices()
    common = (
        Tunable("threads", threads, threads[-1]),
        Tunable("vec", vec, vec[-1]),
        Tunable("fast_math", (False, True), False),
    )
    if isinstance(region, AttentionRegion):
        return Space(common + attention_tunables(), ())
    if isinstance(region, (FusedRegion, GatedRegion)):
        # tiles no vector width here can hold (12x32 without AVX-512) are not offered at all
        tiles = tuple(t for t in TILES if any(_tile_fits({"tile": t, "vec": v}) for v in vec))
        tunables = common + (
            Tunable("tile", tiles, "12x32" if 512 in vec else "6x16"),
            Tunable("mc", (48, 96, 192), 96),
            Tunable("kc", (128, 256, 512), 256),
        )
        rules = (
            Rule("tile: NR must be whole vectors and MR*NR accumulators plus one row of B "
                 "must fit the vector register file", _tile_fits),
            Rule("mc must be a multiple of the tile's MR",
                 lambda v: v["mc"] % parse_tile(v["tile"])[0] == 0),
        )
        return Space(tunables, rules)
    return Space(
        common + (
            Tunable("row_block", (1, 4, 16, 64), 16),
            Tunable("stream", (False, True), True),
            Tunable("schedule", ("static", "dynamic"), "dynamic"),
        ),
        (),
    )


lane = X86CLane()
