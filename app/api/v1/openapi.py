"""The OpenAPI document, told the truth about what the app around the routes does.

FastAPI writes the document from the routes alone; the middlewares and the settings change what a
client meets, so `install(app, settings)` amends the document once, when it is first built:

- security: an operation that needs a `write` or `admin` token (`WriteToken` / `AdminToken` in
  its signature) requires `Authorization: Bearer`; a read is open (`security: [{}, bearer]`, RFC:
  OpenAPI 3.1 §4.8.30, an empty requirement makes it optional) unless
  `ROLLSCOPE_REQUIRE_READ_TOKEN` is set, when it requires one (app.auth.ReadTokenGate locks every
  GET but `/healthz`);
- responses: the codes each operation can answer, from what the app does around it: 400 for a NUL
  anywhere in the URL (app.main.RoutingPath), 401 with `WWW-Authenticate` (a missing, unknown or
  revoked token; on an open read only a wrong token), 403 where a scope above `read` is needed,
  404 where a path names a resource, 422 for an invalid or unknown query parameter
  (app.deps.refuse_unknown_query, on every `/api/v1` operation), 503 with `Retry-After` where a
  token is looked up or a write is stored (the database is unavailable or busy);
- parameters: a string in the URL never holds NUL (RoutingPath refuses it: a pattern says so), a
  path segment is never empty;
- `POST /api/v1/ingest` takes its body as `application/x-ndjson` (gzip allowed, app.receivers.body),
  which FastAPI cannot see (the route reads the raw body).

A method a path does not have is answered 405 with every method it has in `Allow`
(app.main.AllowEveryMethod); that is an answer of the path, not of an operation, so it is not
listed per operation.
"""
from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import iter_route_contexts

from app.deps import AdminToken, WriteToken
from app.errors import ErrorBody

NO_NUL = r"^[^\x00]*$"  # any string without NUL (app.main.RoutingPath answers 400 for one)
NO_NUL_SEGMENT = r"^[^\x00]+$"
BEARER = "HTTPBearer"
_WRITE = WriteToken.__metadata__[0].dependency
_ADMIN = AdminToken.__metadata__[0].dependency
_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "required": True,
                                "schema": {"type": "integer", "minimum": 0}}}
_WWW_AUTHENTICATE = {"WWW-Authenticate": {"description": "`Bearer`", "required": True,
                                          "schema": {"type": "string"}}}
DESCRIPTIONS = {
    400: "a NUL character in the URL", 401: "no token, or an unknown or revoked one",
    403: "the token lacks the scope", 404: "no such resource",
    408: "the body stopped arriving (`api.body_timeout_seconds`): the connection is closed",
    413: "the body is larger than the limit",
    415: "the body or its encoding is not one this operation takes", 422: "a parameter is invalid or unknown",
    429: "too many requests in flight: retry after `Retry-After` seconds",
    503: "the database is unavailable or busy: retry after `Retry-After` seconds",
}
_CONNECTION_CLOSE = {"Connection": {"description": "`close`", "required": True, "schema": {"type": "string"}}}
HEADERS = {401: _WWW_AUTHENTICATE, 408: _CONNECTION_CLOSE, 429: _RETRY_AFTER, 503: _RETRY_AFTER}
INGEST_BODY = {
    # an empty body is zero records when `format=` names the reader (and a 422 when there is nothing to detect)
    "required": False,
    "description": "NDJSON: one record per line, in any format Rollscope reads (detected by content, or "
                   "`format=`). May be gzip: `Content-Encoding: gzip`, or gzip bytes as they are. Empty: no "
                   "records (with `format=`; without it, a 422: there is nothing to detect).",
    "content": {"application/x-ndjson": {"schema": {"type": "string", "format": "binary"}}},
}


def _calls(dependant) -> set:
    out = {dependant.call}
    for sub in dependant.dependencies:
        out |= _calls(sub)
    return out


