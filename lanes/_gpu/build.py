"""Build GPU kernel sources into loadable libraries, and into device assembly for reading.

One HIP-dialect text serves both vendors: nvcc compiles it as CUDA (`-x cu`, arb_gpu.h maps
the names) for sm_XX, hipcc / clang++ compile it as HIP for gfxNNNN. The key covers the source,
the headers it includes, compiler identity, arch and flags (arbiter.lane.build_key).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from functools import cache
from pathlib import Path

from arbiter.lane import (
    Artifact,
    BuildError,
    KernelSource,
    Platform,
    build_key,
    cached_build,
    run_tool,
)

from .detect import cuda_arch, rocm_arch, rocm_compiler, toolchain

__all__ = [
    "INCLUDE_DIR",
    "device_asm",
    "gpu_build",
    "isa_resources",
    "library_command",
    "rocm_shared_command",
    "rocm_shared_object",
]

INCLUDE_DIR = Path(__file__).resolve().parent
_SUFFIX = {Platform.CUDA: ".cu", Platform.ROCM: ".hip"}


@cache
def _headers_digest() -> str:
    """Every header beside this file is part of the key: a header edit changes the binary."""
    return "\n".join(f"{p.name}:{p.read_text()}" for p in sorted(INCLUDE_DIR.glob("*.h")))


def _arch(platform: Platform, arch: str | None) -> str:
    return cuda_arch(arch) if platform is Platform.CUDA else rocm_arch(arch)


def library_command(platform: Platform, arch: str, src: str, target: str,
                    options: tuple[str, ...] = ()) -> list[str]:
    """The compiler command that turns `src` into the shared library `target`."""
    inc = f"-I{INCLUDE_DIR}"
    if platform is Platform.CUDA:
        if not toolchain().nvcc:
            raise BuildError("no nvcc on PATH: cannot build for CUDA")
        return ["nvcc", "-x", "cu", f"-arch={arch}", "-O3", "-shared", "-Xcompiler", "-fPIC",
                "-lineinfo", inc, *options, "-o", target, src]
    cc = rocm_compiler()
    if cc is None:
        raise BuildError("no hipcc or clang++ on PATH: cannot build for ROCm")
    lang = [] if cc == "hipcc" else ["-x", "hip"]
    link = [] if cc == "hipcc" else ["-lamdhip64"]
    return [cc, *lang, f"--offload-arch={arch}", "-O3", "-fPIC", "-shared", inc, *options,
            "-o", target, src, *link]


def gpu_build(lane: object, source: KernelSource, platform: Platform,
              arch: str | None = None) -> Artifact:
    """Compile `source` for `platform` into a shared library exporting the arb_runner.h ABI."""
    arch = _arch(platform, arch)
    probe = library_command(platform, arch, "SRC", "OUT", source.options)
    compiler = probe[0]
    name = getattr(lane, "name", source.lane)
    version = getattr(lane, "version", "0")
    key = build_key(source=source.text + "\0" + _headers_digest(), compiler=compiler,
                    flags=probe, arch=arch, lane=f"{name}@{version}")
    suffix = _SUFFIX[platform]

    def build(tmp: Path, target: Path) -> tuple[int, str]:
        src = tmp / f"kernel{suffix}"
        src.write_text(source.text)
        return run_tool(library_command(platform, arch, str(src), str(target), source.options),
                        timeout=600, cwd=str(tmp))

    path, seconds, cached, log = cached_build(key, ".so", build)
    return Artifact(name, key, source, str(path), seconds, cached, log,
                    _rocm_resources(lane, source, path, arch) if platform is Platform.ROCM
                    else None)


def _rocm_resources(lane: object, source: KernelSource, so: Path, arch: str) -> dict | None:
    """What the built code object uses (resources.summary), None without the LLVM tools."""
    from . import resources

    kernels = resources.so_resources(so, arch)
    if kernels is None:
        return None
    launch = resources.dynamic_lds(source.text, getattr(lane, "launch_lds", ()))
    return resources.summary(kernels, launch)


# Without ROCm's device libraries (-nogpulib) the HIP headers' barriers and fences
# (__syncthreads, __threadfence) call __atomic_work_item_fence, which the device libraries
# define. This is the same fence, at the order and scope asked for, so the linked code object
# synchronizes as a hipcc build does. Force-included ahead of the source; device side only.
_FENCE_SHIM = """\
#if defined(__HIP_DEVICE_COMPILE__)
#include <hip/hip_runtime.h>
#define ARB_FENCE_AT(order)                                                           \\
    switch (scope) {                                                                  \\
    case __memory_scope_sub_group: __builtin_amdgcn_fence(order, "wavefront"); break; \\
    case __memory_scope_work_group: __builtin_amdgcn_fence(order, "workgroup"); break; \\
    case __memory_scope_device: __builtin_amdgcn_fence(order, "agent"); break;        \\
    case __memory_scope_all_svm_devices: __builtin_amdgcn_fence(order, ""); break;    \\
    default: break;                                                                   \\
    }
