"""A GPU kernel that writes into its device inputs is caught by the runner (issue 41, item 1):
the runner reads each device input back and compares it with what it copied in."""

from __future__ import annotations

import dataclasses
import os

import pytest

from arbiter import FusedRegion, Status
from arbiter.check import fresh_seeds
from arbiter.lane import KernelSource, get_lane
from arbiter.measure import Load, Timing
from arbiter.measure._trial import check_and_time
from arbiter.settings import override

pytestmark = pytest.mark.gpu

REGION = FusedRegion(64, 96, 32, name="clobber", epilogue=("bias", "gelu"))


@pytest.fixture(scope="module")
def lane(tmp_path_factory):
    ln = get_lane("hip_scalar")
    av = ln.available()
    if not av:
        pytest.skip(f"hip_scalar not available here: {av.reason}")
    if os.environ.get("ARBITER_CACHE_DIR"):
        yield ln
        return
    with override(cache_dir=tmp_path_factory.mktemp("gpu-inputs-cache")):
        yield ln


def _clobbering(source: KernelSource) -> KernelSource:
    """The kernel, then input A zeroed on the device in the same launch."""
    end = "    return hipGetLastError();\n}\n\n#include \"arb_runner.h\""
    assert end in source.text
    return dataclasses.replace(source, text=source.text.replace(
        end, "    (void)hipMemsetAsync((void*)in[0], 0, "
        "(size_t)arb_input_elems[0] * sizeof(arb_store_t), stream);\n" + end))


def test_a_kernel_that_zeroes_a_device_input_is_inputs_changed(lane):
    config = lane.space(REGION).default
    seeds = fresh_seeds()
    honest = lane.build(lane.emit(REGION, config))
    bad = lane.build(_clobbering(lane.emit(REGION, config)))
    timing = Timing(warmup=1, rounds=2, wait=0.0)
    m = check_and_time(lane, REGION, bad, 1e-3, 1e-2, seeds, timing, Load())
    assert m.status is Status.INPUTS_CHANGED and "device input 'A'" in m.log, m.log
    ok = check_and_time(lane, REGION, honest, 1e-3, 1e-2, seeds, timing, Load())
    assert ok.status is Status.OK and ok.samples, ok.log
