"""The triton lane's conformance suite under Triton's interpreter, on the CPU.

Not collected by default (the name lacks `test_`): the interpreter is chosen when triton is
first imported, so this suite runs in a process of its own, started by
tests/lanes/test_triton.py, or by hand:
`ARBITER_TRITON_INTERPRET=1 python3 -m pytest tests/lanes/triton_interpreted.py`.
"""

from __future__ import annotations

import pytest

from arbiter.settings import settings
from arbiter.testing import LaneConformance

pytestmark = pytest.mark.skipif(not settings().triton_interpret,
                                reason="needs ARBITER_TRITON_INTERPRET=1 (see the docstring)")


class TestTritonInterpreted(LaneConformance):
    lane_name = "triton"
    sampled_configs = 2
