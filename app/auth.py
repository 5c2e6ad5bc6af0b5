"""API tokens: issue, hash, verify, revoke; scopes read < write < admin.

Writes over the network need a token, sent only as `Authorization: Bearer <token>`: a write
with `?token=` is refused (401), because a URL is written to access logs and proxies' logs.
Reading stays open unless `ROLLSCOPE_REQUIRE_READ_TOKEN=1`, and then a read (GET or HEAD) may
also carry its token as `?token=` (so a link printed in a training log opens in a browser); the
access log masks that value (`mask_token`). A token is 32 random bytes (`rs_` +
URL-safe base64), shown once when it is created; the database keeps only its sha256, which is
enough for a secret with that much entropy (a slow password hash protects guessable secrets,
and these are not guessable), plus its first characters to recognise it in `rollscope token
list`. Revoked tokens stay listed, marked, and never verify again.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

import sqlalchemy as sa
from fastapi import HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.engine import Engine

from app.db import models
from app.db.engine import writes

Scope = Literal["read", "write", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "write", "admin")  # each allows everything before it
TOKEN_PREFIX = "rs_"
SHOWN_CHARS = 10  # `rs_` + 7 characters kept in clear, to tell tokens apart in a list
LAST_USED_EVERY = timedelta(minutes=1)  # `last_used_at` is written at most this often per token

T = models.ApiToken.__table__


@dataclass(frozen=True)
class TokenInfo:
    """A token as listed (never the secret itself)."""

    pk: int
    name: str | None
    scope: Scope
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def allows(have: str, need: str) -> bool:
    """True when a token of scope `have` may do what needs scope `need` (admin ⊇ write ⊇ read)."""
    return SCOPES.index(have) >= SCOPES.index(need)  # type: ignore[arg-type]


def hash_token(token: str) -> str:
    """The stored form of a token: sha256 hex of its UTF-8 bytes."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def _info(row) -> TokenInfo:
    return TokenInfo(row.pk, row.name, row.scope, row.prefix, row.created_at, row.last_used_at, row.revoked_at)


