"""A database that cannot be used, as opposed to one that is unreachable for a while.

The CLI and the worker wait for a database that is down, restarting or cut off (app/store/outage.py
`database_gone`: `ROLLSCOPE_DB__RETRY_SECONDS`, the worker for as long as it runs). Some errors
cannot heal by waiting: a database or role that does not exist, a refused password or
pg_hba.conf entry, a permission denied, a connection option the driver does not know, SSL the
server does not offer, a host name that does not resolve, a SQLite file whose folder does not
exist or cannot be written, a file that is not a SQLite database. `why_unusable` recognises them
(by SQLSTATE where the driver has one, else by the server's own words: libpq reports a refused
connection without a SQLSTATE), so they fail at once with one line naming the database
(`DatabaseUnusable`, exit 2) instead of being retried as an outage.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import sqlalchemy as sa

# SQLSTATE classes and codes that say the database, role or grant is wrong, not down:
# 28 invalid authorization, 3D000 invalid catalog name (no such database), 42501 insufficient
# privilege.
PERMANENT_SQLSTATES = ("28", "3D000", "42501")
# What libpq and the server say for the same (a refused connection has no SQLSTATE in psycopg).
PERMANENT_WORDS = (
    re.compile(r'database "[^"]*" does not exist'),
    re.compile(r'role "[^"]*" does not exist'),
    re.compile(r"password authentication failed[^\n]*"),
    re.compile(r"\w+ authentication failed for user[^\n]*"),
    re.compile(r"no pg_hba\.conf entry[^\n]*"),
    re.compile(r"fe_sendauth: no password supplied"),
    re.compile(r'role "[^"]*" is not permitted to log in'),
    re.compile(r"permission denied[^\n]*"),
    re.compile(r'database "[^"]*" is not currently accepting connections'),
    re.compile(r"server does not support SSL, but SSL was required"),
    re.compile(r'invalid connection option "[^"]*"'),
    re.compile(r'invalid (?:sslmode|integer|port|dsn)[^\n]*'),
    re.compile(r'missing "=" after [^\n]*'),
    re.compile(r"failed to resolve host '[^']*': \[Errno -2\] Name or service not known"),
)


class DatabaseUnusable(RuntimeError):
    """`url` (password masked) cannot be used, for a reason waiting will not change (`why`)."""

    def __init__(self, url: str, why: str):
        super().__init__(f"the database {url} cannot be used: {why}")
        self.url = url
        self.why = why


def masked(url: str) -> str:
    """`url` with its password replaced by `***` (also when SQLAlchemy cannot parse it)."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a URL too broken to parse is masked by hand
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def why_unusable(exc: BaseException, url: str | None = None) -> str | None:
    """Why the database at `url` cannot be used, when `exc` says so and waiting would not help;
    None for an outage (app/store/outage.py `database_gone`) or any other error."""
    if isinstance(exc, DatabaseUnusable):
        return exc.why
    if not isinstance(exc, (sa.exc.DBAPIError, sa.exc.ArgumentError)) and not _is_driver_error(exc):
        return None
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    text = str(orig)
    if _is_sqlite(url, orig):
        return _sqlite_why(text, url)
    state = str(getattr(orig, "sqlstate", None) or "")
    if state:  # the server said it: its code decides (its text may quote a record's values)
        if state.startswith(PERMANENT_SQLSTATES):
            first = text.strip().splitlines()
            return first[0] if first else state
        return None
    for pattern in PERMANENT_WORDS:  # refused before a session existed: libpq's words
        found = pattern.search(text)
        if found:
            return found.group(0).strip()
    return None


def _is_driver_error(exc: BaseException) -> bool:
    mod = type(exc).__module__
    return mod.startswith(("psycopg", "sqlite3"))


def _is_sqlite(url: str | None, orig: BaseException) -> bool:
    if url is not None:
        return url.startswith("sqlite")
    return type(orig).__module__.startswith("sqlite3")


def _sqlite_why(text: str, url: str | None) -> str | None:
    """A SQLite file that cannot be opened or written, said in terms of the file and its folder."""
    path = _sqlite_path(url)
    lower = text.lower()
    if "unable to open database file" in lower:
        if path is None:
            return None
        folder = path.parent
        if not folder.is_dir():
            return f"its folder {folder} does not exist"
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"permission denied: cannot create or write files in {folder}"
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            return f"permission denied: cannot read and write {path}"
        return None  # no lasting cause found (too many open files, ...): not said to be unusable
    if "readonly database" in lower or "read-only" in lower:
        where = path if path is not None else "the database file"
        return f"permission denied: {where} (or its folder) is read-only"
    if "file is not a database" in lower:
        return f"{path or 'the file'} is not a SQLite database"
    return None


def _sqlite_path(url: str | None) -> Path | None:
    if not url:
        return None
    try:
        db = sa.engine.make_url(url).database
    except Exception:  # noqa: BLE001
        return None
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db).expanduser().absolute()
