"""JSON request bodies taken as the HTTP semantics say: the media type first, then the size, then
the fields.

RFC 9110 §15.5.16: content in a media type the operation does not take is a 415 (Unsupported
Media Type), not a 422 about its fields; §15.5.14: content larger than the operation takes is a
413 (Content Too Large), refused before more of it is read than the limit. FastAPI reads any
body as JSON, whole, and answers 422; `json_body(Model, limit)` is a parameter type that reads
it this way instead, in the one error shape (app.errors), and the OpenAPI document still shows
the body (`body_openapi`).
"""
from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from app.errors import ApiError


def is_json(content_type: str) -> bool:
    """`application/json` or a `+json` type (RFC 6839 §3.1), parameters aside."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def read_json_bytes(request: Request, limit: int) -> bytes:
    """The body's bytes: 415 unless it says it is JSON, 413 (before reading past `limit`) when it
    is larger than `limit` bytes."""
    if not is_json(request.headers.get("content-type", "")):
        raise ApiError(415, "the body must be JSON: send `Content-Type: application/json`", field="body")
    too_large = ApiError(413, f"the body is larger than {limit} bytes", field="body")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def json_body(model: type[BaseModel], limit: int) -> Any:
    """A parameter type: the body parsed as `model` (415, 413, then 422 naming the field)."""

    async def parse(request: Request) -> BaseModel:
        raw = await read_json_bytes(request, limit)
        try:
            return model.model_validate_json(raw)
        except ValidationError as exc:
            raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]) from None

    return Annotated[model, Depends(parse)]


def body_openapi(model: type[BaseModel]) -> dict:
    """`openapi_extra` declaring `model` as the required `application/json` body."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
