"""Regions as PyTorch functions, and the runner that feeds them: one definition of the chain
semantics for every lane built on torch (the eager `torch` lane, and the `inductor` lane that
hands the same function to `torch.compile`).

`compute` is pure tensor code with no side effects, so Dynamo captures it whole (one graph, no
breaks). torch itself is imported on first use, never at module import: CI has no torch, and
`arbiter lanes` must stay fast without it.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from arbiter.check import budget_of
from arbiter.lane import (
    HOST_METHOD,
    AttentionRegion,
    Epilogue,
    FusedRegion,
    GatedRegion,
    Platform,
    Reduction,
    Region,
    Tunable,
    input_shapes,
    time_host,
    validate_inputs,
    validate_output,
)

__all__ = ["TF32_BUDGET", "TorchRunner", "compute", "gpu_build", "region_of", "set_tf32",
           "storage_dtype", "tf32_tunable", "torch_module", "usable_torch"]

Tensors = Mapping[str, Any]


def torch_module() -> Any:
    """torch, imported on first use (later calls are a lookup in sys.modules, which Dynamo
    traces through, unlike a cached function)."""
    import torch

    return torch


def region_of(text: str) -> dict:
    """The region's canonical form, which the torch-based lanes' sources (`emit`) carry as
    their last line for the build to read."""
    return dict(json.loads(text.rstrip("\n").rsplit("\n", 1)[-1]))


def usable_torch(extra: str) -> tuple[Any, str | None]:
    """(torch, None), or (None, why not): not installed (naming the optional extra `extra`
    that brings it) or failing to import. Whether it finds a GPU is the caller's question."""
    if importlib.util.find_spec("torch") is None:
        return None, f"torch not installed (optional extra: pip install arbiter-tune[{extra}])"
    try:
        return torch_module(), None
    except Exception as e:  # a broken install is a reason, not a crash
        return None, f"torch failed to import: {type(e).__name__}: {e}"


def gpu_build(torch: Any) -> Platform:
    """The GPU platform this torch is built for: ROCm for a HIP build, else CUDA."""
    return Platform.ROCM if getattr(torch.version, "hip", None) else Platform.CUDA


def set_tf32(allowed: bool) -> None:
    """TF32 tensor-core matmuls for float32 on CUDA (a process-wide switch in torch)."""
    torch_module().backends.cuda.matmul.allow_tf32 = allowed


# TF32 matmuls err by about 2e-4 of the norm on unit-variance data (2.1e-4 measured on the
# H200 at 4096x4096x1024): from this budget on (the f32 default) they are the default, as
# 16-bit operands are wmma_gemm's. A sweep of a few trials over many lanes measures little but
# the defaults, and the fast config is the one a lane must not leave unmeasured.
TF32_BUDGET = 1e-3


def tf32_tunable(region: Region) -> Tunable:
    """The `tf32` tunable of a float32 matmul region: on by default where the region's budget
    admits TF32's error."""
    return Tunable("tf32", (False, True), budget_of(region) >= TF32_BUDGET)


def _pointwise(torch: Any) -> dict[str, Callable[[Any], Any]]:
    f = torch.nn.functional
    return {
        "relu": torch.relu,
        "gelu": lambda x: f.gelu(x, approximate="tanh"),
        "silu": f.silu,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
    }


def compute(region: Region, a: Tensors) -> Any:
    """The region on tensors of its storage dtype, as a user would write it in PyTorch:
    prologue -> matmul -> epilogue -> residual -> row reduction; gated feed-forward; attention
    through SDPA."""
    torch = torch_module()
    f = torch.nn.functional
    if isinstance(region, AttentionRegion):
        return _attention(region, a["q"], a["k"], a["v"])
    pw = _pointwise(torch)
    if isinstance(region, GatedRegion):
        gate, up = torch.matmul(a["A"], a["Wg"]), torch.matmul(a["A"], a["Wu"])
        if region.bias:
            gate, up = gate + a["bias_g"], up + a["bias_u"]
        return pw[region.activation.value](gate) * up
    if isinstance(region, FusedRegion):
        x = a["A"]
        for pre in region.prologue:
            x = pw[pre.value](x)
        x = torch.matmul(x, a["B"])
    else:
        x = a["X"]
    for op in region.epilogue:
        x = x + a["bias"] if op is Epilogue.BIAS else pw[op.value](x)
    if region.residual:
        x = x + a["residual"]
    if region.reduction is Reduction.SOFTMAX:
        x = torch.softmax(x, dim=-1)
    elif region.reduction is Reduction.RMSNORM:
        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + region.eps)
    elif region.reduction is Reduction.LAYER_NORM:
        x = f.layer_norm(x, (region.N,), eps=region.eps)
    return x


