"""The region's PyTorch function under `torch.compile`, and its runner.

The build (`build.py`, in a process of its own) and the trial worker both call `compiled`: the
build pays for the compile and times it; the worker compiles the same function again, which
Inductor answers from its on-disk caches (the FX graph cache, the kernels it built, the choices
max-autotune made) in the folder the build wrote, so what the worker times is the code the
build made.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any

from arbiter.lane import Config, Region, input_shapes

from .._torch_region import Tensors, TorchRunner, compute, set_tf32, torch_module

__all__ = ["InductorRunner", "compiled"]


def _region_graph(region: Region) -> Callable[..., Any]:
    names = tuple(input_shapes(region))

    def region_graph(*tensors: Any) -> Any:
        return compute(region, dict(zip(names, tensors)))

    # Dynamo keeps its compiled entries, and its limit of 8 recompiles (past which a fullgraph
    # compile fails), on the code object: with one code object per region, the ninth region a
    # worker loads compiles like the first.
    code = region_graph.__code__.replace()
    return types.FunctionType(code, region_graph.__globals__, region_graph.__name__, None,
                              region_graph.__closure__)


def compiled(region: Region, config: Config, device: str, inductor_cache: str,
             compile_pool: bool = False) -> Callable[[Tensors], Any]:
    """`torch.compile` of the region's function with the config's mode, static shapes, one
    graph (a graph break is an error, not eager pieces); compiled on its first call.

    `compile_pool`: let Inductor start its pool of compile processes (torch's default), which
    only Triton uses: a GPU build's. Elsewhere (the CPU's C++, or a worker whose compile comes
    from the cache) the pool would only import torch again in processes that run beside the
    timing."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache  # read by Inductor at each lookup
    if not compile_pool:
        # read when Inductor's config is first imported (by the first torch.compile of this
        # process); every call in a process passes the same value, and it is not in the cache keys
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    torch = torch_module()
    names = tuple(input_shapes(region))
    tf32 = bool(config.get("tf32", False))
    fn = torch.compile(_region_graph(region), mode=config["mode"], dynamic=False,
                       fullgraph=True)

    def call(tensors: Tensors) -> Any:
        if device != "cpu":
            set_tf32(tf32)  # (read by Inductor when it compiles, and by cuBLAS at each call)
        return fn(*(tensors[n] for n in names))

    return call


class InductorRunner(TorchRunner):
    """A `TorchRunner` whose first call compiles (from the build's caches), so no sample holds
    a compile."""

    name = "inductor"

    def __init__(self, region: Region, config: Config, device: str, inductor_cache: str) -> None:
        super().__init__(region, compiled(region, config, device, inductor_cache), device)
        self.warm = False
