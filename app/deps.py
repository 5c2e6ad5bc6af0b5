"""Request dependencies, as Annotated aliases in one place."""
from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPBearer
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlmodel import Session

from app import auth
from app.config import Settings
from app.db.engine import writes
from app.errors import ApiError
from app.read_your_writes import client_lsn
from app.store.outage import lost_a_race

T = TypeVar("T")


async def get_session(request: Request) -> AsyncIterator[Session]:
    """A session for the request. Opening one touches no database (a connection is taken on the
    first query, in the endpoint's thread), so it opens on the event loop; closing it returns the
    connection to the pool, which is database work, so it closes in the thread pool. Each hop to
    the thread pool waits for the GIL behind busy threads: under load they add up (bench/load.py).

    With a read replica (`ROLLSCOPE_DB__READ_URL`) a GET's session is opened by app.db.replica in
    the thread pool (it may check the replica, and takes the replica's connection up front so a
    replica gone falls back to the primary); other methods' sessions stay on the primary."""
    routing = getattr(request.app.state, "read_routing", None)
    if routing is None or request.method != "GET":  # HEAD arrives as GET (app.main.HeadAsGet)
        session = Session(request.app.state.engine)
        try:
            yield session
        finally:
            await run_in_threadpool(session.close)
        return
    session, conn = await run_in_threadpool(routing.open_session, client_lsn(request))
    try:
        yield session
    finally:
        await run_in_threadpool(_close, session, conn)


def _close(session: Session, conn) -> None:
    try:
        session.close()
    finally:
        if conn is not None:
            conn.close()


class Writer:
    """Runs a request's write: `write(work)` calls `work(session)` in one write transaction and
    commits it, returning what `work` returned. The transaction takes the write lock when it
    begins (SQLite `BEGIN IMMEDIATE`: a read-then-write can no longer fail to upgrade) and waits
    for it at most `ROLLSCOPE_DB__WRITE_TIMEOUT_SECONDS` (app.db.engine.writes); past that the
    error reaches app.errors as a 503 with `Retry-After`. On Postgres a transaction that lost a
    deadlock or serialization race (40P01, 40001) is run again, `TRIES` times in all. `work` may
    raise (an ApiError 404): nothing is committed. Reads use `SessionDep`, which never waits."""

    TRIES = 4

    def __init__(self, engine):
        self.engine = writes(engine)

    def __call__(self, work: Callable[[Session], T]) -> T:
        for attempt in range(self.TRIES):
            with Session(self.engine) as session:
                try:
                    out = work(session)
                    session.commit()
                    return out
                except DBAPIError as exc:
                    if not lost_a_race(exc) or attempt == self.TRIES - 1:
                        raise
            time.sleep(random.uniform(0.005, 0.02) * (attempt + 1))  # let the winner finish
        raise AssertionError("unreachable")


def get_writer(request: Request) -> Writer:
    return Writer(request.app.state.engine)


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


SessionDep = Annotated[Session, Depends(get_session)]
WriteDep = Annotated[Writer, Depends(get_writer)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]

_allowed_query: dict[int, frozenset[str]] = {}


def _query_names(dependant) -> set[str]:
    """The query parameter names of an endpoint and all its sub-dependencies."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def refuse_unknown_query(request: Request) -> None:
    """422 `unknown_parameter` for a query parameter an `/api/v1` endpoint does not take: a typo
    (`?stepp=3`) must not silently return everything. Put on a router (`dependencies=[...]`).
    Pure computation: it runs on the event loop, without a hop to the thread pool.

    Only the API, the strict contract, refuses. Pages, their JSON twins and downloads ignore a
    parameter they do not take: a pasted link's `?utm_source=x` must not make a 422, and a page's
    JSON link carries the page's query string."""
    if not request.url.path.startswith("/api/"):
        return
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    allowed = _allowed_query.get(id(route))
    if allowed is None:
        allowed = _allowed_query[id(route)] = frozenset(_query_names(dependant))
    for name in request.query_params.keys():
        if name not in allowed and name != "token":  # `?token=`: a read token in a link (app.auth)
            takes = ", ".join(sorted(allowed)) or "none"
            raise ApiError(422, f"unknown query parameter {name!r} (this endpoint takes: {takes})",
                           field=name, code="unknown_parameter")


RefuseUnknownQuery = Depends(refuse_unknown_query)


# --- tokens and scopes ------------------------------------------------------------------------
# Tokens are issued, hashed and verified by app.auth; its `require(scope)` checks a request (401
# without or with an unknown or revoked token, 403 when the scope is too small; reading is open
# unless the settings lock it). Here that check runs in the thread pool when a token must be
# looked up, a database too broken to look it up is a 503 with `Retry-After` (like any other
# write that cannot be stored now), and the token's name goes on `request.state.token_name`,
# for the request log (app.main). These are the only token dependencies: `/api/v1` puts
# `READ_ON_READS` on its router, writes name `WriteToken` or `AdminToken` in their signature.

# Declares `Authorization: Bearer` in the OpenAPI document (the Authorize button of /api/docs);
# app.auth reads the header itself.
BEARER = HTTPBearer(auto_error=False, description="an API token: `rollscope token create --scope read|write|admin`")
RETRY_DOWN = 5  # Retry-After seconds when the database cannot look a token up


def token_label(info) -> str:
    """How a token is named in logs and as the author of labels and notes."""
    return getattr(info, "name", None) or getattr(info, "prefix", None) or f"token-{getattr(info, 'pk', '?')}"


def require_scope(scope: auth.Scope, *, reads_only: bool = False):
    """A dependency: the request's token (`auth.TokenInfo`), which must allow `scope` (admin ⊇
    write ⊇ read); for `read` without a token, None unless reading needs a token. With
    `reads_only`, requests other than GET and HEAD pass unchecked (None): they check their own
    scope, so a router-wide read check does not look their token up twice."""

    async def dependency(request: Request, _doc=Security(BEARER)) -> auth.TokenInfo | None:
        if reads_only and request.method not in auth.READS:
            return None
        # A token sent with a read is checked even when reading is open: a wrong token is a
        # misconfigured client (401), and a right one names the request in the log.
        sent = auth.bearer(request) is not None
        check = auth.require(scope, optional_for_read=not sent)
        # Without a token nothing is looked up (open reading, or a 401): decided on the event
        # loop; a token is verified against the database in the thread pool.
        try:
            info = await run_in_threadpool(check, request) if sent else check(request)
        except (OperationalError, DBAPIError):
            raise ApiError(503, "the database is unavailable; retry later",
                           headers={"Retry-After": str(RETRY_DOWN)}) from None
        if info is not None:
            request.state.token_name = token_label(info)
        return info

    return dependency


READ_ON_READS = Depends(require_scope("read", reads_only=True))  # on the /api/v1 router
WriteToken = Annotated[auth.TokenInfo, Depends(require_scope("write"))]
AdminToken = Annotated[auth.TokenInfo, Depends(require_scope("admin"))]
