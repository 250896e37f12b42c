"""The samplers replayed on a measured space: trials until a candidate within 3% of the best.

    python3 bench/samplers.py [--region row_gelu_residual] [--seeds 20] [--out FILE.json]

Measures every candidate of one example region (x86_c and numpy, the whole space: the
sweep's own enumeration) into a fresh database, then replays each sampler `--seeds` times
on those recorded results, nothing timed again: the search proposes as in a sweep (every
lane's default first, then the sampler; a batch at a time, the size of this machine's CPU
count), each proposal is answered with its recorded result. Reported per sampler: the
median and 90th percentile of the trials (configs the lanes' rules refuse aside, as in the
trial budget) until one within 3% of the best recorded latency was measured, and the
sampler's time per proposal.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "regions.toml"
WITHIN = 1.03


def replay(table: dict, lanes: list, region, sampler: str, seed: int, batch: int,
           best: float) -> tuple[int, float, int]:
    """(trials until a near-best one, seconds asking, proposals)."""
    from arbiter.lane import Status
    from arbiter.records import Result
    from arbiter.search import Search, plan

    p = plan(region, lanes, [], len(table) - 1)  # (all of it would be listed, not sampled)
    search = Search(p, sampler, seed, 1e-3)
    trials, asking, proposals = 0, 0.0, 0
    while True:
        t0 = time.perf_counter()
        got = search.propose(batch)
        asking += time.perf_counter() - t0
        if not got:
            return trials, asking, proposals
        for proposal in got:
            proposals += 1
            r = table.get(proposal.key) or Result(  # a config the lanes' rules refuse
                -proposals, proposal.lane, proposal.config, Status.INVALID, None, None, None,
                None, None, None, False, None, 1e-3)
            t0 = time.perf_counter()
            search.told(proposal, r)
            asking += time.perf_counter() - t0
            if r.status is Status.INVALID:
                continue
            trials += 1
            if r.latency is not None and r.latency <= WITHIN * best:
                return trials, asking, proposals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--region", default="row_gelu_residual")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import arbiter
    from arbiter.lane import get_lane, usable_cores
    from arbiter.records import Records, fingerprint
    from arbiter.search import SAMPLERS

    region = arbiter.load_spec(SPEC).get(args.region)
    lanes = [get_lane("x86_c"), get_lane("numpy")]
    with tempfile.TemporaryDirectory(prefix="arbiter-samplers-") as tmp:
        url = f"sqlite:///{tmp}/all.db"
        arbiter.tune(region, db=url, trials=100_000, lanes=[ln.name for ln in lanes])
        records = Records(url)
        rid, eid, _ = records.ids(region, fingerprint(), lanes)
        results = records.results(rid, eid)
    table = {(r.lane, r.config.key): r for r in results}
    timed = [r.latency for r in results if r.latency is not None and r.fits(1e-3)]
    best = min(timed)
    near = sum(1 for t in timed if t <= WITHIN * best)
    print(f"{args.region}: {len(table)} candidates, {near} within 3% of the best "
          f"({best * 1e3:.3f} ms)", flush=True)
    out = {"region": args.region, "candidates": len(table), "near_best": near, "samplers": {}}
    for name in SAMPLERS:
        if name == "gp":
            continue  # (needs torch)
        runs = [replay(table, lanes, region, name, seed, usable_cores(), best)
                for seed in range(args.seeds)]
        trials = sorted(r[0] for r in runs)
        per_ask = sum(r[1] for r in runs) / max(1, sum(r[2] for r in runs))
        row = {"median": statistics.median(trials),
               "p90": trials[int(0.9 * (len(trials) - 1))], "ms_per_proposal": per_ask * 1e3}
        out["samplers"][name] = row
        print(f"  {name:16} median {row['median']:5.1f} p90 {row['p90']:3d} trials; "
              f"{row['ms_per_proposal']:.1f} ms a proposal", flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
