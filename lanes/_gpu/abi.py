"""Generated text of the runner ABI (arb_runner.h) that every GPU lane's source defines.

The size table comes from `arbiter.lane.input_shapes` / `output_shape`, the same functions
the ctypes runner checks the loaded library against, so the two cannot disagree.
"""

from __future__ import annotations

import math

from arbiter.lane import Region, input_shapes, output_shape

__all__ = ["REBUILD", "REBUILD_TEXT", "runner_table", "runner_tail", "store_defines"]

# The header comment's lines saying how to rebuild a generated GPU source by hand, for both
# targets (the text is the same; the file name only tells each compiler the language).
REBUILD = (
    " * rebuild:    nvcc -x cu -arch=sm_90 -O3 -shared -Xcompiler -fPIC -I lanes/_gpu "
    "kernel.cu -o kernel.so",
    " *         or  hipcc --offload-arch=gfx1151 -O3 -fPIC -shared -I lanes/_gpu "
    "kernel.hip -o kernel.so",
)
REBUILD_TEXT = "".join(f"{line}\n" for line in REBUILD)


def store_defines(region: Region) -> str:
    """The line choosing the storage type `arb_store_t` (arb_gpu.h): it goes before the
    source's first include of arb_gpu.h."""
    return {"f32": "", "f16": "#define ARB_STORE_F16 1\n",
            "bf16": "#define ARB_STORE_BF16 1\n"}[region.dtype]


def runner_table(region: Region) -> str:
    """`ARB_N_INPUTS`, `arb_input_elems` (input_shapes order) and `arb_output_elems`."""
    shapes = input_shapes(region)
    elems = ", ".join(f"{math.prod(s)}LL" for s in shapes.values())
    return (
        f"/* Inputs in arbiter.input_shapes order: {', '.join(shapes)}. */\n"
        f"#define ARB_N_INPUTS {len(shapes)}\n"
        f"static const long long arb_input_elems[ARB_N_INPUTS] = {{{elems}}};\n"
        f"static const long long arb_output_elems = {math.prod(output_shape(region))}LL;\n"
    )


def runner_tail(region: Region, launches: list[str]) -> str:
    """The size table, an `arb_launch` running `launches` (each line enqueues on `stream`),
    and the include of arb_runner.h: everything after a lane's kernels."""
    body = "\n".join(f"    {ln}" for ln in launches)
    return (
        "\n" + runner_table(region) + "\n"
        "static hipError_t arb_launch(const arb_store_t* const* in, arb_store_t* out,\n"
        "                             hipStream_t stream)\n"
        f"{{\n{body}\n    return hipGetLastError();\n}}\n\n#include \"arb_runner.h\"\n"
    )
