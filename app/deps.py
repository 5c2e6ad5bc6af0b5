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
