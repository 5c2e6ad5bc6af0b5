"""Exceptions → the error page (HTML) or a JSON body, negotiated like the page itself
(app.render.wants_json), so a page and its errors always answer in the same form. `/api/v1`,
the health endpoints and downloads (`.csv`, `.txt`, `/metrics`: app.render.is_download) always
answer JSON.

Every JSON error has one shape, on the pages' twins and on the API alike:

    {"error": {"code": "not_found", "message": "no run 'x'", "field": null}}

`code` is a stable word per kind of failure (`CODES`, or a more specific one such as
`unknown_parameter`), `message` is for a person, and `field` names the query or path parameter
(or body field) at fault, dotted for nested fields (`body` for a body that is not valid as a
whole), or is null. A 422 always names its field (tests/web/test_errors_422.py checks every
place that raises one).
"""
from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.render import error_page, is_download, wants_json

log = logging.getLogger("rollscope.errors")

CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
         406: "not_acceptable", 409: "conflict", 413: "too_large", 415: "unsupported_media_type",
         422: "invalid", 429: "too_many_requests", 500: "internal", 503: "unavailable"}


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorBody(BaseModel):
    """The one JSON error shape (OpenAPI: every error response of /api/v1)."""

    error: ErrorDetail


# The OpenAPI `responses=` of every write endpoint: its 503 (app.errors.database_error).
BUSY = {503: {"model": ErrorBody, "description": "other writes held the database longer than "
              "`ROLLSCOPE_DB__WRITE_TIMEOUT_SECONDS`, or it cannot be reached: retry after `Retry-After` seconds"}}


class ApiError(StarletteHTTPException):
    """An HTTP error with a field and a code: `raise ApiError(422, "ending must be one of ...",
    field="ending")`."""

    def __init__(self, status: int, message: str, *, field: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None, back: tuple[str, str] | None = None):
        super().__init__(status, message, headers=headers)
        self.field = field
        self.code = code or CODES.get(status, "error")
        self.back = back  # (label, url): where the HTML error page links back to (default: all runs)


def not_found(run_id: str, what: str | None = None, *, run_exists: bool, field: str | None = None) -> ApiError:
    """The 404 that names what is missing: `no run 'nope'` (linking back to the runs list), or
    `no rollout 'x' in run 'y'` for `what="rollout 'x'"` in a run that exists (linking back to
    the run). The JSON body carries the same message."""
    from app import urls

    if not run_exists or what is None:
        return ApiError(404, f"no run {run_id!r}", field=field if what is None else "run_id",
                        back=("All runs", urls.runs()))
    return ApiError(404, f"no {what} in run {run_id!r}", field=field, back=(f"Run {run_id}", urls.run(run_id)))


SOURCES = ("query", "path", "body", "header", "cookie")


def _field(loc: tuple | list, kind: str | None = None) -> str | None:
    """A pydantic error location without its source (`("query", "step")` → `step`); the source
    alone when the error is about it as a whole (`("body",)`, or a body that is not JSON, whose
    location ends in a character position: `body`)."""
    loc = tuple(loc or ())
    if loc and loc[0] in SOURCES:
        if len(loc) == 1 or kind == "json_invalid":
            return str(loc[0])
        loc = loc[1:]
    return ".".join(str(x) for x in loc) or None


def _error_field(e: dict) -> str | None:
    return _field(e.get("loc", ()), e.get("type"))


def _validation_message(errors: list[dict]) -> str:
    def why(e: dict) -> str:
        detail = (e.get("ctx") or {}).get("error") if e.get("type") == "json_invalid" else None
        return f"{e.get('msg', '')}: {detail}" if detail else str(e.get("msg", ""))

    return "; ".join(f"{_error_field(e) or 'request'}: {why(e)}" for e in errors)


def is_api(request: Request) -> bool:
    """The API, the OTLP receiver and the health endpoints answer JSON whatever the Accept
    header says (their clients are programs)."""
    return request.url.path.startswith("/api/") or request.url.path in ("/healthz", "/readyz", "/v1/traces")


def error_response(request: Request, status: int, message: str, *, field: str | None = None,
                   code: str | None = None, headers: dict[str, str] | None = None,
                   back: tuple[str, str] | None = None) -> Response:
    """The error page for browsers, `{"error": {"code", "message", "field"}}` for JSON clients."""
    if is_api(request) or is_download(request) or wants_json(request):
        body = ErrorBody(error=ErrorDetail(code=code or CODES.get(status, "error"), message=message, field=field))
        return JSONResponse(body.model_dump(), status_code=status, headers=headers)
    page = error_page(request, status, message, back=back)
    for k, v in (headers or {}).items():  # WWW-Authenticate on 401, Retry-After on 429/503: the page too
        page.headers[k] = v
    return page


RETRY_BUSY = 1  # Retry-After seconds when the write lock was not free in time
RETRY_DOWN = 5  # Retry-After seconds when the database cannot be reached


def database_error(request: Request, exc: BaseException) -> Response | None:
    """503 with `Retry-After` (RFC 9110 §15.6.4, §10.2.3) for a database error that is no fault
    of the request: the write lock not free within `ROLLSCOPE_DB__WRITE_TIMEOUT_SECONDS`, or a
    lost deadlock or serialization race (app.db.engine.lock_busy: `Retry-After: 1`), or a
    database that cannot be reached (app.store.outage.database_gone: `Retry-After: 5`). None for
    any other error (a bug: 500)."""
    from app.db.engine import lock_busy
    from app.store.outage import database_gone

    if not isinstance(exc, sa.exc.DBAPIError):
        return None
    why = (str(exc.orig).strip().splitlines() or [type(exc.orig).__name__])[0]
    if lock_busy(exc):
        log.warning("database busy on %s %s: %s", request.method, request.url.path, why)
        return error_response(request, 503, "the database is busy with other writes; retry after Retry-After seconds",
                              headers={"Retry-After": str(RETRY_BUSY)})
    if database_gone(exc):
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, why)
        return error_response(request, 503, "the database is unavailable; retry after Retry-After seconds",
                              headers={"Retry-After": str(RETRY_DOWN)})
    return None


def install(app: FastAPI) -> None:
    """Register the handlers: HTTP errors, request validation errors, database errors that are
    no fault of the request (503 with `Retry-After`: `database_error`), and anything unexpected
    (500, logged with its traceback)."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        message: Any = exc.detail
        if exc.status_code == 404 and message == "Not Found":
            message = "not found"
        return error_response(request, exc.status_code, str(message), field=getattr(exc, "field", None),
                              code=getattr(exc, "code", None), headers=getattr(exc, "headers", None),
                              back=getattr(exc, "back", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        return error_response(request, 422, _validation_message(errors) or "the request is not valid",
                              field=(_error_field(errors[0]) if errors else None) or "request")

    @app.exception_handler(sa.exc.DBAPIError)
    async def db_error(request: Request, exc: sa.exc.DBAPIError):
        return database_error(request, exc) or await unexpected(request, exc)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        # raised outside the routes (a middleware's query): the same 503 as inside them
        busy = database_error(request, exc)
        if busy is not None:
            return busy
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(request, 500, f"internal error ({type(exc).__name__})")
