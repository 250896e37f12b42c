"""bench/dtypes.py without a GPU: the table's rows for a lane with many configs of two paths."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "dtypes.py"


def _module():
    spec = importlib.util.spec_from_file_location("dtypes_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_each_path_after_the_default_is_its_fastest_row():
    rows = [{"lane": "gemv", "config": "cols=4 path=mma split_k=4", "s": 2e-5},
            {"lane": "gemv", "config": "cols=8 path=fma split_k=4", "s": 5e-5},
            {"lane": "gemv", "config": "cols=8 path=fma split_k=8", "s": 4e-5},
            {"lane": "gemv", "config": "cols=4 path=mma split_k=8", "s": 3e-5},
            {"lane": "gemv", "config": "cols=8 path=mma split_k=4", "status": "wrong_result"},
            {"lane": "wmma_gemm", "config": "block_m=64", "s": 5e-4},
            {"lane": "wmma_gemm", "config": "block_m=128", "s": 4e-4}]
    got = _module().fastest_per_path(rows)
    assert [r["config"] for r in got] == [
        "cols=4 path=mma split_k=4", "cols=8 path=fma split_k=8", "cols=4 path=mma split_k=8",
        "block_m=64", "block_m=128"]
    assert got[0]["lane"] == "gemv"
    assert got[1]["lane"] == "gemv (fma), fastest of 2"
    assert got[2]["lane"].startswith("gemv (mma), fastest of 2 (1 not timed: wrong_result")
