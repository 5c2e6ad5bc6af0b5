"""Request dependencies, as Annotated aliases in one place."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlmodel import Session

from app.config import Settings
from app.errors import ApiError


def get_session(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine) as session:
        yield session


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]

_allowed_query: dict[int, frozenset[str]] = {}


def _query_names(dependant) -> set[str]:
    """The query parameter names of an endpoint and all its sub-dependencies."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def refuse_unknown_query(request: Request) -> None:
    """422 `unknown_parameter` for a query parameter the endpoint does not take: a typo
    (`?stepp=3`) must not silently return everything. Put on a router (`dependencies=[...]`)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    allowed = _allowed_query.get(id(route))
    if allowed is None:
        allowed = _allowed_query[id(route)] = frozenset(_query_names(dependant))
    for name in request.query_params.keys():
        if name not in allowed:
            takes = ", ".join(sorted(allowed)) or "none"
            raise ApiError(422, f"unknown query parameter {name!r} (this endpoint takes: {takes})",
                           field=name, code="unknown_parameter")


RefuseUnknownQuery = Depends(refuse_unknown_query)


# --- tokens and scopes ------------------------------------------------------------------------
# Tokens are issued, hashed and verified by app.auth (built with the live-ingest worker). Here
# they become dependencies: the token's name goes on `request.state.token_name` for the request
# log (app.main), and a missing scope is a 401 (no or unknown token) or 403 (too weak a token).

SCOPE_ORDER = {"read": 0, "write": 1, "admin": 2}


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def current_token(request: Request, session: SessionDep):
    """The verified token of the request, or None when none was sent. 401 for an unknown or
    revoked token."""
    raw = _bearer(request)
    if raw is None:
        return None
    try:
        from app import auth
    except ImportError:
        auth = None
    token = auth.verify(session, raw) if auth is not None else None
    if token is None:
        raise ApiError(401, "unknown or revoked token", code="unauthorized", headers={"WWW-Authenticate": "Bearer"})
    request.state.token_name = token.name
    return token


def require_scope(scope: str, *, optional: bool = False):
    """A dependency: the request's token must hold `scope` (a higher scope includes the lower:
    admin ⊃ write ⊃ read). With `optional`, no token is fine unless the settings require one
    for reading (`ROLLSCOPE_API__REQUIRE_READ_TOKEN`)."""

    def dependency(request: Request, token=Depends(current_token)):
        if token is None:
            if optional and not request.app.state.settings.api.require_read_token:
                return None
            raise ApiError(401, f"this needs a token with the {scope!r} scope (Authorization: Bearer ...)",
                           code="unauthorized", headers={"WWW-Authenticate": "Bearer"})
        held = max((SCOPE_ORDER.get(s, -1) for s in _scopes(token)), default=-1)
        if held < SCOPE_ORDER[scope]:
            raise ApiError(403, f"token {token.name!r} lacks the {scope!r} scope", code="forbidden")
        return token

    return dependency


def _scopes(token) -> list[str]:
    scopes = getattr(token, "scopes", None)
    if scopes is None:
        scopes = [getattr(token, "scope", "read")]
    return [scopes] if isinstance(scopes, str) else list(scopes)


ReadToken = Annotated[object | None, Depends(require_scope("read", optional=True))]
WriteToken = Annotated[object, Depends(require_scope("write"))]
AdminToken = Annotated[object, Depends(require_scope("admin"))]
