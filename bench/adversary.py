"""The true fastest under adversarial timing noise: how often it wins.

    python3 bench/adversary.py [--regions 40] [--sweeps 5] [--out FILE.json]

A plug-in lane with known true latencies and exact outputs but for the fastest
(`tests/fake_lanes.py`, `Adversary`): `fast` (1.00 ms, error 3e-4) with rare 20x outliers,
`noisy` (1.6 ms, very noisy), `bimodal` (1.08 ms, half its calls 2.5x) and `steady`
(1.15 ms), all within the budget. Each sweep tunes `--regions` regions into a fresh
database; every winner should be `fast`, told apart from its runner-up.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import fake_lanes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--regions", type=int, default=40)
    ap.add_argument("--sweeps", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    os.environ["ARBITER_EXTRA_LANES"] = fake_lanes.extra_lanes("fake_adversary")
    os.environ["PYTHONPATH"] = fake_lanes.pythonpath()
    import arbiter

    regions = [arbiter.FusedRegion(8 + i, 16, 8, name=f"r{i}", epilogue=("bias",))
               for i in range(args.regions)]
    wins: collections.Counter[str] = collections.Counter()
    verdicts: collections.Counter[str] = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="arbiter-adversary-") as tmp:
        os.environ["ARBITER_CACHE_DIR"] = str(Path(tmp) / "cache")
        for i in range(args.sweeps):
            rows = arbiter.tune(regions, db=f"sqlite:///{tmp}/s{i}.db", trials=4,
                                lanes=["fake_adversary"])
            wins.update(r["config"]["kind"] for r in rows)
            verdicts.update(r["verdict"] or "none" for r in rows)
    total = args.regions * args.sweeps
    print(f"{total} winners: {dict(wins)}; verdicts {dict(verdicts)}; the true fastest won "
          f"{wins['fast']} of {total}")
    if args.out:
        args.out.write_text(json.dumps({"winners": dict(wins), "verdicts": dict(verdicts),
                                        "total": total}, indent=2) + "\n")


if __name__ == "__main__":
    main()
