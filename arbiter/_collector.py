"""The garbage collector held off while a sweep starts up.

A sweep's start-up imports SQLAlchemy and Optuna, reads the fingerprint and plans its first
region: tens of thousands of objects that live as long as the process. The collector walked
them as they came, more than once (0.12-0.15 s of a fresh process's start-up on 2 cores).
Held off until the sweep freezes what exists (`_tune`), they are walked not at all.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["hold", "release"]

_HELD = threading.local()  # this thread's `hold` stopped the collector


def hold() -> None:
    """Stop the collector for this thread's sweep start-up (unless something else has)."""
    if gc.isenabled():
        gc.disable()
        _HELD.on = True


def release() -> None:
    """Start it again if this thread's `hold` stopped it; else nothing."""
    if getattr(_HELD, "on", False):
        _HELD.on = False
        gc.enable()
