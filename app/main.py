"""The FastAPI application: `create_app(settings)` builds it (uvicorn factory)."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import parse_qsl, unquote

from fastapi import FastAPI, Request
from fastapi.staticfiles import StaticFiles

from app import errors
from app.auth import ReadTokenGate
from app.config import Settings, get_settings
from app.db.engine import make_engine
from app.db.migrate import upgrade
from app.routes import analytics, pages

STATIC = Path(__file__).resolve().parent.parent / "static"

# Trace text is untrusted: no inline scripts, nothing from other origins.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'")

_KEPT_ESCAPES = re.compile(r"(%2[fF]|%25)")


def routing_path(raw_path: str) -> str:
    """The raw path percent-decoded except `%2F` and `%25`.

    Starlette routes on the fully decoded path, where `/runs/team%2Fexp-12` is indistinguishable
    from `/runs/team/exp-12`. Routing on this form keeps an encoded slash inside its segment, so
    run, rollout and group ids may contain `/`; the handlers unquote the ids they receive (which
    is exact: `%25` stays encoded too). No UTF-8 sequence contains the bytes of `/` or `%`, so
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

        await self.app(dict(scope, method="GET"), receive, send_head)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app for `settings` (default: from the environment); migrates the database."""
    settings = settings or get_settings()
    engine = make_engine(settings.db.url)
    upgrade(engine)
    app = FastAPI(title="Rollscope", version="0.1.0",
                  description="Trace inspector for agentic RL. Every page has a JSON twin (`.json`).")
    app.state.settings = settings
    app.state.engine = engine
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.include_router(analytics.router)  # before pages: its /runs/{run_id:path} catches the rest
    app.include_router(pages.router)

    app.add_middleware(ReadTokenGate, engine=engine, required=settings.require_read_token)
    app.add_middleware(RoutingPath)  # inside security_headers, so its 400s get the headers too

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    app.add_middleware(HeadAsGet)  # added last: outermost

    errors.install(app)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict:
        return {"ok": True}

    return app