def issue(engine: Engine, scope: Scope, name: str | None = None) -> tuple[str, TokenInfo]:
    """Create a token of `scope`; returns (the token, shown only now; its listing).
    Raises ValueError for an unknown scope."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with writes(engine).begin() as conn:
        row = conn.execute(T.insert().values(name=name, scope=scope, prefix=token[:SHOWN_CHARS],
                                             token_sha256=hash_token(token), created_at=models.utcnow())
                           .returning(*T.c)).one()
    return token, _info(row)


def verify(engine: Engine, token: str | None) -> TokenInfo | None:
    """The active token `token` is, or None (unknown, revoked, or not a token at all). Records
    when it was last used (at most once a minute)."""
    if not token or not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    digest = hash_token(token)
    with engine.connect() as conn:
        row = conn.execute(sa.select(T).where(T.c.token_sha256 == digest)).first()
    # the lookup is by digest; compare again in constant time so timing says nothing more
    if row is None or not hmac.compare_digest(row.token_sha256, digest) or row.revoked_at is not None:
        return None
    now = models.utcnow()
    last = row.last_used_at
    if last is None or now - (last if last.tzinfo else last.replace(tzinfo=now.tzinfo)) > LAST_USED_EVERY:
        try:
            # without waiting for the write lock: a read must not wait for writers (nor a write
            # for the lock twice), and the next use within the minute records the time instead
            with writes(engine, timeout=0).begin() as conn:
                conn.execute(T.update().where(T.c.pk == row.pk).values(last_used_at=now))
        except sa.exc.OperationalError:
            pass  # a busy database must not refuse a valid token; the time is a courtesy
    return _info(row)


def list_tokens(engine: Engine) -> list[TokenInfo]:
    """Every token, oldest first, revoked ones included."""
    with engine.connect() as conn:
        return [_info(r) for r in conn.execute(sa.select(T).order_by(T.c.pk))]


def revoke(engine: Engine, ident: str) -> list[TokenInfo]:
    """Revoke the token whose id is `ident`, or the tokens whose shown prefix starts with it
    (at least 6 characters); returns what was revoked (already revoked ones included)."""
    with writes(engine).begin() as conn:
        if ident.isdigit():
            where = T.c.pk == int(ident)
        elif len(ident) >= 6:
            where = T.c.prefix.startswith(ident[:SHOWN_CHARS], autoescape=True)
        else:
            raise ValueError("give a token id (from `rollscope token list`) or at least 6 characters of its prefix")
        rows = conn.execute(sa.select(T).where(where)).all()
        if rows:
            conn.execute(T.update().where(where, T.c.revoked_at.is_(None)).values(revoked_at=models.utcnow()))
        return [_info(r) for r in conn.execute(sa.select(T).where(where))]


# --- the web side ------------------------------------------------------------------------------

READ_COOKIE = "rollscope_read"  # set by ReadTokenGate from a valid `?token=`, so a browser's next pages read too


READS = ("GET", "HEAD")  # the methods that may carry a token in the URL or the read cookie
TOKEN_IN_URL = ("a write takes its token only from the `Authorization: Bearer <token>` header, never "
                "`?token=` (URLs are written to access logs): send it in the header, and revoke a write "
                "token that was sent in a URL (`rollscope token revoke`)")
# `token=` after `?`, `&` or `;`, its letters possibly percent-encoded (`%74oken=`), up to the next separator
_TOKEN_VALUE = re.compile(r"(?i)((?:^|[?&;])(?:t|%74)(?:o|%6f)(?:k|%6b)(?:e|%65)(?:n|%6e)(?:=|%3d))[^&;#\s\"']*")


def mask_token(text: str) -> str:
    """`text` (a logged path or request line) with every `token=` value replaced by `***`."""
    return _TOKEN_VALUE.sub(r"\1***", text)


class MaskTokenFilter(logging.Filter):
    """A logging filter that masks `token=` values in a record's message and arguments
    (uvicorn's access log formats `(client, method, path with query, http version, status)`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(mask_token(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: mask_token(v) if isinstance(v, str) else v for k, v in record.args.items()}
        if isinstance(record.msg, str):
            record.msg = mask_token(record.msg)
        return True


def mask_access_log(logger: str = "uvicorn.access") -> None:
    """Install `MaskTokenFilter` on `logger` once (create_app calls it: every server process)."""
    log = logging.getLogger(logger)
    if not any(isinstance(f, MaskTokenFilter) for f in log.filters):
        log.addFilter(MaskTokenFilter())


def bearer(request: Request) -> str | None:
    """The token of a request: `Authorization: Bearer <token>`, else, for a GET or HEAD only
    (reads), `?token=`, else the read cookie a `?token=` link set. A write's token comes only
    from the header (a cookie never authorises a write, so no cross-site request can write; a
    URL is logged, so a write token never travels in one: `require` refuses it)."""
    header = request.headers.get("authorization", "")
    kind, _, value = header.partition(" ")
    if kind.lower() == "bearer" and value.strip():
        return value.strip()
    if request.method not in READS:
        return None
    return request.query_params.get("token") or request.cookies.get(READ_COOKIE) or None


def article(word: str) -> str:
    """`word` with its indefinite article ("a read", "an admin")."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def require(scope: Scope, *, optional_for_read: bool = True):
    """A check of a request (`check(request) -> TokenInfo | None`): its token, which must allow
    `scope`. The dependencies built on it are app.deps's (`WriteToken`, `AdminToken`, the read
    check of the `/api/v1` router).

    401 (with `WWW-Authenticate: Bearer`) when the token is missing, unknown or revoked; 403
    when its scope is too small; 401 for any request other than GET or HEAD with `?token=` in
    its URL (even with the header too: the URL already put the token in a log). With `scope="read"` and reading open
    (`ROLLSCOPE_REQUIRE_READ_TOKEN` unset), no token is needed and None is returned.
    """

    def check(request: Request) -> TokenInfo | None:
        if request.method not in READS and "token" in request.query_params:
            raise HTTPException(401, TOKEN_IN_URL, headers={"WWW-Authenticate": "Bearer"})
        settings = request.app.state.settings
        if scope == "read" and optional_for_read and not getattr(settings, "require_read_token", False):
            return None
        token = bearer(request)
        if token is None:
            raise HTTPException(401, f"this needs {article(scope)} token: send `Authorization: Bearer <token>` "
                                     "(create one with `rollscope token create`)",
                                headers={"WWW-Authenticate": "Bearer"})
        info = verify(request.app.state.engine, token)
        if info is None:
            raise HTTPException(401, "unknown or revoked token", headers={"WWW-Authenticate": "Bearer"})
        if not allows(info.scope, scope):
            raise HTTPException(403, f"this token's scope is {info.scope}; this needs {scope}")
        return info

    return check


class ReadTokenGate:
    """ASGI middleware: when `ROLLSCOPE_REQUIRE_READ_TOKEN=1`, every page, JSON twin and API
    read needs a read token (header, `?token=`, or the cookie a `?token=` link sets: HttpOnly,
    SameSite=Strict, one day, so the pages a link opens and the API docs' own requests read
    too); `/healthz` and `/static` stay open (health checks, the stylesheet of the 401 page).
    Writes check their own scope in their route."""

    OPEN = ("/healthz", "/static/")

    def __init__(self, app, *, engine: Engine, required: bool):
        self.app, self.engine, self.required = app, engine, required

    async def __call__(self, scope, receive, send):
        if (not self.required or scope["type"] != "http" or scope["method"] not in ("GET", "HEAD")
                or scope["path"] == "/healthz" or scope["path"].startswith("/static/")):
            await self.app(scope, receive, send)
            return
        from app.errors import error_response

        request = Request(scope)
        token = bearer(request)
        # verify() queries the database: in the thread pool, never on the event loop
        info = await run_in_threadpool(verify, self.engine, token) if token else None
        if info is None:
            # the one error shape for JSON clients and the API, the error page for a browser
            message = ("unknown or revoked token" if token else
                       "reading needs a token (ROLLSCOPE_REQUIRE_READ_TOKEN is set): "
                       "send `Authorization: Bearer <token>` or add `?token=`")
            response = error_response(request, 401, message, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        link_token = request.query_params.get("token")
        if link_token != token:
            await self.app(scope, receive, send)
            return
        cookie = f"{READ_COOKIE}={token}; Path=/; Max-Age=86400; HttpOnly; SameSite=Strict".encode("latin-1")

        async def send_with_cookie(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
            await send(message)

        await self.app(scope, receive, send_with_cookie)
