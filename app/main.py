"""The FastAPI application: `create_app(settings)` builds it (uvicorn factory)."""
from __future__ import annotations

import gc
import logging
import re
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, unquote

import sqlalchemy as sa
from fastapi import APIRouter, FastAPI, Request
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from starlette.routing import Match, Mount

from app import errors
from app.alerts import watcher
from app.api.v1 import openapi
from app.api.v1 import router as api_v1
from app.api.v1.ingest import Gate
from app.asgi import HttpMiddleware, Observed
from app.auth import ReadTokenGate, mask_access_log
from app.config import Settings, get_settings
from app.db.engine import make_engine
from app.db.migrate import upgrade
from app.db.replica import ReadRouting, replica_url
from app.read_your_writes import StampWrites
from app.receivers import otlp
from app.render import compile_templates
from app.routes import analytics, events, media, pages, status
from app.static_files import Static

STATIC = Path(__file__).resolve().parent.parent / "static"

# Trace text is untrusted: no inline scripts, nothing from other origins. `blob:` images: Plotly's PNG
# download (toImage) loads the chart's svg from a blob: URL.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'")

_KEPT_ESCAPES = re.compile(r"(%2[fFeE]|%25)")


def routing_path(raw_path: str) -> str:
    """The raw path percent-decoded except `%2F`, `%2E` and `%25`.

    Starlette routes on the fully decoded path, where `/runs/team%2Fexp-12` is indistinguishable
    from `/runs/team/exp-12`. Routing on this form keeps an encoded slash inside its segment, so
    run, rollout and group ids may contain `/`; the handlers unquote the ids they receive (which
    is exact: `%25` stays encoded too). `%2E` stays encoded so that an id ending in `.json` has a
    page of its own: its links end in `%2Ejson` (app.urls.q), where a bare `.json` is the twin
    suffix (app.render.by_id). No UTF-8 sequence contains the bytes of `/`, `.` or `%`, so
    decoding the pieces between the kept escapes separately is safe.
    """
    parts = _KEPT_ESCAPES.split(raw_path)
    return "".join(p.upper() if i % 2 else unquote(p) for i, p in enumerate(parts))


