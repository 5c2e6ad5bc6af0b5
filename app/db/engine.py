"""Engines: SQLite pragmas, transaction modes and JSON encoding live here, in one place."""
from __future__ import annotations

import orjson
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import create_engine

from ingest.jsonio import dumps, loads


def make_engine(url: str, *, writer: bool = False, pool_size: int = 5, max_overflow: int = 10) -> Engine:
    """An engine for `url` (sqlite or postgresql+psycopg).

    `writer=True` (ingest) makes every SQLite transaction `BEGIN IMMEDIATE`: it takes the write
    lock up front and waits for it (busy_timeout), instead of starting as a reader and failing
    with SQLITE_BUSY when another writer committed meanwhile. Readers (the web app) keep
    deferred transactions, so under WAL they never wait for a writer.
    """
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **JSON_CODEC)

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
    # Postgres: each process keeps `pool_size` connections, up to `max_overflow` more under load
    # (ROLLSCOPE_DB__POOL_SIZE / __MAX_OVERFLOW; docs/deploy.md sizes them against max_connections).
    return create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=max_overflow, **JSON_CODEC)


class JSONText(str):
    """A value for a JSON column that is already serialised JSON text: written as it is (the
    store serialises each rollout once and does not pay for it twice)."""

    __slots__ = ()


def _json_dumps(value) -> str:
    if type(value) is JSONText:
        return value
    # orjson: several times faster than the standard library, and strict (NaN → null); integers
    # past 64 bits (which orjson refuses) keep every digit through ingest.jsonio.dumps
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return dumps(value).decode()


def _json_loads(text):
    # ingest.jsonio.loads: orjson, but integers past 64 bits keep every digit, and NaN written by
    # an older version through json.dumps still reads
    return loads(text)


JSON_CODEC = {"json_serializer": _json_dumps, "json_deserializer": _json_loads}


def insert_for(conn: sa.Connection, table: sa.Table):
    """The dialect's INSERT, which has ON CONFLICT on both SQLite and Postgres."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


def bulk_insert(conn: sa.Connection, table: sa.Table, columns: tuple[str, ...], rows: list[tuple]) -> None:
    """INSERT ready rows (tuples in `columns` order; JSON columns as JSON text, binary as bytes)
    in the caller's transaction, with no per-value work by SQLAlchemy: `COPY ... FROM STDIN` on
    Postgres (psycopg's per-row executemany cost ~20 µs a row in Python, more than the database's
    own work), the driver's `executemany` on SQLite. A failure is raised as SQLAlchemy's
    DBAPIError of the same kind, so callers treat it like any other statement's."""
    if not rows:
        return
    names = ", ".join(columns)
    if conn.dialect.name != "postgresql":
        conn.exec_driver_sql(f"INSERT INTO {table.name} ({names}) VALUES ({', '.join('?' * len(columns))})", rows)
        return
    statement = f"COPY {table.name} ({names}) FROM STDIN"
    raw = conn.connection.dbapi_connection
    try:
        with raw.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)
    except raw.Error as exc:
        is_disconnect = conn.dialect.is_disconnect(exc, raw, None)
        raise sa.exc.DBAPIError.instance(statement, None, exc, type(raw).Error,
                                         connection_invalidated=is_disconnect) from exc
