"""The HTTP side of Arbiter (`arbiter serve`): winners for runtimes and compilers, tune jobs
for workers, a live report page, health and metrics. Read-only on the records; a submitted
job is the one write.

Errors are a 4xx (or 500) with one JSON line, `{"error": "..."}`, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import html
import io
import json
import math
import re
import sys
import threading
import time
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import func, select
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from .._errors import ArbiterError, one_line
from .._json import dumps
from .answers import Answers, Problem, parse_budget, parse_fingerprint, parse_region
from .metrics import Metrics

__all__ = ["REFRESH_SECONDS", "make_app"]

REFRESH_SECONDS = 0.5  # how often the records are looked at for changes
JSON = "application/json"
MAX_BODY = 1 << 20
MAX_ELEMENTS = 1 << 31  # of one array of a region submitted over HTTP (8 GiB of f32)


def _json(obj: Any) -> bytes:
    return dumps(obj, sort_keys=True, default=str).encode()


def _error(status: int, message: str, url: str | None = None) -> Response:
    return Response(_json({"error": one_line(message, url)}), status, media_type=JSON)


def make_app(url: str, *, token: str | None = None) -> FastAPI:
    from .. import __version__

    answers = Answers(url)
    page_lock = threading.Lock()
    page: dict[str, Any] = {}

    def gauges() -> dict[str, tuple[str, dict[tuple, float]]]:
        from ..records import JobModel, LeaseModel, TaskModel, session_scope

        with session_scope(url) as s:
            jobs = dict(s.execute(select(JobModel.state, func.count())
                                  .group_by(JobModel.state)).all())
            tasks = dict(s.execute(select(TaskModel.state, func.count())
                                   .group_by(TaskModel.state)).all())
            held = s.scalar(select(func.count()).select_from(LeaseModel)
                            .where(LeaseModel.holder.is_not(None))) or 0
        return {
            "arbiter_jobs": ("tune jobs by state", {(("state", k),): v for k, v in jobs.items()}),
            "arbiter_tasks": ("regions of jobs finished, by outcome",
                              {(("state", k),): v for k, v in tasks.items()}),
            "arbiter_regions_being_swept": ("region leases held by workers", {(): held}),
            "arbiter_answer_cache": ("answers kept, and cache hits and misses", {
                (("kind", "entries"),): len(answers.cache), (("kind", "hits"),): answers.hits,
                (("kind", "misses"),): answers.misses}),
        }

    metrics = Metrics(gauges)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async def watch() -> None:
            while True:
                with contextlib.suppress(ArbiterError):
                    if await run_in_threadpool(answers.refresh):
                        page.clear()
                await asyncio.sleep(REFRESH_SECONDS)

        await run_in_threadpool(answers.refresh)
        task = asyncio.create_task(watch())
        yield
        task.cancel()

    app = FastAPI(title="Arbiter", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None)

    @app.exception_handler(Problem)
    async def problem(request: Request, e: Problem) -> Response:
        return _error(e.status, str(e), url)

    @app.exception_handler(ArbiterError)
    async def arbiter_error(request: Request, e: ArbiterError) -> Response:
        return _error(503, str(e), url)  # the records could not be read (the database away)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> Response:
        return _error(e.status_code, str(e.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> Response:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        return _error(400, f"{where}: {first.get('msg', 'invalid request')}")

    @app.exception_handler(Exception)
    async def internal(request: Request, e: Exception) -> Response:
        print(f"arbiter serve: {request.method} {request.url.path}: "
              f"{type(e).__name__}: {one_line(str(e), url)}", file=sys.stderr)
        return _error(500, f"internal error ({type(e).__name__})")

    def authorized(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("authorization", "")
        given = given[7:] if given.lower().startswith("bearer ") else (
            request.query_params.get("token") or "")
        if not hmac.compare_digest(given.encode(), token.encode()):
            raise Problem(401, "a bearer token is required (Authorization: Bearer ...)")

    async def cached(key: Any, compute: Any) -> Response:
        body = answers.kept(key)
        if body is None:
            generation = answers.generation
            body = answers.keep(key, _json(await run_in_threadpool(compute)), generation)
        return Response(body, media_type=JSON)

    async def body_of(request: Request) -> Any:
        """The JSON body. Only `application/json` is taken: a page elsewhere cannot send that
        to a server on this machine without the browser asking first (CORS)."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != JSON:
            raise Problem(415, "send the body as application/json")
        declared = request.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY:
            raise Problem(413, f"request body over {MAX_BODY} bytes")
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_BODY:
                raise Problem(413, f"request body over {MAX_BODY} bytes")
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise Problem(400, "the request body is not JSON") from None

    @app.get("/healthz")
    async def healthz() -> Response:
        try:
            await run_in_threadpool(answers.token)
        except ArbiterError:  # (no details: anyone may ask)
            return Response(_json({"ok": False, "records": False}), 503, media_type=JSON)
        return Response(_json({"ok": True, "records": True}), media_type=JSON)

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        authorized(request)
        text = await run_in_threadpool(generate_latest, metrics.registry)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/regions")
    async def regions(request: Request) -> Response:
        authorized(request)
        return await cached("regions", answers.regions)

    @app.get("/v1/best/{ref}")
    async def best(request: Request, ref: str) -> Response:
        authorized(request)
        q = request.query_params
        budget, fp = parse_budget(q.get("budget")), parse_fingerprint(q.get("fingerprint"))
        if len(ref) > 255:
            raise Problem(404, "no region has a name that long")
        return await cached(("best", ref, budget, fp), lambda: answers.best(ref, budget, fp))

    @app.post("/v1/best")
    async def best_of(request: Request) -> Response:
        authorized(request)
        body = await body_of(request)
        if not isinstance(body, dict):
            raise Problem(400, "expected a JSON object: a region's table, optionally under "
                          "\"region\" with \"budget\" and \"fingerprint\" beside it")
        table = body.get("region", body)
        budget = body.get("budget") if "region" in body else None
        fp = body.get("fingerprint") if "region" in body else None
        q = request.query_params
        budget = parse_budget(q.get("budget", budget))
        fp = parse_fingerprint(q.get("fingerprint", fp))
        region, unnamed = parse_region(table)
        key = ("best_of", region.key, None if unnamed else region.name, region.budget, budget,
               fp)
        return await cached(key, lambda: answers.best_of(region, unnamed, budget, fp))

    @app.post("/v1/tune", status_code=202)
    async def submit(request: Request) -> Response:
        authorized(request)
        body = await body_of(request)
        job = await run_in_threadpool(_submit, url, body)
        return Response(_json({"job": job, "url": f"/v1/jobs/{job}"}), 202, media_type=JSON)

    @app.get("/v1/jobs")
    async def jobs(request: Request) -> Response:
        authorized(request)
        from ..records import Queue

        ids = await run_in_threadpool(lambda: Queue(url, create=False).jobs())
        return Response(_json({"jobs": ids}), media_type=JSON)

    @app.get("/v1/jobs/{job_id}")
    async def job(request: Request, job_id: str) -> Response:
        authorized(request)
        if not re.fullmatch(r"[0-9]{1,18}", job_id):
            raise Problem(400, f"a job id is a number, got {job_id[:40]!r}")
        from ..records import NoJob, Queue

        try:
            st = await run_in_threadpool(lambda: Queue(url, create=False).status(int(job_id)))
        except NoJob as e:
            raise Problem(404, str(e)) from None
        return Response(_json(st), media_type=JSON)

    def render() -> dict[str, Any]:
        with page_lock:
            if page and time.monotonic() - page["at"] < 30:
                return page
            from ..report import build_report

            generation = answers.generation
            built: dict[str, Any] = {"at": time.monotonic()}
            try:
                rep = build_report(url)
            except (ArbiterError, KeyError, ValueError) as e:
                built.update(report=None, why=one_line(str(e), url) or type(e).__name__)
                return _kept_if(built, generation)
            figures = {}
            for stem, fig in rep.figures.items():
                buf = io.BytesIO()
                fig.savefig(buf, format="png", dpi=110)
                figures[stem] = buf.getvalue()
            import matplotlib.pyplot as plt

            plt.close("all")
            built.update(report=rep, figures=figures)
            return _kept_if(built, generation)

    def _kept_if(built: dict[str, Any], generation: int) -> dict[str, Any]:
        """Kept unless the records changed while it was drawn."""
        if generation == answers.generation:
            page.clear()
            page.update(built)
        return built

    @app.get("/")
    async def index(request: Request) -> Response:
        authorized(request)
        built = await run_in_threadpool(render)
        jobs_html = await run_in_threadpool(_jobs_html, url)
        suffix = f"?token={urllib.parse.quote(token, safe='')}" if token else ""
        refresh = "<meta http-equiv='refresh' content='30'>"
        if built.get("report") is None:
            return HTMLResponse(
                f"<!doctype html><html><head><meta charset='utf-8'>{refresh}<title>Arbiter"
                f"</title></head><body><h1>Arbiter</h1>{jobs_html}<p>No report yet: "
                f"{html.escape(built.get('why', ''))}</p></body></html>")
        from ..report import html_page

        return HTMLResponse(html_page(built["report"], lambda stem: f"/figures/{stem}.png"
                                      f"{suffix}", before=jobs_html, head=refresh))

    @app.get("/figures/{stem}.png")
    async def figure(request: Request, stem: str) -> Response:
        authorized(request)
        built = await run_in_threadpool(render)
        png = (built.get("figures") or {}).get(stem)
        if png is None:
            raise Problem(404, f"no figure {stem!r}")
        return Response(png, media_type="image/png")

    return metrics.middleware(app)  # type: ignore[no-any-return]


