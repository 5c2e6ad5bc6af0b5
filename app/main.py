"""The FastAPI application: `create_app(settings)` builds it (uvicorn factory)."""
from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from app.config import Settings, get_settings
from app.db import make_engine
from app.migrate import upgrade
from app.routes import pages

STATIC = Path(__file__).resolve().parent.parent / "static"

# Trace text is untrusted: no inline scripts, nothing from other origins.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'")


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app for `settings` (default: from the environment); migrates the database."""
    settings = settings or get_settings()
    engine = make_engine(settings.database_url)
    upgrade(engine)
    app = FastAPI(title="Rollscope", version="0.1.0",
                  description="Trace inspector for agentic RL. Every page has a JSON twin (`.json`).")
    app.state.settings = settings
    app.state.engine = engine
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.include_router(pages.router)

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        if request.url.path.endswith(".json") or "application/json" in request.headers.get("accept", ""):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
        from app.render import templates

        return templates.TemplateResponse(request, "error.html", {"status": exc.status_code, "detail": exc.detail},
                                          status_code=exc.status_code)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict:
        return {"ok": True}

    return app
