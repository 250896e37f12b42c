"""The runner: the plan's launches on torch tensors (a GPU's, or the CPU's under Triton's
interpreter), fed and timed by `TorchRunner` (device events on a GPU)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from arbiter.lane import Config, Region, settings

from .._torch_region import Tensors, TorchRunner, storage_dtype, torch_module
from .plan import BUFFER, buffers, plan

__all__ = ["TritonRunner", "kernels_module"]

INTERPRETER_METHOD = "triton_interpreter_host_clock"  # (records say what the samples are)


def kernels_module(interpret: bool) -> Any:
    """The templates, compiled by Triton's JIT or run by its interpreter: fixed for the process
    when triton is first imported (TRITON_INTERPRET), so a process that already imported it
    the other way cannot switch."""
    if interpret and "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
    from . import kernels

    interpreted = type(kernels.rowwise).__name__ == "InterpretedFunction"
    if interpreted != interpret:
        want = "its interpreter" if interpret else "compiled kernels"
        raise RuntimeError(f"triton: this process imported triton before it could be set to "
                           f"{want} (TRITON_INTERPRET is read at triton's first import)")
    return kernels


class TritonRunner(TorchRunner):
    """Launches the plan; the output (and the float32 rows of an unfused reduction) live on
    the device for the runner's life. `run` fills the output with NaN before launching, so an
    element no kernel writes fails the check; the first call compiles (Triton's JIT)."""

    name = "triton"

    def __init__(self, region: Region, config: Config, interpret: bool) -> None:
        kernels = kernels_module(interpret)
        self.launches = plan(region, config, interpret)
        self.fns = [getattr(kernels, launch.kernel) for launch in self.launches]
        self.made: dict[str, Any] = {}
        super().__init__(region, self._call, "cpu" if interpret else "cuda")
        if interpret:
            self.timing_method = INTERPRETER_METHOD
        else:
            os.environ.setdefault("TRITON_CACHE_DIR", str(settings().cache_dir / "triton"))
        self.warm = False

    def _buffers(self) -> dict[str, Any]:
        if not self.made:
            torch = torch_module()
            self.made = {name: torch.empty(shape, dtype=storage_dtype(dtype), device=self.device)
                         for name, (shape, dtype) in buffers(self.region, self.launches).items()}
        return self.made

    def _call(self, tensors: Tensors) -> Any:
        bufs = {**tensors, **self._buffers()}
        for launch, fn in zip(self.launches, self.fns):
            values = [bufs[v] if kind == BUFFER else v for _, kind, v in launch.args]
            fn[launch.grid](*values, **dict(launch.constexprs), **launch.options())
        return bufs["out"]

    def run(self, inputs: Mapping[str, np.ndarray], out: np.ndarray) -> None:
        self._buffers()["out"].fill_(float("nan"))
        super().run(inputs, out)
