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
