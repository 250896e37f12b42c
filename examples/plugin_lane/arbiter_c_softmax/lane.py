"""The lane: what it applies to, its tunables, the C it emits, the build and the runner."""

from __future__ import annotations

import ctypes
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from arbiter.lane import (
    HOST_METHOD,
    Artifact,
    Availability,
    Config,
    KernelSource,
    Platform,
    Reduction,
    Region,
    RowwiseRegion,
    Rule,
    Space,
    Tunable,
    build_key,
    cached_build,
    compiler_identity,
    output_shape,
    run_tool,
    settings,
    time_host,
    validate_inputs,
    validate_output,
)

FLAGS = ("-O3", "-march=native", "-shared", "-fPIC", "-std=c11")

SOURCE = """\
/* c_softmax: region {key}, config {config} */
#include <math.h>

#define ROWS {rows}
#define COLS {cols}

static void softmax_row(const float *x, float *out) {{
    float top = -INFINITY;
    for (long j = 0; j < COLS; j++)
        top = x[j] > top ? x[j] : top;
    float sum = 0.0f;
#pragma GCC unroll {unroll}
    for (long j = 0; j < COLS; j++) {{
        out[j] = expf(x[j] - top);
        sum += out[j];
    }}
    const float scale = 1.0f / sum;
    for (long j = 0; j < COLS; j++)
        out[j] *= scale;
}}

int arbiter_run(const float *x, float *out) {{
    for (long i = 0; i < ROWS; i++)
        softmax_row(x + i * COLS, out + i * COLS);
    return 0;
}}
"""


class CSoftmax:
    name = "c_softmax"
    platform = Platform.CPU
    precisions = ("f32",)
    dtypes = ("f32",)
    version = "1"

    def available(self) -> Availability:
        cc = settings().cc
        if shutil.which(cc) is None:
            return Availability(False, f"C compiler {cc!r} not found (set ARBITER_CC)")
        return Availability(True)

    def applies_to(self, region: Region) -> str | None:
        if not isinstance(region, RowwiseRegion) or region.reduction is not Reduction.SOFTMAX:
            return "c_softmax computes rowwise softmax only"
        if region.epilogue or region.residual:
            return "c_softmax takes no epilogue or residual"
        return None

    def space(self, region: Region) -> Space:
        assert isinstance(region, RowwiseRegion)
        return Space(
            (Tunable("unroll", (1, 4, 8), 1), Tunable("fast_math", (False, True), False)),
            (Rule("unroll at most the row length", lambda v: v["unroll"] <= region.N),),
        )

    def emit(self, region: Region, config: Config) -> KernelSource:
        assert isinstance(region, RowwiseRegion)
        text = SOURCE.format(key=region.key, config=config, rows=region.M, cols=region.N,
                             unroll=config["unroll"])
        options = ("-ffast-math",) if config["fast_math"] else ()
        return KernelSource(self.name, region.key, config, "c", text, options)

    def build(self, source: KernelSource) -> Artifact:
        cc = settings().cc
        flags = (*FLAGS, *source.options)
        key = build_key(source=source.text, compiler=cc, flags=flags,
                        arch=compiler_identity(cc), lane=f"{self.name}-{self.version}")

        def compile_to(tmp: Path, target: Path) -> tuple[int, str]:
            src = tmp / "kernel.c"
            src.write_text(source.text)
            return run_tool([cc, *flags, str(src), "-o", str(target), "-lm"], cwd=str(tmp))

        path, seconds, cached, log = cached_build(key, ".so", compile_to)
        return Artifact(self.name, key, source, str(path), seconds, cached, log)

    def runner(self, artifact: Artifact, region: Region) -> SoftmaxRunner:
        return SoftmaxRunner(artifact, region)


class SoftmaxRunner:
    timing_method = HOST_METHOD

    def __init__(self, artifact: Artifact, region: Region) -> None:
        if artifact.path is None:
            raise RuntimeError("c_softmax: the artifact has no library")
        self.region = region
        self._run = ctypes.CDLL(artifact.path).arbiter_run
        self._run.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self._run.restype = ctypes.c_int

    def _call(self, x: np.ndarray, out: np.ndarray) -> None:
        if self._run is None:
            raise RuntimeError("runner is closed")
        if self._run(x.ctypes.data, out.ctypes.data) != 0:
            raise RuntimeError("c_softmax kernel failed")

    def run(self, inputs: Mapping[str, np.ndarray], out: np.ndarray) -> None:
        validate_output(self.region, out)
        self._call(validate_inputs(self.region, inputs)["X"], out)

    def time(self, input_sets: Sequence[Mapping[str, np.ndarray]], *, warmup: int,
             repeats: int) -> list[float]:
        xs = [validate_inputs(self.region, s)["X"] for s in input_sets]
        outs = [np.empty(output_shape(self.region), np.float32) for _ in xs]
        return time_host(lambda i: self._call(xs[i], outs[i]), len(xs), warmup=warmup,
                         repeats=repeats)

    def close(self) -> None:
        self._run = None
