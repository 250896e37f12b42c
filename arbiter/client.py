"""A small client of `arbiter serve` for runtimes and compilers: the best lane per region,
kept in a local cache, standard library only.

    from arbiter.client import Client
    best = Client("http://tuner:8765", token="...").best("mm_relu", fingerprint="e567...")

An answer is kept for `ttl` seconds; when the server cannot be reached (or answers 5xx: its
database away), the last answer kept is given (however old) rather than none, so a runtime
keeps running through a restart.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from typing import Any

from ._errors import ArbiterError

__all__ = ["Client", "ClientError"]

KEPT = 4096  # answers a client keeps


class ClientError(ArbiterError):
    """The server said no (`status` is its HTTP status; 0 when it could not be reached)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Client:
    def __init__(self, url: str, token: str | None = None, *, timeout: float = 5.0,
                 ttl: float = 60.0) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ClientError(f"expected an http(s):// URL of `arbiter serve`, got {url!r}")
        self.scheme, self.host, self.port = u.scheme, u.hostname, u.port
        self.base = u.path.rstrip("/")
        self.token, self.timeout, self.ttl = token, timeout, ttl
        self._kept: dict[Any, tuple[float, Any]] = {}
        self._local = threading.local()  # one keep-alive connection per thread

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = (http.client.HTTPSConnection if self.scheme == "https"
                   else http.client.HTTPConnection)
            conn = self._local.conn = cls(self.host, self.port, timeout=self.timeout)
        return conn

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One call; the reply's JSON. Raises ClientError with the server's one line."""
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        while True:
            reused = getattr(self._local, "conn", None) is not None
            conn = self._connection()
            try:
                conn.request(method, self.base + path, body=data, headers=headers)
                reply = conn.getresponse()
                raw = reply.read()
                break
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self._local.conn = None
                # a kept-alive connection the server had closed is opened again, once; a
                # timeout is not retried (the server may have done it: a job submitted twice)
                if not (reused and isinstance(e, (ConnectionResetError, BrokenPipeError,
                                                  http.client.RemoteDisconnected))):
                    raise ClientError(f"arbiter serve at {self.host}:{self.port} cannot be "
                                      f"reached: {e}") from None
        try:
            out = json.loads(raw)
        except ValueError:
            raise ClientError(f"{method} {path}: not JSON ({reply.status})", reply.status) from None
        if reply.status >= 400:
            message = out.get("error") if isinstance(out, dict) else None
            raise ClientError(f"{method} {path}: {message or reply.status}", reply.status)
        return out

    def best(self, region: str | dict[str, Any] | Any, *, budget: float | None = None,
             fingerprint: str | None = None) -> dict[str, Any]:
        """The winner for a region given by name or key, by its spec table (a dict), or as a
        Region; the same object `arbiter best --json` prints."""
        if isinstance(region, str):
            q = {k: v for k, v in (("budget", budget), ("fingerprint", fingerprint))
                 if v is not None}
            path = f"/v1/best/{urllib.parse.quote(region, safe='')}"
            call: tuple[str, str, Any] = (
                "GET", path + ("?" + urllib.parse.urlencode(q) if q else ""), None)
        else:
            if not isinstance(region, dict):
                from .region import region_table

                region = region_table(region)
            call = ("POST", "/v1/best", {"region": region, "budget": budget,
                                          "fingerprint": fingerprint})
        key = json.dumps(call, sort_keys=True, default=str)
        kept = self._kept.get(key)
        if kept is not None and kept[0] > time.monotonic():
            return kept[1]
        try:
            out = self.request(*call)
        except ClientError as e:
            if (e.status == 0 or e.status >= 500) and kept is not None:
                return kept[1]  # the server (or its database) is away: the last answer stands
            raise
        if len(self._kept) >= KEPT:
            for old in list(self._kept)[:KEPT // 2]:  # the oldest half
                del self._kept[old]
        self._kept.pop(key, None)
        self._kept[key] = (time.monotonic() + self.ttl, out)
        return out

    def regions(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/regions")

    def submit(self, regions: list[dict[str, Any]], **options: Any) -> int:
        """A tune job for the workers; its id."""
        return self.request("POST", "/v1/tune", {"regions": regions, **options})["job"]

    def job(self, job_id: int) -> dict[str, Any]:
        return self.request("GET", f"/v1/jobs/{int(job_id)}")

    def wait(self, job_id: int, timeout: float = 3600.0, poll: float = 1.0) -> dict[str, Any]:
        """The job's status once it is done (or cancelled); ClientError after `timeout`."""
        end = time.monotonic() + timeout
        while True:
            st = self.job(job_id)
            if st["state"] in ("done", "cancelled"):
                return st
            if time.monotonic() > end:
                raise ClientError(f"job {job_id} is still {st['state']} after {timeout:g} s")
            time.sleep(poll)
