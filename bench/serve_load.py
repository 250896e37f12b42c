"""`arbiter serve` under load: requests per second and latency percentiles, by wrk.

    python3 bench/serve_load.py [--db URL] [--seconds 10] [--connections 16] [--out F]

Without --db it first tunes the example spec with the numpy lane into a temporary SQLite file.
It then starts `arbiter serve` (one process) on a free port and points wrk (Debian's `wrk`;
one thread, keep-alive connections) at it, on the same machine: the load generator and the
server share its CPUs. Four loads, each for --seconds after a 2 s warm-up:
`GET /v1/best/{name}` rotating over every region, `POST /v1/best` with each region's table
(by content), and `GET /v1/regions`; then `GET /v1/best` with a budget drawn at random
for every request, so that none is answered from the kept answers (each reads the records:
the worst case, a runtime asking what nobody asked before). Latencies are wrk's, from request
sent to reply read.
Targets (issue 36): GET /v1/best >= 2,000/s with p99 < 10 ms; POST /v1/best >= 500/s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "regions.toml"

GET = """
local paths = {%s}
local i = 0
request = function()
  i = i %% #paths + 1
  return wrk.format("GET", paths[i] .. %s)
end
"""
KEPT = '""'  # the same paths again and again: answers the server keeps
MISS = 'string.format("?budget=%.12f", 0.001 + math.random() * 1e-6)'  # never the same
POST = """
local bodies = {%s}
local i = 0
request = function()
  i = i %% #bodies + 1
  return wrk.format("POST", "/v1/best", {["Content-Type"] = "application/json"}, bodies[i])
end
"""


def _lua(items: list[str]) -> str:
    return ", ".join("[==[" + s + "]==]" for s in items)


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    assert m, text
    return float(m[1]) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m[2]]


def wrk(base: str, script: str, seconds: int, connections: int, path: str = "/") -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    cmd = ["wrk", "-t1", f"-c{connections}", "--latency", "-s", f.name]
    subprocess.run([*cmd, "-d2s", base + path], capture_output=True, check=True)  # warm-up
    out = subprocess.run([*cmd, f"-d{seconds}s", base + path], capture_output=True, text=True,
                         check=True).stdout
    os.unlink(f.name)
    pct = dict(re.findall(r"^\s+(\d+)%\s+(\S+)", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"requests_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out)[1]),
            "p50_ms": _ms(pct["50"]), "p90_ms": _ms(pct["90"]), "p99_ms": _ms(pct["99"]),
            "non_2xx": int(errors[1]) if errors else 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench/serve_load.py: needs wrk (apt-get install wrk)")
    tmp = tempfile.mkdtemp(prefix="arbiter-serve-")
    url = args.db or f"sqlite:///{tmp}/arbiter.db"
    if not args.db:
        subprocess.run([sys.executable, "-m", "arbiter", "tune", str(SPEC), "--db", url,
                        "--lanes", "numpy", "--trials", "1", "--json"], check=True,
                       capture_output=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "arbiter", "serve", "--db", url,
                               "--port", str(port)])
    try:
        for _ in range(100):
            try:
                regions = json.load(urllib.request.urlopen(base + "/v1/regions"))
                break
            except OSError:
                time.sleep(0.1)
        from arbiter.region import load_spec, region_table

        names = [r["name"] for r in regions]
        tables = [json.dumps(region_table(r)) for r in load_spec(SPEC) if r.name in names]
        result = {
            "get_best": wrk(base, GET % (_lua([f"/v1/best/{n}" for n in names]), KEPT),
                            args.seconds, args.connections),
            "get_best_uncached": wrk(base, GET % (_lua([f"/v1/best/{n}" for n in names]), MISS),
                                     args.seconds, args.connections),
            "post_best": wrk(base, POST % _lua(tables), args.seconds, args.connections),
            "get_regions": wrk(base, "", args.seconds, args.connections, "/v1/regions"),
            "regions": len(names), "connections": args.connections, "seconds": args.seconds,
            "cpus": len(os.sched_getaffinity(0)),
        }
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