def _attention(region: AttentionRegion, q: Any, k: Any, v: Any) -> Any:
    torch = torch_module()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if region.causal_offset is None:
        return sdpa(q, k, v, scale=region.scale)
    if region.causal_offset == 0:  # top-left: what SDPA's is_causal means
        return sdpa(q, k, v, is_causal=True, scale=region.scale)
    # Bottom-right aligned mask; rows that see no key -> 0.
    i = torch.arange(region.seq_q, device=q.device)[:, None]
    j = torch.arange(region.seq_k, device=q.device)[None, :]
    mask = j <= i + region.causal_offset
    return torch.nan_to_num(sdpa(q, k, v, attn_mask=mask, scale=region.scale), nan=0.0)


def storage_dtype(dtype: str) -> Any:
    """The torch dtype of a region's storage dtype name."""
    torch = torch_module()
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]


class TorchRunner:
    """Runs `call(tensors) -> tensor` for `region` on `device` ("cpu" or "cuda"; ROCm builds of
    torch name their GPU "cuda" too). Samples come from torch.cuda.Event pairs around each call
    on a GPU (hip events under ROCm), from the host clock on the CPU.

    A subclass whose first call compiles (torch.compile, Triton's JIT) sets `warm` False:
    `time` then makes that call, untimed, before its samples when no `run` came first. Errors
    are named after `name`."""

    name = "torch"
    warm = True

    def __init__(self, region: Region, call: Callable[[Tensors], Any], device: str) -> None:
        self.region = region
        self.call = call
        torch = torch_module()
        self.device = torch.device(device)
        self.gpu = self.device.type != "cpu"
        self.timing_method = "torch_cuda_events" if self.gpu else HOST_METHOD

    def place(self, arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """Validated inputs as tensors on the device, in the region's storage dtype."""
        torch = torch_module()
        a = validate_inputs(self.region, arrays)
        # a writable host copy first: the checker's cached inputs are read-only, and torch
        # warns on (and may not honour) read-only arrays; bf16 crosses as its bits (torch
        # does not know ml_dtypes)
        if self.region.dtype == "bf16":
            return {n: torch.from_numpy(np.array(a[n]).view(np.int16)).to(self.device)
                    .view(torch.bfloat16) for n in input_shapes(self.region)}
        return {n: torch.from_numpy(np.array(a[n])).to(self.device)
                for n in input_shapes(self.region)}

    def run(self, inputs: Mapping[str, np.ndarray], out: np.ndarray) -> None:
        validate_output(self.region, out)
        dev = self.place(inputs)
        try:
            torch = torch_module()
            y = self.call(dev).to(storage_dtype(self.region.dtype)).contiguous().cpu()
            if self.region.dtype == "bf16":
                np.copyto(out.view(np.int16), y.view(torch.int16).numpy())
            else:
                np.copyto(out, y.numpy())
        except Exception as e:
            raise RuntimeError(f"{self.name}: {type(e).__name__}: {e}") from e
        self.warm = True

    def time(
        self, input_sets: Sequence[Mapping[str, np.ndarray]], *, warmup: int, repeats: int
    ) -> list[float]:
        if not input_sets or repeats < 1 or warmup < 0:
            raise ValueError("need at least one input set and one repeat")
        sets = [self.place(s) for s in input_sets]
        try:
            if not self.warm:  # the compile
                self.call(sets[0])
                self.warm = True
            if not self.gpu:
                return time_host(lambda i: self.call(sets[i]), len(sets),
                                 warmup=warmup, repeats=repeats)
            torch = torch_module()
            for i in range(warmup):
                self.call(sets[i % len(sets)])
            events = [torch.cuda.Event(enable_timing=True) for _ in range(repeats + 1)]
            events[0].record()
            for r in range(repeats):
                self.call(sets[(warmup + r) % len(sets)])
                events[r + 1].record()
            events[-1].synchronize()
            return [events[r].elapsed_time(events[r + 1]) * 1e-3 for r in range(repeats)]
        except Exception as e:
            raise RuntimeError(f"{self.name}: {type(e).__name__}: {e}") from e

    def close(self) -> None:
        pass
