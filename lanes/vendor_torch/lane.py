"""torch as a GPU lane: cuBLAS / hipBLASLt matmul, eager epilogue, SDPA for attention, on
tensors of the region's storage dtype (float32, float16 or bfloat16), as users call them.

A candidate like any other, so a GPU winner is never slower than the library. torch is an
optional extra (`pip install arbiter-tune[gpu]`); without it, or without a GPU, the lane says so.
Inputs are placed on the device once per timing call; samples come from torch.cuda.Event
pairs around each call (HIP builds of torch map them to hip events).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from arbiter.lane import (
    Artifact,
    AttentionRegion,
    Availability,
    Config,
    Epilogue,
    FusedRegion,
    GatedRegion,
    KernelSource,
    Platform,
    Reduction,
    Region,
    Space,
    Tunable,
    input_shapes,
    validate_inputs,
    validate_output,
)

from .._gpu.detect import gpu_platform

__all__ = ["TorchLane", "lane"]


@lru_cache(maxsize=1)
def _torch() -> Any:
    import torch

    return torch


@lru_cache(maxsize=1)
def _probe() -> tuple[bool, str, Platform | None]:
    if importlib.util.find_spec("torch") is None:
        return False, "torch not installed (optional extra: pip install arbiter-tune[gpu])", None
    try:
        torch = _torch()
    except Exception as e:  # a broken install is a reason, not a crash
        return False, f"torch failed to import: {type(e).__name__}: {e}", None
    platform = Platform.ROCM if getattr(torch.version, "hip", None) else Platform.CUDA
    if not torch.cuda.is_available():
        build = "ROCm" if platform is Platform.ROCM else (
            f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only")
        return False, f"torch {torch.__version__} ({build} build) found, no usable GPU", platform
    name = torch.cuda.get_device_name(0)
    lib = "hipBLASLt/MIOpen" if platform is Platform.ROCM else "cuBLAS"
    return True, f"torch {torch.__version__}, {name} ({lib}, SDPA)", platform


def _pointwise(torch: Any) -> dict[str, Any]:
    f = torch.nn.functional
    return {
        "relu": torch.relu,
        "gelu": lambda x: f.gelu(x, approximate="tanh"),
        "silu": f.silu,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
    }


def _compute(region: Region, a: Mapping[str, Any], tf32: bool) -> Any:
    torch = _torch()
    f = torch.nn.functional
    if isinstance(region, AttentionRegion):
        return _attention(region, a["q"], a["k"], a["v"])
    pw = _pointwise(torch)
    if isinstance(region, GatedRegion):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        gate, up = torch.matmul(a["A"], a["Wg"]), torch.matmul(a["A"], a["Wu"])
        if region.bias:
            gate, up = gate + a["bias_g"], up + a["bias_u"]
        return pw[region.activation.value](gate) * up
    if isinstance(region, FusedRegion):
        torch.backends.cuda.matmul.allow_tf32 = tf32
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
    torch = _torch()
    f = torch.nn.functional
    sdpa = f.scaled_dot_product_attention
    if region.causal_offset is None:
        return sdpa(q, k, v, scale=region.scale)
    if region.causal_offset == 0:  # top-left: what SDPA's is_causal means
        return sdpa(q, k, v, is_causal=True, scale=region.scale)
    # Bottom-right aligned mask; rows that see no key -> 0.
    i = torch.arange(region.seq_q, device=q.device)[:, None]
    j = torch.arange(region.seq_k, device=q.device)[None, :]
    mask = j <= i + region.causal_offset
    return torch.nan_to_num(sdpa(q, k, v, attn_mask=mask, scale=region.scale), nan=0.0)


_TORCH_DTYPES: dict[str, Any] = {}


class _Runner:
    timing_method = "torch_cuda_events"

    def __init__(self, region: Region, tf32: bool) -> None:
        self.region = region
        self.tf32 = tf32
        torch = _torch()
        self.device = torch.device("cuda")
        _TORCH_DTYPES.update(f32=torch.float32, f16=torch.float16, bf16=torch.bfloat16)

    def _place(self, arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
        torch = _torch()
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
        dev = self._place(inputs)
        try:
            torch = _torch()
            y = _compute(self.region, dev, self.tf32).contiguous()
            if self.region.dtype == "bf16":
                np.copyto(out.view(np.int16), y.to(torch.bfloat16).view(torch.int16).cpu().numpy())
            else:
                np.copyto(out, y.to(_TORCH_DTYPES[self.region.dtype]).cpu().numpy())
        except Exception as e:
            raise RuntimeError(f"torch: {type(e).__name__}: {e}") from e

    def time(
        self, input_sets: Sequence[Mapping[str, np.ndarray]], *, warmup: int, repeats: int
    ) -> list[float]:
        if not input_sets or repeats < 1 or warmup < 0:
            raise ValueError("need at least one input set and one repeat")
        torch = _torch()
        sets = [self._place(s) for s in input_sets]
        try:
            for i in range(warmup):
                _compute(self.region, sets[i % len(sets)], self.tf32)
            events = [torch.cuda.Event(enable_timing=True) for _ in range(repeats + 1)]
            events[0].record()
            for r in range(repeats):
                _compute(self.region, sets[(warmup + r) % len(sets)], self.tf32)
                events[r + 1].record()
            events[-1].synchronize()
            return [events[r].elapsed_time(events[r + 1]) * 1e-3 for r in range(repeats)]
        except Exception as e:
            raise RuntimeError(f"torch: {type(e).__name__}: {e}") from e

    def close(self) -> None:
        pass


class TorchLane:
    name = "torch"
    precisions = ("f32", "tf32", "f16", "bf16")
    dtypes = ("f32", "f16", "bf16")
    version = "1"

    @property
    def platform(self) -> Platform:
        found = _probe()[2]
        return found if found is not None else gpu_platform()

    def available(self) -> Availability:
        ok, why, _ = _probe()
        return Availability(ok, why)

    def applies_to(self, region: Region) -> str | None:
        return None

    def space(self, region: Region) -> Space:
        if isinstance(region, (FusedRegion, GatedRegion)) and region.dtype == "f32":
            # TF32 tensor-core matmul: ~3e-4 relative error on unit-variance data, inside the
            # default budget; the search decides whether it is worth it.
            return Space((Tunable("tf32", (False, True), False),))
        return Space()

    def emit(self, region: Region, config: Config) -> KernelSource:
        tf32 = bool(config.get("tf32", False))
        what = f"float32 (tf32={tf32})" if region.dtype == "f32" else region.dtype
        text = f"# torch eager {what}: {region.describe()}\n"
        return KernelSource(self.name, region.key, config, "python", text)

    def build(self, source: KernelSource) -> Artifact:
        version = _torch().__version__ if _probe()[0] else "absent"
        return Artifact(self.name, f"torch-{version}-{source.config.key}", source, None, 0.0, True)

    def runner(self, artifact: Artifact, region: Region) -> _Runner:
        return _Runner(region, bool(artifact.source.config.get("tf32", False)))


lane = TorchLane()
