"""`arbiter serve`: winners over HTTP for runtimes and compilers, tune jobs for workers, the
latency report as a live page (FastAPI on uvicorn)."""

from __future__ import annotations

from ._answers import Answers, Problem
from ._app import make_app

__all__ = ["Answers", "Problem", "make_app"]
