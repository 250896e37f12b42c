"""`arbiter run`: one region on arrays from an .npz file (missing ones drawn and saved)."""

from __future__ import annotations

import argparse
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import whole_file
from .._errors import ArbiterError, InputError, SpecError
from ..api import best, parse_config, run, spec_regions
from ..check import random_inputs
from ..lane import get_lane
from ..region import Region, Spec, input_shapes, numpy_dtype, storage_view


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="region spec file (TOML)")
    p.add_argument("region", help="region name in the spec")
    p.add_argument("--lane", help="lane to run (default: the recorded winner on this machine)")
    p.add_argument("--db", help="records to find the winner in (default: $ARBITER_DB or "
                   "sqlite:///arbiter.db)")
    p.add_argument("--config", action="extend", nargs="+", default=[], metavar="K=V",
                   help="tunable values (one or more, repeatable); others take the lane's "
                   "defaults")
    p.add_argument("--inputs", required=True, help=".npz with the input arrays; missing ones "
                   "are drawn from a seeded normal distribution and saved")
    p.add_argument("--output", required=True, help=".npz to write: 'out' plus the inputs used")
    p.add_argument("--seed", type=int, default=0, help="seed for missing inputs (default 0)")


def main(args: argparse.Namespace) -> int:
    info = run_npz(args.spec, args.region, lane=args.lane, config=args.config,
                   inputs=args.inputs, output=args.output, seed=args.seed, db=args.db)
    winner = "recorded winner " if info["recorded"] else ""
    print(f"wrote {args.output}: out{info['shape']} from {winner}lane {info['lane']} "
          f"({info['config']}); drawn inputs: {', '.join(info['drawn']) or 'none'}")
    return 0


def _header(f: Any) -> tuple[tuple[int, ...], np.dtype]:
    """An .npy member's shape and dtype, from its header alone."""
    version = np.lib.format.read_magic(f)
    read = {(1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0}.get(version)
    if read is None:
        raise ValueError(f".npy format {version[0]}.{version[1]} is not read here")
    shape, _, dtype = read(f)
    return tuple(shape), dtype


def _starts_with(path: Path, prefix: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(prefix)) == prefix
    except OSError:
        return False


def _load_npz(path: Path, region: Region) -> dict[str, np.ndarray]:
    """The input arrays in an .npz (an "out" member is passed over). Every member's header
    is checked against the region, shape and dtype, before any data is read: a small file
    can declare an array of many GB (a decompression bomb)."""
    if not path.exists():
        return {}
    shapes, want = input_shapes(region), numpy_dtype(region.dtype)
    try:
        with zipfile.ZipFile(path) as z:
            members = [m for m in z.infolist() if not m.is_dir()]
            names = [m.filename.removesuffix(".npy") for m in members]
            if len(set(names)) < len(names) or not all(m.filename.endswith(".npy")
                                                       for m in members):
                raise InputError(f"{path}: not an .npz file of named arrays (each once)")
            unknown = sorted(set(names) - set(shapes) - {"out"})
            if unknown:
                raise InputError(f"{path}: {', '.join(unknown)} not among the inputs of "
                                 f"{region.label} ({', '.join(shapes)})")
            arrays = {}
            for member, name in zip(members, names):
                if name == "out":  # the output file of an earlier run, given as inputs
                    continue
                with z.open(member) as f:
                    shape, dtype = _header(f)
                stored = dtype == want or (dtype.kind == "V" and not dtype.fields
                                           and dtype.itemsize == want.itemsize)  # (bf16)
                if not stored:
                    raise InputError(f"{path}: input {name!r} has dtype {dtype}, need {want} "
                                     f"({region.dtype})")
                if shape != shapes[name]:
                    raise InputError(f"{path}: input {name!r} has shape {shape}, need "
                                     f"{shapes[name]}")
                with z.open(member) as f:
                    arrays[name] = np.lib.format.read_array(f, allow_pickle=False)
            return arrays
    except InputError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        if _starts_with(path, np.lib.format.MAGIC_PREFIX):
            raise InputError(f"{path}: one array (.npy), not an .npz file of named "
                             "arrays") from None
        raise InputError(f"{path}: not a readable .npz file ({e})") from None


def run_npz(spec: str | Path | Spec, region_name: str, *, lane: str | None,
            config: Sequence[str], inputs: str, output: str, seed: int = 0,
            db: str | None = None) -> dict[str, Any]:
    """`arbiter run`: inputs from an npz (missing ones drawn and saved), result to an npz.
    Without a lane the recorded winner runs."""
    region = spec_regions(spec, [region_name])[0]
    recorded = lane is None
    if lane is None:
        if config:
            raise ArbiterError("--config needs --lane; without one the recorded winner runs")
        w = best(region, db=db)
        lane, config = w["lane"], [f"{k}={v}" for k, v in w["config"].items()]
    in_path, out_path = Path(inputs), Path(output)
    for path, what in ((in_path, "inputs"), (out_path, "output")):
        if path.suffix != ".npz":  # (np.savez would add one to a name without it)
            raise SpecError(f"{path}: {what} file must end in .npz")
        written = path is out_path or not path.exists()  # (drawn inputs are saved)
        if written and (not path.parent.is_dir() or not os.access(path.parent, os.W_OK)):
            raise InputError(f"{path}: its directory does not exist or cannot be written")
    arrays = _load_npz(in_path, region)
    drawn = random_inputs(region, seed)
    missing = [n for n in input_shapes(region) if n not in arrays]
    for n in missing:
        arrays[n] = drawn[n]
    # bf16 arrays come back from an npz as two-byte void: read them as the region's dtype
    named: dict[str, Any] = {n: storage_view(arrays[n], region.dtype) for n in input_shapes(region)}
    out = run(region, lane=lane, config=config, **named)
    try:
        if missing and not in_path.exists():
            _save_npz(in_path, named)
        _save_npz(out_path, {"out": out, **named})
    except OSError as e:
        raise InputError(f"{e.filename or out_path}: cannot be written ({e.strerror or e})") \
            from None
    return {"lane": lane, "shape": out.shape, "drawn": missing, "recorded": recorded,
            "config": str(parse_config(get_lane(lane), region, config))}


def _save_npz(path: Path, arrays: dict[str, Any]) -> None:
    with whole_file(path) as f:
        np.savez(f, **arrays)
