"""The lease a sweep holds on one region of one environment, so that of all the processes
on one database (workers on many machines, a `tune` beside them) only its holder measures
that region's candidates there.

A lease is taken when free, held by its taker already, or silent for longer than its
`seconds` (its holder was killed, lost power or its network): the new holder resumes from
the records. A holder on this machine whose process has ended (a `tune` killed, then run
again) is not waited for. Every measurement is written in the same transaction as a renewal
of the lease, so a holder that lost it (silent too long, taken over) cannot record a candidate its
successor is measuring. A thread renews it meanwhile (a build or a long candidate).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, cast

from sqlalchemy import CursorResult, DateTime, and_, case, func, or_, select, update
from sqlalchemy.orm import Session

from .._errors import StoreError
from ._jobs import LeaseModel
from ._session import once_more_on_conflict, session_scope

__all__ = ["LEASE_SECONDS", "Lease", "LeaseLost", "changed", "db_now", "held", "holder_id"]

LEASE_SECONDS = 60.0  # silence after which a region's lease may be taken over


class LeaseLost(StoreError):
    """This process no longer holds the region it was sweeping."""


def _pid_namespace() -> str:
    """This process's pid namespace (Linux; "" elsewhere): a pid names a process only there
    (two containers may share a host name)."""
    try:
        return f"{os.stat('/proc/self/ns/pid').st_ino:x}"
    except OSError:
        return ""


def holder_id() -> str:
    """Who a lease is held by, readable in `arbiter jobs`: host, pid and a random part (pids
    repeat across machines and restarts), and the pid namespace where there is one."""
    ns = _pid_namespace()
    me = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    return f"{me}:{ns}" if ns else me


def _ended(holder: str) -> bool:
    """Is `holder` a process of this machine and pid namespace that no longer exists? (A pid
    used again by another process reads as alive: its lease is waited out, as before.)"""
    host, pid, _, ns = (holder.split(":") + ["", "", "", ""])[:4]
    if host != socket.gethostname() or not ns or ns != _pid_namespace() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: alive
        return False
    return False


def changed(s: Session, statement: Any) -> int:
    """Rows an UPDATE changed."""
    result = s.execute(statement.execution_options(synchronize_session=False))
    return cast(CursorResult, result).rowcount


def _silent(row: LeaseModel, now: datetime) -> bool:
    """Its holder has not renewed it for longer than its own lease seconds."""
    return row.heartbeat_at is None or row.heartbeat_at < now - timedelta(seconds=row.seconds)


def held(row: LeaseModel, now: datetime) -> bool:
    """Someone holds it and is alive."""
    return row.holder is not None and not _silent(row, now)


def db_now(s: Session) -> datetime:
    """The database's clock, naive UTC like every stored time."""
    t = s.scalar(select(func.current_timestamp(type_=DateTime)))
    if not isinstance(t, datetime):  # a driver that hands back text
        t = datetime.fromisoformat(str(t))
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t


class Lease:
    def __init__(self, url: str, region_id: int, environment_id: int, holder: str, *,
                 seconds: float = LEASE_SECONDS, job_id: int | None = None) -> None:
        self.url, self.region_id, self.environment_id = url, region_id, environment_id
        self.holder, self.seconds, self.job_id = holder, seconds, job_id
        self.lost = threading.Event()
        self.takeovers = 0

    def _mine(self) -> tuple:
        return (LeaseModel.region_id == self.region_id,
                LeaseModel.environment_id == self.environment_id)

    def take(self) -> str | None:
        """Take the lease; None when taken, else who holds it."""
        def attempt() -> str | None:
            with session_scope(self.url) as s:
                t = db_now(s)
                row = s.scalars(select(LeaseModel).where(*self._mine())).first()
                if row is None:
                    s.add(LeaseModel(region_id=self.region_id, environment_id=self.environment_id,
                                     holder=self.holder, job_id=self.job_id, heartbeat_at=t,
                                     taken_at=t, seconds=self.seconds, takeovers=0))
                    s.flush()
                    return None
                ended = row.holder is not None and _ended(row.holder)
                if row.holder not in (None, self.holder) and not _silent(row, t) and not ended:
                    return row.holder  # (read first: an idle worker's poll writes nothing)
                other = and_(LeaseModel.holder.is_not(None), LeaseModel.holder != self.holder)
                free = [LeaseModel.holder.is_(None), LeaseModel.holder == self.holder,
                        LeaseModel.heartbeat_at < t - timedelta(seconds=row.seconds)]
                if ended:  # (still that holder's: no other process took it meanwhile)
                    free.append(LeaseModel.holder == row.holder)
                got = changed(s, update(LeaseModel).where(*self._mine(), or_(*free))
                    .values(holder=self.holder, job_id=self.job_id, heartbeat_at=t, taken_at=t,
                            seconds=self.seconds,
                            takeovers=LeaseModel.takeovers + case((other, 1), else_=0)))
                if got != 1:
                    s.rollback()
                    return s.scalar(select(LeaseModel.holder).where(*self._mine())) or "?"
                s.expire_all()
                self.takeovers = s.scalar(select(LeaseModel.takeovers).where(*self._mine())) or 0
                self.lost.clear()
                return None

        return once_more_on_conflict(attempt)

    def hold(self, s: Session) -> None:
        """Renew inside the caller's transaction, or raise LeaseLost (the caller's writes are
        then rolled back with it)."""
        t = db_now(s)
        got = changed(s, update(LeaseModel).where(*self._mine(), LeaseModel.holder == self.holder)
                      .values(heartbeat_at=t))
        if got != 1:
            self.lost.set()
            raise LeaseLost(f"lost the lease on region #{self.region_id}: silent for more than "
                            f"{self.seconds:g} s, it was taken over")

    def renew(self) -> bool:
        try:
            with session_scope(self.url) as s:
                self.hold(s)
            return True
        except LeaseLost:
            return False

    def release(self) -> None:
        with contextlib.suppress(StoreError), session_scope(self.url) as s:
            changed(s, update(LeaseModel).where(*self._mine(), LeaseModel.holder == self.holder)
                    .values(holder=None, job_id=None, takeovers=0))

    @contextlib.contextmanager
    def kept(self) -> Iterator[Lease]:
        """Renewed by a thread every quarter of `seconds` until the block ends, then released."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.seconds / 4):
                try:
                    if not self.renew():
                        return
                except StoreError:  # the database is away for now: the next beat tries again
                    continue

        thread = threading.Thread(target=beat, name="arbiter-lease", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
            self.release()