def needed_scope(route) -> str | None:
    """`route` (an API route, or FastAPI's context of one): `admin` or `write` when it names
    `AdminToken` or `WriteToken`; `read` for the rest of `/api/v1` (its router's read check); None
    for the open routes (health)."""
    calls = _calls(route.dependant)
    if _ADMIN in calls:
        return "admin"
    if _WRITE in calls:
        return "write"
    return "read" if route.path.startswith("/api/v1") else None


def codes(route, method: str, scope: str | None, *, locked: bool) -> set[int]:
    """The error statuses `method` on `route` can answer (see the module docstring)."""
    out = {400}
    in_api = route.path.startswith("/api/v1")
    gated = scope is not None or (locked and method == "GET" and route.path != "/healthz")
    if gated:
        out.add(401)
    if scope in ("write", "admin"):
        out |= {403, 503}
    elif scope == "read":
        out.add(503)  # a token sent with a read is looked up
    if in_api:
        out.add(422)
    if "{" in route.path:
        out.add(404)
    return out


def amend(doc: dict[str, Any], app: FastAPI, *, locked: bool) -> dict[str, Any]:
    """`doc` (FastAPI's document of `app`) amended in place; returns it."""
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    error = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in error.pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    schemas.setdefault("ErrorBody", error)
    for route in iter_route_contexts(app.routes):  # through FastAPI's included routers
        if getattr(route, "dependant", None) is None or not route.include_in_schema:
            continue
        scope = needed_scope(route)
        for method in route.methods:
            op = doc["paths"].get(route.path_format, {}).get(method.lower())
            if op is None:
                continue
            _security(op, method, scope, locked=locked, path=route.path)
            declared = {int(k) for k in route.responses if str(k).isdigit() and int(k) >= 400}
            _responses(op, codes(route, method, scope, locked=locked) | declared,
                       headers=HEADERS if route.path.startswith("/api/v1") else {401: _WWW_AUTHENTICATE})
            _parameters(op)
            if route.path == "/api/v1/ingest" and method == "POST":
                op["requestBody"] = INGEST_BODY
            if "requestBody" in op:  # too large (413), or not in the media type it takes (415)
                _responses(op, {int(k) for k in op["responses"] if k.isdigit() and int(k) >= 400} | {413, 415},
                           headers=HEADERS)
    return doc


def _security(op: dict, method: str, scope: str | None, *, locked: bool, path: str) -> None:
    if scope in ("write", "admin") or (locked and method == "GET" and path != "/healthz"):
        op["security"] = [{BEARER: []}]
    elif scope == "read":
        op["security"] = [{}, {BEARER: []}]
    else:
        op.pop("security", None)


def _responses(op: dict, statuses: set[int], *, headers: dict[int, dict]) -> None:
    """Error responses: exactly `statuses`, in the one error shape, with the `headers` of each
    status (`/readyz`'s 503 carries no `Retry-After`); the descriptions a route gave its own
    (ingest's 413, 415, 429, 503) are kept."""
    responses = op.setdefault("responses", {})
    kept = {k: v for k, v in responses.items() if not k.isdigit() or int(k) < 400}
    for status in sorted(statuses):
        entry = responses.get(str(status)) or {"description": DESCRIPTIONS[status], "content": _ERROR}
        if status in headers:
            entry = {**entry, "headers": headers[status]}
        kept[str(status)] = entry
    op["responses"] = dict(sorted(kept.items()))


def _string_schemas(schema: dict):
    """The string branches of a parameter's schema (itself, or inside anyOf)."""
    if schema.get("type") == "string":
        yield schema
    for branch in schema.get("anyOf", []):
        yield from _string_schemas(branch)


def _parameters(op: dict) -> None:
    for param in op.get("parameters", []):
        if param["in"] not in ("path", "query"):
            continue
        for s in _string_schemas(param.get("schema", {})):
            if "pattern" not in s and "enum" not in s and s.get("format") != "binary":
                s["pattern"] = NO_NUL_SEGMENT if param["in"] == "path" else NO_NUL
            if param["in"] == "path":
                s.setdefault("minLength", 1)


def install(app: FastAPI, *, locked: bool) -> None:
    """Make `app.openapi()` return the amended document (built once, then cached by FastAPI)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = amend(build(), app, locked=locked)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
