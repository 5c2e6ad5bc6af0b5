"""Engine and sessions. SQLite pragmas live here, in one place."""
from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session, create_engine


def make_engine(url: str) -> Engine:
    """An engine for `url` (sqlite or postgresql+psycopg)."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # noqa: ANN001
            cur = dbapi_conn.cursor()
            # WAL lets the dashboard read while an ingest writes; NORMAL is durable enough in WAL;
            # busy_timeout makes a second writer wait instead of failing at once.
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def session_scope(engine: Engine) -> Iterator[Session]:
    with Session(engine) as session:
        yield session
