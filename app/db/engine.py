"""Engines: SQLite pragmas and transaction modes live here, in one place."""
from __future__ import annotations

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import create_engine


def make_engine(url: str, *, writer: bool = False) -> Engine:
    """An engine for `url` (sqlite or postgresql+psycopg).

    `writer=True` (ingest) makes every SQLite transaction `BEGIN IMMEDIATE`: it takes the write
    lock up front and waits for it (busy_timeout), instead of starting as a reader and failing
    with SQLITE_BUSY when another writer committed meanwhile. Readers (the web app) keep
    deferred transactions, so under WAL they never wait for a writer.
    """
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        # pysqlite's own transaction handling breaks SAVEPOINT and ignores BEGIN modes; take it
        # over (the recipe in SQLAlchemy's SQLite dialect docs, "Serializable isolation").
        @event.listens_for(engine, "begin")
        def _begin(conn):  # noqa: ANN001
            conn.exec_driver_sql("BEGIN IMMEDIATE" if writer else "BEGIN")

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # noqa: ANN001
            dbapi_conn.isolation_level = None
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
