from __future__ import annotations

from arbiter.testing import LaneConformance


class TestNumpyLane(LaneConformance):
    lane_name = "numpy"
