"""The real ROCm artifact, no GPU needed: each GPU lane's default config links into the shared
object a ROCm machine would load (host runner + gfx1151 code object), exports the runner ABI,
embeds a scratch-free gfx1151 code object (read back with the LLVM offload tools) and loads
with dlopen against Debian's libamdhip64. Nothing here launches a kernel.

Also the ROCm runner's clock: when hipEvent times are unusable it times with the wall clock
(`choose_clock`, and GpuRunner over a fake library giving synthetic event times)."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import logging
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from arbiter.lanes._gpu import build as gpu_build
from arbiter.lanes._gpu.build import rocm_shared_object
from arbiter.lanes._gpu.detect import Toolchain, toolchain
from arbiter.lanes._gpu.runner import choose_clock

from arbiter import GatedRegion, RowwiseRegion
from arbiter.lane import Platform, input_shapes, numpy_dtype, output_shape, refusal
from arbiter.region import load_spec
from tests.gate import marked

ROOT = Path(__file__).resolve().parents[2]
REGIONS, INFERENCE = ROOT / "examples" / "regions.toml", ROOT / "examples" / "inference.toml"
TARGET = "hipv4-amdgcn-amd-amdhsa--gfx1151"
ABI = ("arbiter_prepare", "arbiter_run", "arbiter_time", "arbiter_release", "arbiter_last_error",
       "arbiter_n_inputs", "arbiter_input_elems", "arbiter_output_elems", "arbiter_elem_bytes",
       "arbiter_read_input")
# A rowwise region with a block reduction (the example's rowwise chain has none) and an f32
# gated region (hip_scalar computes f32 storage only; the example's is bf16).
LAYER_NORM = RowwiseRegion(64, 1000, name="row_layer_norm", residual=True,
                           reduction="layer_norm")
SWIGLU = GatedRegion(128, 256, 256, name="swiglu")
OWN = {r.name: r for r in (LAYER_NORM, SWIGLU)}

# (lane, spec file or None, region): every GPU lane's default config, f32 and bf16 storage
# (hip_scalar is f32 only), each kernel family (GEMM, gated, rows, attention, decode, gemv).
VARIANTS = (
    ("hip_scalar", REGIONS, "mm_relu"),
    ("hip_scalar", REGIONS, "row_gelu_residual"),
    ("hip_scalar", REGIONS, "attn_causal"),
    ("hip_scalar", None, SWIGLU.name),
    ("hip_scalar", None, LAYER_NORM.name),
    ("wmma_gemm", REGIONS, "mm_bias_softmax"),
    ("wmma_gemm", INFERENCE, "decode_proj_gelu"),
    ("fa2", REGIONS, "attn_causal"),
    ("fa2", INFERENCE, "prefill_attn"),
    ("decode", INFERENCE, "decode_attn"),
    ("gemv", INFERENCE, "decode_proj_gelu"),
)
IDS = [f"{lane}-{region}" for lane, _, region in VARIANTS]
FIRST_OF_EACH_LANE = {next(i for i in IDS if i.startswith(f"{lane}-")) for lane, _, _ in VARIANTS}


def _tool(name: str) -> str | None:
    return next((t for t in (f"{name}-19", name) if shutil.which(t)), None)


TOOLS = {t: _tool(t) for t in ("llvm-nm", "llvm-objcopy", "llvm-readelf", "clang-offload-bundler")}
_missing = [t for t, path in TOOLS.items() if path is None]
if toolchain().clang is None and toolchain().hipcc is None:
    _missing.append("clang++-19 or hipcc")
if ctypes.util.find_library("amdhip64") is None:
    _missing.append("libamdhip64 (libamdhip64-dev)")
needs_tools = pytest.mark.skipif(bool(_missing), reason=f"missing: {', '.join(_missing)} "
                                                        "(scripts/setup.sh installs them)")


def _region(spec: Path | None, name: str):
    return OWN[name] if spec is None else load_spec(spec).get(name)


def _tool_out(*argv: str) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{argv}: {p.stderr}"
    return p.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Variant id -> (region, path of its .so), built when a test first asks for it."""
    out = tmp_path_factory.mktemp("rocm-so")
    done: dict[str, tuple] = {}

    def get(variant: str):
        if variant not in done:
            lane_name, spec, name = VARIANTS[IDS.index(variant)]
            lane = importlib.import_module(f"arbiter.lanes.{lane_name}").lane
            region = _region(spec, name)
            assert refusal(lane, region) is None, (lane_name, name)
            source = lane.emit(region, lane.space(region).complete({}))
            path = out / f"{variant}.so"
            rocm_shared_object(source.text, path, "gfx1151", source.options)
            done[variant] = region, path
        return done[variant]

    return get


