"""The worker process (`python -m arbiter.measure._child`): it loads built candidates, checks
them against the oracle and times them, one request at a time, for the parent (`_worker`).

Requests come pickled on stdin, each a length and a pickle; replies go the same way to the
process's original stdout, while fd 1 is pointed at stderr, so a chatty lane cannot corrupt
the protocol. Everything a lane raises becomes an ("error", text) reply; a crash or a hang is
the parent's to see. Before its reply, a request may send ("own", False) when the candidate's
part starts (the worker's own part, start-up, inputs and references, came first), and
("own", True) / ("own", False) around waiting for a busy machine: the parent's deadline
counts the candidate's part only.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
import sys
import traceback
from collections.abc import Callable
from typing import Any, BinaryIO

__all__ = ["HEADER", "read_message", "write_message"]

HEADER = struct.Struct("<Q")


def write_message(out: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(HEADER.pack(len(data)) + data)
    out.flush()


def read_message(inp: BinaryIO) -> Any:
    """The next message; None at end of file."""
    head = inp.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    return pickle.loads(inp.read(HEADER.unpack(head)[0]))


def _handle(req: dict[str, Any], load: Any, own: Callable[[bool], None]) -> Any:
    from ..check import cases
    from ..lane import get_lane
    from ._trial import check_and_time, finals

    if req["op"] == "finals":
        entries = [(get_lane(name), artifact) for name, artifact in req["entries"]]
    else:
        lane = get_lane(req["lane"])
    cases(req["region"], req["seeds"])  # the inputs and their float64 reference: ours
    own(False)  # the candidate's part, from here
    if req["op"] == "finals":
        return finals(entries, req["region"], req["budget"], req["seeds"], req["timing"], load)
    return check_and_time(lane, req["region"], req["artifact"], req["budget"], req["ceiling"],
                          req["seeds"], req["timing"], load)


def serve(inp: BinaryIO, out: BinaryIO, parent: int | None) -> None:
    from ._load import Load

    def own(yes: bool) -> None:  # the worker's own part starts (True) or ends
        write_message(out, ("own", yes))

    load = Load([parent] if parent else [], own)
    while (req := read_message(inp)) is not None:
        try:
            reply: Any = ("ok", _handle(req, load, own))
        except Exception:  # noqa: BLE001  what a lane raised is the trial's result
            reply = ("error", traceback.format_exc(limit=8))
        write_message(out, reply)


def _die_with(parent: int) -> None:
    """SIGKILL this worker when its parent ends, however it ends: it leads a process group of
    its own, and a kernel hung in it would run on (Linux)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it ended before that
        os._exit(1)


def main(argv: list[str]) -> None:
    import faulthandler

    faulthandler.enable()  # a segfault leaves the Python stack in the trial's log
    parent = next((int(a.removeprefix("--parent=")) for a in argv if a.startswith("--parent=")),
                  None)
    if parent is not None:
        _die_with(parent)
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    serve(sys.stdin.buffer, replies, parent)


if __name__ == "__main__":
    # the importable module's copy, so pickled values name arbiter.measure, not __main__
    from arbiter.measure._child import main as _main

    _main(sys.argv[1:])
