"""Exceptions → the error page (HTML) or a JSON body, negotiated like the page itself
(app.render.wants_json), so a page and its errors always answer in the same form.

JSON errors have one shape: `{"detail": message}`, where a validation error's message is the
list of pydantic errors (`loc`, `msg`, `type`).
"""
from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.render import error_page, wants_json


def _readable(detail: Any) -> str:
    """Validation errors as one readable line each; anything else as text."""
    if isinstance(detail, list):
        return "; ".join(f"{'.'.join(str(x) for x in e.get('loc', ())[1:]) or 'request'}: {e.get('msg', '')}"
                         for e in detail)
    return str(detail)


def error_response(request: Request, status: int, detail: Any) -> Response:
    """The error page for browsers, `{"detail": ...}` for JSON clients."""
    if wants_json(request):
        return JSONResponse({"detail": jsonable_encoder(detail)}, status_code=status)
    return error_page(request, status, _readable(detail))


def install(app: FastAPI) -> None:
    """Register the handlers: HTTP errors and request validation errors."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return error_response(request, exc.status_code, exc.detail)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        return error_response(request, 422, exc.errors())
