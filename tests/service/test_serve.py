"""`arbiter serve` as a real server process on a free port, asked over real HTTP: by the
client, by raw requests, and by a real browser for the page."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from arbiter.cli import main
from arbiter.client import Client, ClientError
from arbiter.lane import Config, Status, get_lane
from arbiter.measure import Measurement
from arbiter.records import Fingerprint, Records
from arbiter.region import load_spec
from tests import fake_lanes
from tests.conftest import free_port

SPEC = """
[[region]]
name = "small"
M = 8
N = 16
K = 8
epilogue = ["bias", "relu"]

[[region]]
name = "wide"
M = 8
N = 32
K = 16
epilogue = ["bias"]
budget = 0.01
"""


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A spec tuned with the fake lane, in a SQLite file; the environment it was tuned in."""
    d = tmp_path_factory.mktemp("serve")
    env = {"ARBITER_EXTRA_LANES": fake_lanes.extra_lanes("fake_tiny"),
           "PYTHONPATH": fake_lanes.pythonpath(), "ARBITER_CACHE_DIR": str(d / "cache")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    spec = d / "spec.toml"
    spec.write_text(SPEC)
    url = f"sqlite:///{d / 'arbiter.db'}"
    assert main(["tune", str(spec), "--db", url, "--lanes", "fake_tiny", "--trials", "4",
                 "--json"]) == 0
    yield url, spec
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class Server:
    def __init__(self, url: str, *args: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "arbiter", "serve", "--db", url, "--port", str(self.port),
             *args], stderr=subprocess.PIPE, start_new_session=True)
        end = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.base + "/healthz", timeout=1).read()
                break
            except (urllib.error.URLError, ConnectionError):
                assert self.proc.poll() is None, self.proc.stderr.read().decode()
                assert time.monotonic() < end, "the server did not come up"
                time.sleep(0.1)

    def call(self, method: str, path: str, body: bytes | None = None,
             headers: dict | None = None) -> tuple[int, dict]:
        sent = {"Content-Type": "application/json"} if body is not None else {}
        req = urllib.request.Request(self.base + path, data=body, method=method,
                                     headers={**sent, **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def stop(self) -> str:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=30)
        return err.decode()


@pytest.fixture
def server(tuned):
    s = Server(tuned[0])
    yield s
    assert "Traceback" not in s.stop()


def _cli_best(capsys, spec, url, *args):
    assert main(["best", str(spec), *args, "--db", url, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_best_answers_exactly_what_arbiter_best_prints(tuned, server, capsys):
    url, spec = tuned
    rows = _cli_best(capsys, spec, url)
    for row in rows:
        status, got = server.call("GET", f"/v1/best/{row['region']}")
        assert status == 200 and got == row
        status, got = server.call("GET", f"/v1/best/{row['region_key']}?"
                                  f"fingerprint={row['fingerprint']}")
        assert status == 200 and got == row
    # by content: the spec's table as JSON, with its budget
    for region, row in zip(load_spec(spec), rows):
        from arbiter.region import region_table

        status, got = server.call("POST", "/v1/best", json.dumps(region_table(region)).encode())
        assert status == 200 and got == row
    [looser] = _cli_best(capsys, spec, url, "small", "--budget", "0.01")
    status, got = server.call("GET", "/v1/best/small?budget=0.01")
    assert status == 200 and got == looser


def test_regions_lists_every_tuned_region_with_its_environments(tuned, server):
    status, regions = server.call("GET", "/v1/regions")
    assert status == 200
    assert [r["name"] for r in regions] == ["small", "wide"]
    small = regions[0]
    assert small["kind"] == "fused" and small["dtype"] == "f32"
    assert small["shape"] == {"M": 8, "N": 16, "K": 8}
    assert len(small["environments"]) == 1 and small["environments"][0]["declared"]


@pytest.mark.parametrize("method,path,body,status,says", [
    ("GET", "/v1/best/nothing", None, 404, "no region named or keyed 'nothing'"),
    ("GET", "/v1/best/small?budget=-1", None, 400, "budget must be a positive number"),
    ("GET", "/v1/best/small?budget=abc", None, 400, "budget must be a positive number"),
    ("GET", "/v1/best/small?fingerprint=0123456789abcdef", None, 404,
     "no records under fingerprint"),
    ("POST", "/v1/best", b"{not json", 400, "not JSON"),
    ("POST", "/v1/best", b"[1, 2]", 400, "expected a JSON object"),
    ("POST", "/v1/best", b'{"M": 8, "N": 16}', 400, "field 'K': required"),
    ("POST", "/v1/best", b'{"M": 8, "N": 16, "K": 9999}', 404, "was never tuned"),
    ("POST", "/v1/tune", b'{"regions": []}', 400, "expected a list of region tables"),
    ("POST", "/v1/tune", b'[{"name": "x", "M": 0, "N": 1, "K": 1}]', 400, "M"),
    ("POST", "/v1/tune", b'{"regions": [{"name": "x", "M": 8, "N": 8, "K": 8}], '
     b'"lanes": ["nope"]}', 400, "unknown lane 'nope'"),
    ("POST", "/v1/tune", b'{"regions": [{"name": "x", "M": 8, "N": 8, "K": 8}], '
     b'"trials": 0}', 400, "--trials must be at least 1"),
    ("POST", "/v1/tune", b'{"regions": [{"name": "x", "M": 8, "N": 8, "K": 8}], '
     b'"speed": 1}', 400, "unknown field 'speed'"),
    ("POST", "/v1/tune", b'{"regions": [{"name": "x", "M": 8, "N": 8, "K": 8}], '
     b'"seed": -1}', 400, "--seed must be an integer in [0, 2**32)"),
    ("POST", "/v1/tune", b'[{"name": "x", "M": 1099511627776, "N": 1048576, "K": 8}]', 400,
     "over the 2,147,483,648 a job may ask for"),
    ("POST", "/v1/best", b"[" * 100_000, 400, "not JSON"),
    ("GET", "/v1/best/small?fingerprint=../../etc", None, 400, "fingerprint must be"),
    ("GET", "/v1/jobs/99", None, 404, "no job 99"),
    ("GET", "/v1/jobs/x", None, 400, "a job id is a number"),
    ("GET", "/v1/jobs/%C2%B2", None, 400, "a job id is a number"),
    ("GET", "/v1/jobs/99999999999999999999999", None, 400, "a job id is a number"),
    ("GET", "/nowhere", None, 404, "Not Found"),
    ("DELETE", "/v1/regions", None, 405, "Method Not Allowed"),
])
def test_bad_requests_get_a_4xx_with_one_json_line(server, method, path, body, status, says):
    got_status, got = server.call(method, path, body)
    assert got_status == status
    assert list(got) == ["error"] and says in got["error"] and "\n" not in got["error"]


def test_posts_take_json_only_and_bounded_bodies(server):
    """A page elsewhere cannot post a job to a server on this machine without the browser
    asking first: text/plain, which a form may send, is refused."""
    job = b'[{"name": "x", "M": 8, "N": 8, "K": 8}]'
    status, got = server.call("POST", "/v1/tune", job, {"Content-Type": "text/plain"})
    assert status == 415 and "application/json" in got["error"]
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.putrequest("POST", "/v1/best")  # (declared over the limit: refused before it is read)
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(2 << 20))
    conn.endheaders(b"{}")
    reply = conn.getresponse()
    assert reply.status == 413 and b"request body over" in reply.read()
    conn.close()
    status, got = server.call("GET", "/v1/best/small?budget=" + "x" * 200)
    assert status == 400 and len(got["error"]) < 120


def test_a_region_tuned_under_two_fingerprints_needs_one_named(tmp_path, tuned):
    url = f"sqlite:///{tmp_path / 'two.db'}"
    with sqlite3.connect(tuned[0].removeprefix("sqlite:///")) as src, \
            sqlite3.connect(tmp_path / "two.db") as dst:
        src.backup(dst)  # (the write-ahead log's pages too)
    region = load_spec(tuned[1]).get("small")
    records = Records(url)
    other = Fingerprint({"cpu": "another machine"})
    rid, eid, lanes = records.ids(region, other, [get_lane("fake_tiny")])
    m = Measurement(Status.OK, rel_error=1e-7, samples=(2e-3,) * 10)
    records.record(rid, eid, lanes["fake_tiny"], Config.of({"block": 4}), m, 1e-3)
    s = Server(url)
    try:
        status, got = s.call("GET", "/v1/best/small")
        assert status == 409 and "give fingerprint=" in got["error"]
        status, got = s.call("GET", f"/v1/best/small?fingerprint={other.hash}")
        assert status == 200 and got["fingerprint"] == other.hash and got["source"] == "records"
    finally:
        s.stop()


def test_a_token_is_required_when_given_and_off_localhost(tuned, capsys):
    s = Server(tuned[0], "--token", "s3cret-token")
    try:
        assert s.call("GET", "/v1/regions")[0] == 401
        assert s.call("GET", "/v1/regions", headers={"Authorization": "Bearer wrong-token"})[
            0] == 401
        assert s.call("GET", "/v1/regions",
                      headers={"Authorization": "Bearer s3cret-token"})[0] == 200
        assert s.call("GET", "/healthz")[0] == 200  # (for load balancers)
        client = Client(s.base, token="s3cret-token")
        assert client.best("small")["lane"] == "fake_tiny"
        with pytest.raises(ClientError, match="bearer token"):
            Client(s.base).best("small")
    finally:
        s.stop()
    assert main(["serve", "--db", tuned[0], "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "give --token" in err and err.count("\n") == 1


def test_the_client_keeps_answers_and_survives_a_restart(tuned):
    s = Server(tuned[0])
    client = Client(s.base, ttl=0.0)  # always asks, keeps the last answer
    try:
        by_name = client.best("small")
        assert client.best({"M": 8, "N": 16, "K": 8, "epilogue": ["bias", "relu"]}) == by_name
        assert client.best(load_spec(tuned[1]).get("small")) == by_name
        assert [r["name"] for r in client.regions()] == ["small", "wide"]
        with pytest.raises(ClientError) as e:
            client.best("nothing")
        assert e.value.status == 404
    finally:
        s.stop()
    assert client.best("small") == by_name  # the server is away: the last answer stands
    with pytest.raises(ClientError, match="cannot be reached"):
        client.best("wide")


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_a_job_posted_is_swept_by_a_worker_and_then_answered(db, tmp_path, request,
                                                             monkeypatch):
    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes("fake_tiny"))
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    url = (f"sqlite:///{tmp_path / 'jobs.db'}" if db == "sqlite"
           else request.getfixturevalue("pg_url"))
    s = Server(url)
    try:
        client = Client(s.base, ttl=0.0)
        table = {"name": "posted", "M": 16, "N": 16, "K": 8, "epilogue": ["relu"]}
        with pytest.raises(ClientError) as e:
            client.best("posted")
        assert e.value.status == 404
        job = client.submit([table], trials=3, lanes=["fake_tiny"])
        assert client.job(job)["state"] == "queued"
        worker = subprocess.run([sys.executable, "-m", "arbiter", "worker", "--db", url,
                                 "--until-done", "--poll", "0.2"],
                                capture_output=True, text=True, timeout=300)
        assert worker.returncode == 0, worker.stderr
        st = client.wait(job, timeout=30, poll=0.2)
        assert st["progress"] == {"regions": 1, "done": 1, "failed": 0, "running": 0}
        [finished] = st["regions"][0]["finished"]
        time.sleep(0.6)  # the server sees the new records within half a second
        best = client.best("posted")
        assert best["lane"] == "fake_tiny" and best["source"] == "winner"
        assert best["config"] == finished["row"]["config"]
        assert best["fingerprint"] == finished["fingerprint"]
        metrics = urllib.request.urlopen(s.base + "/metrics").read().decode()
        assert 'arbiter_jobs{state="open"} 1.0' in metrics
        assert 'route="/v1/best/{ref}"' in metrics
        assert 'arbiter_tasks{state="done"} 1.0' in metrics
    finally:
        assert "Traceback" not in s.stop()