def _code_object(so: Path) -> tuple[list[str], Path]:
    """The offload bundle's targets, and the gfx1151 code object unbundled beside `so`."""
    fatbin, co = so.with_suffix(".fatbin"), so.with_suffix(".gfx1151.co")
    _tool_out(TOOLS["llvm-objcopy"], f"--dump-section=.hip_fatbin={fatbin}", str(so),
              str(so.with_suffix(".stripped")))
    bundler = TOOLS["clang-offload-bundler"]
    targets = _tool_out(bundler, "--list", "--type=o", f"--input={fatbin}").split()
    _tool_out(bundler, "--unbundle", "--type=o", f"--input={fatbin}", f"--targets={TARGET}",
              f"--output={co}")
    return targets, co


@needs_tools
@pytest.mark.parametrize("variant", marked(IDS, FIRST_OF_EACH_LANE))
def test_links_and_exports_the_runner_abi(built, variant):
    _, so = built(variant)
    nm = _tool_out(TOOLS["llvm-nm"], "-D", "--defined-only", str(so))
    exported = {line.split()[-1] for line in nm.splitlines() if line.strip()}
    assert set(ABI) <= exported, set(ABI) - exported
    needed = _tool_out(TOOLS["llvm-readelf"], "--needed-libs", str(so))
    assert "libamdhip64.so" in needed


@needs_tools
@pytest.mark.parametrize("variant", marked(IDS, FIRST_OF_EACH_LANE))
def test_embeds_a_scratch_free_gfx1151_code_object(built, variant):
    _, so = built(variant)
    targets, co = _code_object(so)
    assert TARGET in targets and any(t.startswith("host-x86_64") for t in targets), targets
    header = _tool_out(TOOLS["llvm-readelf"], "-h", str(co))
    assert "EM_AMDGPU" in header and "gfx1151" in header
    notes = _tool_out(TOOLS["llvm-readelf"], "--notes", str(co))
    assert re.search(r"amdhsa\.target:\s+amdgcn-amd-amdhsa--gfx1151\b", notes)
    kernels = re.findall(r"^\s*\.name:\s+(\S+)", notes, re.M)
    assert any("arb_poison_kernel" in k for k in kernels) and len(kernels) >= 2, kernels
    for field in ("private_segment_fixed_size", "vgpr_spill_count", "sgpr_spill_count"):
        values = re.findall(rf"^\s*\.{field}:\s+(\d+)", notes, re.M)
        assert len(values) == len(kernels) and set(values) == {"0"}, (field, kernels, values)
    assert ".uses_dynamic_stack: true" not in notes


@needs_tools
@pytest.mark.parametrize("variant", marked(IDS, FIRST_OF_EACH_LANE))
def test_loads_with_dlopen_and_reports_its_shapes(built, variant):
    """dlopen resolves libamdhip64 and runs the code object's registration; the size queries
    are host code, so they answer without a GPU."""
    region, so = built(variant)
    lib = ctypes.CDLL(str(so), mode=ctypes.RTLD_LOCAL)
    lib.arbiter_input_elems.restype = ctypes.c_longlong
    lib.arbiter_output_elems.restype = ctypes.c_longlong
    shapes = list(input_shapes(region).values())
    assert lib.arbiter_n_inputs() == len(shapes)
    assert [lib.arbiter_input_elems(i) for i in range(len(shapes))] == [math.prod(s)
                                                                        for s in shapes]
    assert lib.arbiter_output_elems() == math.prod(output_shape(region))
    assert lib.arbiter_elem_bytes() == numpy_dtype(region.dtype).itemsize


