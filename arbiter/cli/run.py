"""`arbiter run`: one region on arrays from an .npz file (missing ones drawn and saved)."""

from __future__ import annotations

import argparse
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import ArbiterError, InputError, SpecError
from ..api import best, parse_config, run, spec_regions
from ..check import random_inputs
from ..lane import get_lane
from ..region import Spec, input_shapes, storage_view


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


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.exists():
        return {}
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded as z:
                return {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise InputError(f"{path}: not a readable .npz file ({e})") from None
    raise InputError(f"{path}: one array (.npy), not an .npz file of named arrays")


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
    arrays = _load_npz(in_path)
    # "out": the output file of an earlier run, given as the inputs of this one
    unknown = sorted(set(arrays) - set(input_shapes(region)) - {"out"})
    if unknown:
        raise InputError(f"{in_path}: {', '.join(unknown)} not among the inputs of "
                         f"{region.label} ({', '.join(input_shapes(region))})")
    drawn = random_inputs(region, seed)
    missing = [n for n in input_shapes(region) if n not in arrays]
    for n in missing:
        arrays[n] = drawn[n]
    # bf16 arrays come back from an npz as two-byte void: read them as the region's dtype
    named: dict[str, Any] = {n: storage_view(arrays[n], region.dtype) for n in input_shapes(region)}
    out = run(region, lane=lane, config=config, **named)
    try:
        if missing and not in_path.exists():
            np.savez(in_path, **named)
        np.savez(out_path, out=out, **named)
    except OSError as e:
        raise InputError(f"{e.filename or out_path}: cannot be written ({e.strerror or e})") \
            from None
    return {"lane": lane, "shape": out.shape, "drawn": missing, "recorded": recorded,
            "config": str(parse_config(get_lane(lane), region, config))}

