"""Shapes nobody tuned: answered by the nearest tuned shape of the same op chain."""

from __future__ import annotations

import json
import math

import pytest

import arbiter
from arbiter import ArbiterError, AttentionRegion, FusedRegion
from arbiter.cli import main
from arbiter.records import VERIFY, Records, fingerprint
from arbiter.region import shape_distance
from tests import fake_lanes


def _fused(m, n, k, **kw):
    return FusedRegion(m, n, k, name=f"mm{m}x{n}x{k}", epilogue=("bias", "relu"), **kw)


def test_shape_distance_is_log2_within_one_op_chain():
    assert shape_distance(_fused(8, 16, 8), _fused(16, 16, 8)) == 1.0
    assert shape_distance(_fused(8, 16, 8), _fused(32, 64, 8)) == pytest.approx(math.sqrt(8))
    other_chain = FusedRegion(8, 16, 8, epilogue=("gelu",))
    assert shape_distance(_fused(8, 16, 8), other_chain) == math.inf
    # an attention scale left at its default is the same op chain at any head_dim
    a, b = AttentionRegion(1, 2, 16, 32), AttentionRegion(1, 2, 16, 64)
    assert shape_distance(a, b) == 1.0
    assert shape_distance(a, AttentionRegion(1, 2, 16, 64, scale=0.5)) == math.inf


@pytest.fixture
def tuned(tmp_path, monkeypatch):
    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes("fake_tiny"))
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    url = f"sqlite:///{tmp_path / 'arbiter.db'}"
    rows = arbiter.tune([_fused(8, 16, 8), _fused(64, 16, 8)], db=url, lanes="fake_tiny",
                        trials=6)
    return url, {r["region"]: r for r in rows}


def test_best_for_an_untuned_shape_names_its_nearest_neighbour(tuned):
    url, rows = tuned
    row = arbiter.best(_fused(16, 16, 8), db=url)
    near = rows["mm8x16x8"]  # distance 1, against 2 for 64x16x8
    assert row["source"] == "nearest" and row["status"] == "nearest"
    assert (row["lane"], row["config"]) == (near["lane"], near["config"])
    assert row["neighbour"] == {"region": "mm8x16x8", "region_key": near["region_key"],
                                "distance": 1.0, "latency_ms": near["latency_ms"],
                                "rel_error": near["rel_error"]}
    assert row["latency_ms"] is None  # measured at the neighbour's shape, not at this one
    assert row["region"] == "mm16x16x8" and row["fingerprint"] == fingerprint().hash
    assert arbiter.best(_fused(40, 16, 8), db=url)["neighbour"]["region"] == "mm64x16x8"


def test_too_far_or_another_op_chain_is_never_tuned(tuned):
    url, _ = tuned
    with pytest.raises(ArbiterError, match="nor a shape of its op chain near it"):
        arbiter.best(_fused(1024, 16, 8), db=url)  # 6 doublings away
    with pytest.raises(ArbiterError, match="never tuned"):
        arbiter.best(FusedRegion(16, 16, 8, name="g", epilogue=("gelu",)), db=url)


def test_verify_checks_the_neighbours_config_at_this_shape_and_records_it(tuned, tmp_path,
                                                                          capsys):
    url, rows = tuned
    spec = tmp_path / "spec.toml"
    spec.write_text("[[region]]\nname = 'new'\nM = 16\nN = 16\nK = 8\n"
                    "epilogue = ['bias', 'relu']\n")
    assert main(["best", str(spec), "--db", url, "--verify", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["source"] == "nearest" and row["verified"] is True
    assert 0 < row["rel_error"] < 1e-3
    records = Records(url)
    rid = records.region_id(_fused(16, 16, 8).key)
    [check] = records.results(rid, kind=VERIFY)
    assert check.status.value == "ok" and check.lane == row["lane"]
    # asked again (a verification is not a sweep): still the neighbour's answer
    assert main(["best", str(spec), "--db", url, "--json"]) == 0
    again = json.loads(capsys.readouterr().out)[0]
    assert again["source"] == "nearest" and again["config"] == row["config"]


def test_the_service_answers_an_untuned_shape_by_content(tuned):
    from tests.service.test_serve import Server

    url, rows = tuned
    s = Server(url)
    try:
        status, got = s.call("POST", "/v1/best", json.dumps(
            {"M": 16, "N": 16, "K": 8, "epilogue": ["bias", "relu"]}).encode())
        assert status == 200 and got["source"] == "nearest"
        assert got["neighbour"]["region"] == "mm8x16x8"
        assert got == arbiter.best(_fused(16, 16, 8).with_name("request"), db=url)
        status, got = s.call("POST", "/v1/best", json.dumps(
            {"M": 4096, "N": 16, "K": 8, "epilogue": ["bias", "relu"]}).encode())
        assert status == 404 and "nor a shape of its op chain near it" in got["error"]
        # a bucket's shape is its bucket's region: the tuned winner itself
        status, got = s.call("POST", "/v1/best", json.dumps(
            {"M": 5, "N": 16, "K": 8, "epilogue": ["bias", "relu"], "shapes": "bucket"}).encode())
        assert status == 200 and got["source"] == "winner" and got["region"] == "mm8x16x8"
        assert (got["lane"], got["config"]) == (rows["mm8x16x8"]["lane"],
                                                rows["mm8x16x8"]["config"])
    finally:
        s.stop()