class RoutingPath:
    """ASGI middleware: route on `routing_path(raw_path)` and refuse NUL anywhere in the target
    (Postgres rejects NUL in text, and no id or filter legitimately holds one)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            # Without raw_path the slashes are already decoded; escaping `%` keeps unquoting exact.
            path = routing_path(raw.decode("latin-1")) if raw else scope["path"].replace("%", "%25")
            scope = dict(scope, path=path)
            query = scope.get("query_string", b"").decode("latin-1")
            if "\x00" in unquote(path) or any("\x00" in k or "\x00" in v
                                               for k, v in parse_qsl(query, keep_blank_values=True)):
                response = errors.error_response(Request(scope), 400, "NUL character in the URL")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def allowed_methods(app, scope) -> list[str]:
    """Every method some route of `app` answers at `scope`'s path (the routing path): those for
    which a route matches fully (FastAPI nests included routers, so each method is tried rather
    than each route's list read), HEAD wherever GET is (HeadAsGet), GET and HEAD on a static mount."""
    methods = set()
    for method in METHOD_ORDER:
        probe = dict(scope, method=method)
        for route in app.router.routes:
            if isinstance(route, Mount):
                if isinstance(route.app, StaticFiles) and method in ("GET", "HEAD") and \
                        route.matches(probe)[0] != Match.NONE:
                    methods.add(method)
            elif route.matches(probe)[0] == Match.FULL:
                methods.add(method)
                break
    if "GET" in methods:
        methods.add("HEAD")
    return [m for m in METHOD_ORDER if m in methods]


METHOD_ORDER = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")  # OPTIONS and TRACE: no route has them


class AllowEveryMethod:
    """ASGI middleware: a 405 carries every method the path supports in `Allow` (RFC 9110
    §15.5.6), not only the method of the first route whose path matched (Starlette's answer when
    GET and DELETE of one path are two routes). Inside RoutingPath, so it matches routes on the
    same path they were routed on."""

    def __init__(self, app, *, routes_of):
        self.app, self.routes_of = app, routes_of

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        routed = dict(scope)  # as routed: the router and mounts update `scope` in place on the way in

        async def send_allow(message):
            if message["type"] == "http.response.start" and message["status"] == 405:
                allow = ", ".join(allowed_methods(self.routes_of(), routed)).encode("latin-1")
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
                message = {**message, "headers": [*headers, (b"allow", allow)]}
            await send(message)

        await self.app(scope, receive, send_allow)


class HeadAsGet:
    """ASGI middleware: answer HEAD wherever GET answers, with GET's status and headers
    (Content-Length included) and no body. The app sees a GET; only the body is dropped on the
    way out. Outermost, so every page, JSON twin, error and static file gets the same."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def send_head(message):
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        # `rollscope.head`: a route that never ends its body (an event stream) answers a HEAD at once
        await self.app(dict(scope, method="GET", **{"rollscope.head": True}), receive, send_head)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app for `settings` (default: from the environment); migrates the database and
    compiles the page templates (so a new server worker's first requests do not)."""
    settings = settings or get_settings()
    mask_access_log()  # a read's `?token=` never reaches uvicorn's access log in clear
    engine = make_engine(settings.db.url, pool_size=settings.db.pool_size, max_overflow=settings.db.max_overflow,
                         write_timeout=settings.db.write_timeout_seconds)  # writes: app.db.engine.writes
    upgrade(engine)
    read_routing = replica_routing(settings, engine)
    compile_templates()
    app = FastAPI(title="Rollscope API", version="1.0.0", description=API_DESCRIPTION,
                  openapi_url="/api/openapi.json", docs_url=None, redoc_url=None)
    app.state.settings = settings
    app.state.engine = engine
    app.state.read_routing = read_routing  # None without ROLLSCOPE_DB__READ_URL
    app.mount("/static", Static(directory=STATIC), name="static")
    app.state.ingest_gate = Gate(settings.api.ingest_max_inflight)
    app.include_router(status.router)
    status.install_latency(app)
    app.include_router(api_v1)
    app.include_router(health)
    # before pages: its /runs/{run_id:path} catches the rest
    app.include_router(events.router, include_in_schema=False)
    app.include_router(analytics.router, include_in_schema=False)
    app.include_router(pages.router, include_in_schema=False)
    app.include_router(media.router, include_in_schema=False)
    app.include_router(otlp.router)

    @app.get("/api/docs", include_in_schema=False)
    def api_docs(request: Request):
        """The OpenAPI document in Swagger UI (vendored, served from static/)."""
        from app.render import templates

        return templates.TemplateResponse(request, "api_docs.html", {"openapi_url": app.openapi_url})

    openapi.install(app, locked=settings.require_read_token)
    app.add_middleware(AllowEveryMethod, routes_of=lambda: app)
    if read_routing is not None:
        app.add_middleware(StampWrites, routing=read_routing)
    app.add_middleware(ReadTokenGate, engine=engine, required=settings.require_read_token)
    app.add_middleware(RoutingPath)  # inside security_headers, so its 400s get the headers too

    app.add_middleware(RequestLog)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(HeadAsGet)  # added last: outermost

    errors.install(app)
    watcher.install(app)  # the stale-worker watcher in the lifespan, when a webhook is set
    freeze_startup_heap()
    return app


def replica_routing(settings: Settings, primary) -> ReadRouting | None:
    """The read routing to `settings.db.read_url`'s replica (app.db.replica), None without one.
    The replica's engine has the primary's pool sizes; it is not migrated (it replays the
    primary's migrations)."""
    if settings.db.read_url is None:
        return None
    replica = make_engine(replica_url(settings.db.read_url), pool_size=settings.db.pool_size,
                          max_overflow=settings.db.max_overflow)
    return ReadRouting(primary, replica, max_lag_seconds=settings.db.read_max_lag_seconds,
                       retry_seconds=settings.db.read_retry_seconds)


_FROZEN = False


def freeze_startup_heap() -> None:
    """Move everything alive after the first app is built (modules, routes, templates, the ORM's
    mappers: about 100,000 objects) into the garbage collector's permanent generation, once per
    process. A full collection otherwise walks all of them whenever a request's temporaries
    trigger one: on the 1M-rollout benchmark every third chart request paid 35-45 ms for it (its
    p95 was 3.5x its p50). Objects created later are collected as usual."""
    global _FROZEN
    if not _FROZEN:
        _FROZEN = True
        gc.collect()
        gc.freeze()


class RequestLog(Observed):
    """One line per request (`rollscope.access`): method, path as sent, status, milliseconds,
    and the token's name (set on `request.state.token_name` by the token dependency)."""

    async def http(self, scope, receive, send):
        scope.setdefault("state", {})["token_name"] = None
        await super().http(scope, receive, send)

    def observe(self, scope, status: int, seconds: float) -> None:
        raw = scope.get("raw_path")  # as sent: an id's %2F stays visible
        path = raw.decode("latin-1") if raw else scope["path"]
        access_log.info("%s %s %d %.1fms token=%s", scope["method"], path, status, seconds * 1000,
                        scope["state"].get("token_name") or "-")


class SecurityHeaders(HttpMiddleware):
    """The CSP and `nosniff` on every HTTP response (unless the response set its own)."""

    HEADERS = ((b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"))

    async def http(self, scope, receive, send):
        async def send_headers(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in self.HEADERS if k not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_headers)


API_DESCRIPTION = """Rollscope's REST API for operators: runs, training steps, metrics, groups with
both baselines, rollouts (filters, keyset pages, `fields=`), one rollout's envelope, graph and
branches, token arrays (JSON or `application/x-ndarray`), findings, labels and notes, and a run's
export in every `rollscope export` format, streamed.

Errors: `{"error": {"code", "message", "field"}}`. Reading is open unless
`ROLLSCOPE_REQUIRE_READ_TOKEN=1` is set; writing needs `Authorization: Bearer <token>` with the
`write` scope, deleting a run the `admin` scope. Ids are path segments: encode `/` as `%2F`.

The dashboard's pages are not listed here; each has a JSON twin (`.json` after its path, or
`Accept: application/json`)."""

access_log = logging.getLogger("rollscope.access")
health = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str


class Ready(BaseModel):
    status: str
    database: str
    migration: str | None
    replica: Literal["ok", "lagging", "down", "none"] = Field(
        "none", description="the read replica (`ROLLSCOPE_DB__READ_URL`) as last checked: `ok` serves reads, "
        "`lagging` is further behind than `ROLLSCOPE_DB__READ_MAX_LAG_SECONDS`, `down` does not answer "
        "(reads go to the primary in both cases), `none`: no replica set")
    replica_lag_seconds: float | None = Field(None, description="seconds the replica is behind: 0 when it has "
                                              "replayed all the primary flushed; null when unknown or no replica")
    replica_detail: str | None = Field(None, description="why the replica is down")
    reads: dict[str, int] | None = Field(None, description="with a replica: read sessions this process opened on "
                                         "each (`replica`, `primary`) since it started")


@health.get("/healthz", response_model=Health)
def healthz() -> Health:
    """Liveness: the process answers. Touches nothing else."""
    return Health(status="ok")


@health.get("/readyz", response_model=Ready, responses={503: {"model": errors.ErrorBody}})
def readyz(request: Request):
    """Readiness: the database answers and its schema is at the latest migration. 503 otherwise
    (a load balancer sends no traffic until then). With a read replica, also its state and lag
    (`replica`, `replica_lag_seconds`) and the reads each engine served: a replica lagging or down
    leaves the server ready (reads fall back to the primary)."""
    from alembic.script import ScriptDirectory

    from app.db.migrate import alembic_config

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    try:
        with request.app.state.engine.connect() as conn:
            current = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    except Exception as exc:  # noqa: BLE001 - any failure means not ready
        return errors.error_response(request, 503, f"database unreachable: {type(exc).__name__}", code="unavailable")
    if current != head:
        return errors.error_response(request, 503, f"database schema at {current}, code expects {head}",
                                     code="unavailable")
    routing = request.app.state.read_routing
    if routing is None:
        return Ready(status="ready", database="ok", migration=current)
    # the last check, unless there was none yet: a load balancer's probe adds no load on the replica
    check = routing.check() or routing.check(fresh=True)
    return Ready(status="ready", database="ok", migration=current, replica=check.state,
                 replica_lag_seconds=check.lag_seconds, replica_detail=check.detail, reads=dict(routing.reads))