extern "C" __device__ void __atomic_work_item_fence(__cl_mem_fence_flags, __memory_order order,
                                                    __memory_scope scope) {
    switch (order) {
    case __memory_order_acquire: ARB_FENCE_AT(__ATOMIC_ACQUIRE) break;
    case __memory_order_release: ARB_FENCE_AT(__ATOMIC_RELEASE) break;
    case __memory_order_acq_rel: ARB_FENCE_AT(__ATOMIC_ACQ_REL) break;
    case __memory_order_seq_cst: ARB_FENCE_AT(__ATOMIC_SEQ_CST) break;
    default: break; /* relaxed: no fence */
    }
}
#undef ARB_FENCE_AT
#endif
"""


def rocm_shared_command(arch: str, src: str, target: str, shim: str,
                        options: tuple[str, ...] = ()) -> list[str]:
    """The command linking `src` into the complete ROCm shared object `target` for `arch`.

    hipcc (a ROCm install) links with ROCm's own device libraries: `library_command`.
    Otherwise clang++ with Debian's HIP headers and libamdhip64, no device libraries; `shim`
    is the path where the caller wrote `_FENCE_SHIM`.
    """
    tc = toolchain()
    if tc.hipcc:
        return library_command(Platform.ROCM, arch, src, target, options)
    if not tc.clang:
        raise BuildError("no hipcc or clang++ on PATH: cannot link a ROCm shared object")
    return [
        tc.clang, "-x", "hip",  # the source is HIP whatever its file name
        f"--offload-arch={arch}",  # the one code object embedded (.hip_fatbin bundle)
        "-nogpulib",  # no ROCm device libraries here: the two shims below stand in
        "-DARB_OCKL_SHIM",  # arb_gpu.h defines the ockl work-item queries
        "-include", shim,  # the fence the headers' barriers call (_FENCE_SHIM)
        "-O3", "-fPIC", "-shared",
        "-fuse-ld=lld",  # the host link uses the lld that links the device side too
        "-Wl,-z,defs",  # an unresolved host symbol fails here, not at dlopen on the target
        f"-I{INCLUDE_DIR}", *options, "-o", target, src,
        "-lamdhip64",  # hipMalloc, hipEvent*, __hipRegisterFatBinary: Debian's HIP runtime
    ]


def rocm_shared_object(text: str, out: str | Path, arch: str | None = None,
                       options: tuple[str, ...] = ()) -> str:
    """Link `text` (a GPU lane's source) into the shared object a ROCm machine would load:
    the arb_runner.h host wrapper plus the embedded code object for `arch` (default: as
    `rocm_arch`). Built in a temp dir, then moved to `out`; returns the compiler's log.

    Raises BuildError when there is no compiler or the build fails (the log attached).
    """
    arch = rocm_arch(arch)
    with tempfile.TemporaryDirectory(prefix="arbiter-rocm-") as tmp:
        src, shim, target = Path(tmp) / "kernel.hip", Path(tmp) / "arb_shim.h", Path(tmp) / "k.so"
        src.write_text(text)
        shim.write_text(_FENCE_SHIM)
        argv = rocm_shared_command(arch, str(src), str(target), str(shim), options)
        rc, log = run_tool(argv, timeout=600, cwd=tmp)
        if rc != 0 or not target.exists():
            raise BuildError(f"{argv[0]} failed linking for {arch} (exit {rc})", log)
        shutil.move(str(target), str(out))
    return log


def device_asm(text: str, platform: Platform, arch: str | None = None,
               options: tuple[str, ...] = ()) -> str:
    """Device assembly for `text`: AMDGPU ISA (rocm) or PTX (cuda). No GPU needed.

    ROCm uses `clang++ -x hip --offload-arch=gfxNNNN -nogpulib --cuda-device-only -S` with the
    ockl shim from arb_gpu.h (no device libraries needed); CUDA uses `nvcc -ptx`.
    """
    arch = _arch(platform, arch)
    tc = toolchain()
    with tempfile.TemporaryDirectory(prefix="arbiter-asm-") as tmp:
        src = Path(tmp) / f"kernel{_SUFFIX[platform]}"
        out = Path(tmp) / "kernel.s"
        src.write_text(text)
        inc = f"-I{INCLUDE_DIR}"
        if platform is Platform.CUDA:
            if not tc.nvcc:
                raise BuildError("no nvcc on PATH: cannot produce PTX")
            argv = ["nvcc", "-x", "cu", "-ptx", f"-arch={arch}", "-O3", inc, *options,
                    "-o", str(out), str(src)]
        else:
            if not tc.clang:
                raise BuildError("no clang++ on PATH: cannot produce gfx ISA")
            argv = [tc.clang, "-x", "hip", f"--offload-arch={arch}", "-nogpulib",
                    "--cuda-device-only", "-S", "-O3", "-DARB_OCKL_SHIM", inc, *options,
                    "-o", str(out), str(src)]
        rc, log = run_tool(argv, timeout=300, cwd=tmp)
        if rc != 0 or not out.exists():
            raise BuildError(f"{argv[0]} failed (exit {rc})", log)
        return out.read_text()


_RES = {
    "vgprs": re.compile(r"^\s*; NumVgprs:\s*(\d+)", re.M),
    "sgprs": re.compile(r"^\s*; NumSgprs:\s*(\d+)", re.M),
    "scratch": re.compile(r"^\s*; ScratchSize:\s*(\d+)", re.M),
    "lds": re.compile(r"^\s*; LDSByteSize:\s*(\d+)", re.M),
    "occupancy": re.compile(r"^\s*; Occupancy:\s*(\d+)", re.M),
    "vgpr_spills": re.compile(r"^\s*\.vgpr_spill_count:\s*(\d+)", re.M),
    "sgpr_spills": re.compile(r"^\s*\.sgpr_spill_count:\s*(\d+)", re.M),
}
_KERNEL = re.compile(r"^\s*\.globl\s+(\S+)", re.M)


def isa_resources(asm: str) -> dict[str, dict[str, int]]:
    """Per-kernel resource lines of AMDGPU assembly: {kernel: {vgprs, sgprs, scratch, lds,
    occupancy, vgpr_spills, sgpr_spills}}, kernels in the order they appear.

    The per-kernel "; Kernel info" comments and the metadata spill counts both come in kernel
    order, so the i-th value of each belongs to the i-th kernel symbol.
    """
    kernels = [k for k in _KERNEL.findall(asm) if not k.startswith("__hip_cuid")]
    columns = {name: [int(v) for v in rx.findall(asm)] for name, rx in _RES.items()}
    out: dict[str, dict[str, int]] = {}
    for i, k in enumerate(kernels):
        out[k] = {name: vals[i] for name, vals in columns.items() if i < len(vals)}
    return out
