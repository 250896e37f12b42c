"""A real PostgreSQL server for the tests that need one: started once per session by
scripts/postgres.sh (the README's command) in a temporary folder on a free port; each test
gets a database of its own."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "postgres.sh"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need_postgres() -> None:
    if shutil.which("initdb") is None and not list(Path("/usr/lib/postgresql").glob("*/bin")):
        pytest.skip("no PostgreSQL server installed (scripts/setup.sh installs Debian's)")


@pytest.fixture(scope="session")
def postgres_server():
    need_postgres()
    folder = tempfile.mkdtemp(prefix="arbiter-pg-")
    done = subprocess.run(["bash", str(SCRIPT), "start", folder, str(free_port())],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        log = Path(folder, "server.log")
        pytest.fail(f"PostgreSQL did not start: {done.stderr}"
                    f"{log.read_text() if log.exists() else ''}")
    try:
        yield done.stdout.strip()
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", folder], capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def pg_url(postgres_server):
    """A fresh, empty database on the session's server."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    base = postgres_server.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return postgres_server.rsplit("/", 1)[0] + "/" + name