def _submit(url: str, body: Any) -> int:
    """A job from `POST /v1/tune`: a list of region tables, or {"regions": [...], options}."""
    from ..api import tune_settings
    from ..lane import lane_names
    from ..records import Queue
    from ..region import input_shapes, output_shape, parse_table
    from .workers import OPTIONS

    if isinstance(body, list):
        body = {"regions": body}
    if not isinstance(body, dict) or not isinstance(body.get("regions"), list) or not body[
            "regions"]:
        raise Problem(400, "expected a list of region tables, or {\"regions\": [...], "
                      "\"trials\": ..., \"lanes\": [...], ...}")
    unknown = set(body) - {"regions", "lanes", *OPTIONS}
    if unknown:
        raise Problem(400, f"unknown field {sorted(unknown)[0]!r} (known: regions, lanes, "
                      f"{', '.join(OPTIONS)})")
    options = {k: body[k] for k in OPTIONS if body.get(k) is not None}
    try:
        regions = [parse_table(t, f"regions[{i}]") for i, t in enumerate(body["regions"])]
        if len({r.name for r in regions}) < len(regions):
            raise ArbiterError("two regions share a name")
        for r in regions:
            biggest = max(math.prod(shape) for shape in
                          [*input_shapes(r).values(), output_shape(r)])
            if biggest > MAX_ELEMENTS:
                raise ArbiterError(f"region {r.name!r}: an array of {biggest:,} elements is "
                                   f"over the {MAX_ELEMENTS:,} a job may ask for")
        tune_settings(**options)
    except (ArbiterError, TypeError) as e:
        raise Problem(400, one_line(str(e))) from None
    lanes = body.get("lanes")
    if lanes is not None:
        known = lane_names()
        if not isinstance(lanes, list) or not all(isinstance(x, str) for x in lanes) or not lanes:
            raise Problem(400, "lanes: expected a list of lane names")
        bad = [x for x in lanes if x not in known]
        if bad:
            raise Problem(400, f"unknown lane {bad[0]!r} (known: {', '.join(known)})")
    return Queue(url).submit(regions, {"lanes": lanes, **options}, source="http")


def _jobs_html(url: str, last: int = 20) -> str:
    from ..records import Queue

    queue = Queue(url, create=False)
    ids = queue.jobs()[-last:]
    if not ids:
        return ""
    rows = []
    for i in reversed(ids):
        st = queue.status(i)
        p = st["progress"]
        rows.append(f"<tr><td>{i}</td><td>{html.escape(st['state'])}</td>"
                    f"<td>{p['done']}/{p['regions']}</td><td>{p['running']}</td>"
                    f"<td>{p['failed']}</td><td>{html.escape(st['created_at'])}</td></tr>")
    return ("<h2>Jobs</h2><table id='jobs'><thead><tr><th>job</th><th>state</th>"
            "<th>regions done</th><th>being swept</th><th>failed</th><th>submitted</th></tr>"
            f"</thead><tbody>{''.join(rows)}</tbody></table>")
