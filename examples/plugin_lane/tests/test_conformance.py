"""The suite every lane runs, against this one as installed (found by its entry point)."""

from arbiter.testing import LaneConformance


class TestCSoftmax(LaneConformance):
    lane_name = "c_softmax"
