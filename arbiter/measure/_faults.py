"""Failures the environment caused, told from the candidate's own.

A candidate that fails its build, its launch or its run is recorded so, and never measured
again on that machine. That is right for what the candidate did (a compile error, a segfault,
a hang); it is wrong for what was done to it: a compiler that found the cache disk full
(ENOSPC), a worker killed by someone else (SIGKILL, SIGTERM), a timeout too small for it.
Those are recorded with their `cause` (the errno or the signal) or with the timeout they ran
under, and a later sweep measures them again: a cause is retried on every later run (the disk
may have been freed, no one may kill it then), a timeout when the run allows more time, an
`out_of_memory` when the worker may hold more (`ARBITER_WORKER_MEMORY`).

A compiler tells of a full disk only in its output, so the cause is read from the log, in the
words the C library (strerror) and the worker use.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re

from ..lane import Status
from ._measurement import Measurement

__all__ = ["ENVIRONMENT_ERRNOS", "OUTSIDE_SIGNALS", "environment_cause", "with_cause"]

# the environment's resources running out: not a property of the candidate
ENVIRONMENT_ERRNOS = ("ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EMFILE", "ENFILE")
# signals a process gets from others (a person, a job scheduler, the kernel's OOM killer) or
# from limits set on the whole run; a candidate's own crash is SIGSEGV, SIGBUS, SIGABRT...
OUTSIDE_SIGNALS = ("SIGKILL", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGXFSZ", "SIGXCPU")
FAILURES = (Status.COMPILE_FAILED, Status.LAUNCH_FAILED, Status.CRASHED, Status.TIMEOUT)

_WORDS = [(os.strerror(getattr(errno, name)), name) for name in ENVIRONMENT_ERRNOS]
# what compiler drivers say of a tool killed by a signal (gcc: "Killed signal terminated
# program cc1"; "File size limit exceeded")
_WORDS += [("Killed signal terminated program", "SIGKILL"),
           ("File size limit exceeded", "SIGXFSZ"), ("CPU time limit exceeded", "SIGXCPU")]
_KILLED = re.compile(r"\bkilled by (SIG[A-Z0-9]+)")
_WORKERS_OWN = "the worker's own part of the request"  # (_worker: its start-up, not the kernel)


def environment_cause(status: Status, log: str) -> str | None:
    """The environment's part in a failure: an errno name, a signal name, or "worker" (the
    worker's own preparation ran out of time); None when the failure is the candidate's (or
    there is no failure)."""
    if status not in FAILURES:
        return None
    if status is Status.CRASHED:
        killed = _KILLED.search(log)
        if killed and killed.group(1) in OUTSIDE_SIGNALS:
            return killed.group(1)
    if status is Status.TIMEOUT and _WORKERS_OWN in log:
        return "worker"
    return next((name for words, name in _WORDS if words in log), None)


def with_cause(m: Measurement, timeout: float | None,
               memory_limit: int | None = None) -> Measurement:
    """`m` with the limits it ran under (seconds, bytes) and, when the environment failed
    it, the cause."""
    return dataclasses.replace(m, timeout=timeout, memory_limit=memory_limit,
                               cause=environment_cause(m.status, m.log))
