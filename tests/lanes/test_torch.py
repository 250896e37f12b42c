"""torch vendor lane: conformance on a GPU; a clean 'unavailable' reason everywhere else."""

from __future__ import annotations

import importlib.util

import pytest

from arbiter.lane import get_lane
from arbiter.testing import LaneConformance


@pytest.mark.gpu
class TestTorchConformance(LaneConformance):
    lane_name = "torch"


def test_reports_unavailable_with_reason_without_gpu_torch():
    lane = get_lane("torch")
    av = lane.available()
    if importlib.util.find_spec("torch") is None:
        assert not av and "torch not installed" in av.reason
    assert av.reason
    assert lane.platform.value in ("rocm", "cuda")


def test_tf32_is_the_default_where_the_budget_admits_it():
    """A sweep of few trials measures little but each lane's defaults: TF32 matmuls (about
    2e-4 error) are the torch lane's default at the f32 budget, not under a tighter one, and
    16-bit regions have no such tunable."""
    from arbiter import FusedRegion

    lane = get_lane("torch")
    assert lane.space(FusedRegion(64, 64, 64)).default["tf32"] is True
    assert lane.space(FusedRegion(64, 64, 64, budget=1e-4)).default["tf32"] is False
    assert {c["tf32"] for c in lane.space(FusedRegion(64, 64, 64, budget=1e-4)).configs()} \
        == {False, True}
    assert lane.space(FusedRegion(64, 64, 64, dtype="bf16")).tunables == ()