@needs_tools
def test_cli_writes_the_shared_object_and_refuses_bad_requests(tmp_path, capsys, monkeypatch):
    from arbiter.cli import main as cli

    spec, out = str(REGIONS), tmp_path / "mm_relu.so"
    assert cli(["emit", spec, "mm_relu", "--lane", "hip_scalar", "--platform", "rocm",
                "--arch", "gfx1151", "--shared", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    assert TARGET in _code_object(out)[0]

    def refused(*args: str, needle: str) -> None:
        assert cli(["emit", spec, "mm_relu", *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err

    so = str(tmp_path / "x.so")
    refused("--lane", "hip_scalar", "--arch", "gfx11;rm", "--shared", so, needle="not a rocm arch")
    refused("--lane", "x86_c", "--shared", so, needle="not a GPU lane")
    refused("--lane", "hip_scalar", "--platform", "cuda", "--shared", so, needle="--platform rocm")
    refused("--lane", "hip_scalar", "--asm", "--shared", so, needle="exclusive")
    refused("--lane", "hip_scalar", "--shared", str(tmp_path / "no" / "x.so"),
            needle="cannot write")
    refused("--lane", "hip_scalar", "--shared", str(tmp_path), needle="cannot write")
    monkeypatch.setattr(gpu_build, "toolchain", lambda: Toolchain(None, None, None))
    refused("--lane", "hip_scalar", "--shared", so, needle="no hipcc or clang++")
    assert not Path(so).exists()


def test_choose_clock_trusts_sane_events():
    # 100 launches of 50 us timed by events; the wall clock adds launch and sync overhead
    assert choose_clock([50e-6] * 100, 6e-3, 110).use_events
    # tiny kernels: events far under the wall clock, but the wall clock is host overhead
    assert choose_clock([2e-6] * 10, 4e-4, 12).use_events


@pytest.mark.parametrize(("events", "wall", "why"), [
    ([], 1e-3, "no event samples"),
    ([50e-6, 0.0, 50e-6], 1e-3, "zero or negative"),
    ([50e-6, -3e-6, 50e-6], 1e-3, "zero or negative"),
    ([50e-6, float("nan"), 50e-6], 1e-3, "not finite"),
    ([float("inf")] * 3, 1e-3, "not finite"),
    ([0.5] * 10, 0.01, "more than the"),  # 5 s of events inside 10 ms of wall time
    ([1e-9] * 100, 0.2, "under their launches"),  # 0.1 us of events for 200 ms of launches
])
def test_choose_clock_falls_back_on_garbage_events(events, wall, why):
    choice = choose_clock(events, wall, len(events) + 10)
    assert not choice.use_events and why in choice.reason, choice


class _FakeLib:
    """The arb_runner.h ABI in Python: the sizes of `region`, and arbiter_time writing
    `event_ms` for every launch; counts the launches timed in each call. Its "device" inputs
    are the host arrays it was given."""

    def __init__(self, region, event_ms: float) -> None:
        import ctypes

        shapes = [math.prod(s) for s in input_shapes(region).values()]
        size = numpy_dtype(region.dtype).itemsize
        self.time_calls: list[tuple[int, int]] = []
        self.inputs: list[int] = []

        def arbiter_prepare(n, ptrs):
            self.inputs = [ptrs[i] for i in range(n * len(shapes))]
            return 0

        def arbiter_read_input(s, k, host):
            ctypes.memmove(host, self.inputs[s * len(shapes) + k], shapes[k] * size)
            return 0

        def arbiter_time(warmup, repeats, ms_out):
            self.time_calls.append((warmup, repeats))
            for i in range(repeats):
                ms_out[i] = event_ms
            return 0

        fns = {
            "arbiter_last_error": lambda: b"",
            "arbiter_n_inputs": lambda: len(shapes),
            "arbiter_input_elems": lambda i: shapes[i],
            "arbiter_output_elems": lambda: math.prod(output_shape(region)),
            "arbiter_elem_bytes": lambda: numpy_dtype(region.dtype).itemsize,
            "arbiter_prepare": arbiter_prepare,
            "arbiter_read_input": arbiter_read_input,
            "arbiter_run": lambda s, out: 0,
            "arbiter_time": arbiter_time,
            "arbiter_release": lambda: None,
        }
        for name, fn in fns.items():
            setattr(self, name, fn)


def _fake_runner(monkeypatch, platform, event_ms):
    from arbiter.lanes._gpu import runner as gpu_runner

    from arbiter.check import random_inputs
    from arbiter.lane import Artifact, Config, KernelSource

    region = load_spec(REGIONS).get("mm_relu")
    lib = _FakeLib(region, event_ms)
    monkeypatch.setattr(gpu_runner.ctypes, "CDLL", lambda path, mode=0: lib)
    source = KernelSource("fake", region.key, Config(), "hip", "")
    artifact = Artifact("fake", "k", source, "/nonexistent/fake.so", 0.0, False, "")
    runner = gpu_runner.GpuRunner(artifact, region, platform)
    return runner, lib, [random_inputs(region, 0)]


def test_rocm_runner_times_with_the_wall_clock_when_events_are_zero(monkeypatch, caplog):
    runner, lib, sets = _fake_runner(monkeypatch, Platform.ROCM, 0.0)
    with caplog.at_level(logging.WARNING):
        first = runner.time(sets, warmup=2, repeats=5)
    assert runner.timing_method == "wall_clock" and "zero" in runner.clock_note
    assert "wall clock" in caplog.text
    assert len(first) == 5 and all(math.isfinite(v) and v > 0 for v in first)
    lib.time_calls.clear()
    again = runner.time(sets, warmup=2, repeats=3)  # the verdict holds: no event pass first
    assert len(again) == 3 and lib.time_calls[0] == (2, 1)
    assert all(w == 0 for w, _ in lib.time_calls[1:]) and len(lib.time_calls) == 4


def test_rocm_runner_keeps_sane_events_and_cuda_is_unchanged(monkeypatch):
    runner, _, sets = _fake_runner(monkeypatch, Platform.ROCM, 1e-3)  # 1 us per launch
    assert runner.time(sets, warmup=1, repeats=4) == pytest.approx([1e-6] * 4, rel=1e-6)
    assert runner.timing_method == "hip_events" and runner.clock_note == ""
    runner, _, sets = _fake_runner(monkeypatch, Platform.CUDA, 0.0)
    assert runner.time(sets, warmup=1, repeats=4) == [0.0] * 4  # judged by the measure stage
    assert runner.timing_method == "cuda_events"
