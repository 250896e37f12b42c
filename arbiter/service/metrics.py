"""Prometheus metrics for `arbiter serve`: requests and their latencies per route (a plain
ASGI middleware, cheap on the hot path), the answer cache, and jobs and workers read from the
database at scrape time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

__all__ = ["Metrics"]

BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)


class Metrics:
    def __init__(self, gauges: Callable[[], dict[str, tuple[str, dict[tuple, float]]]]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("arbiter_http_requests", "HTTP requests answered",
                                ("method", "route", "status"), registry=self.registry)
        self.seconds = Histogram("arbiter_http_request_seconds", "time to answer a request",
                                 ("route",), buckets=BUCKETS, registry=self.registry)
        self._gauges = gauges
        self.registry.register(self)  # type: ignore[arg-type]  # (a custom collector)

    def collect(self) -> Any:
        for name, (help_text, values) in self._gauges().items():
            labels = sorted({k for key in values for k, _ in key})
            family = GaugeMetricFamily(name, help_text, labels=labels)
            for key, v in values.items():
                d = dict(key)
                family.add_metric([str(d.get(k, "")) for k in labels], v)
            yield family

    def middleware(self, app: Any) -> Any:
        async def timed(scope: dict, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            start = time.perf_counter()
            status = [500]

            async def sent(message: dict) -> None:
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                await send(message)

            try:
                await app(scope, receive, sent)
            finally:
                route = getattr(scope.get("route"), "path", "unmatched")
                self.seconds.labels(route).observe(time.perf_counter() - start)
                self.requests.labels(scope["method"], route, str(status[0])).inc()

        return timed
