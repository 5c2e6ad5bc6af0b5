"""Engines: SQLite pragmas, transaction modes and JSON encoding live here, in one place."""
from __future__ import annotations

import sqlite3

import orjson
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import create_engine

from app.db.checkpoint import FALLBACK_PAGES, Checkpointer
from ingest.jsonio import dumps, loads

WRITE_TIMEOUT = 5.0  # seconds a web write waits for the write lock (ROLLSCOPE_DB__WRITE_TIMEOUT_SECONDS)
READ_BUSY_MS = 30_000  # SQLite busy_timeout of every other transaction (ingest's writer engine included)
WRITE = "rollscope_write_timeout"  # execution option: this connection's transactions write (seconds to wait)


WRITER_CACHE_KB = 32 << 10  # page cache of a writer's connections (write stage 0.88 -> 0.76-0.82 s per 1,000 rollouts)


def make_engine(url: str, *, writer: bool = False, pool_size: int = 5, max_overflow: int = 10,
                write_timeout: float | None = None) -> Engine:
    """An engine for `url` (sqlite or postgresql+psycopg).

    `writer=True` (ingest) makes every SQLite transaction `BEGIN IMMEDIATE`: it takes the write
    lock up front and waits for it (busy_timeout, 30 s), instead of starting as a reader and
    failing with SQLITE_BUSY when another writer committed meanwhile (a deferred transaction
    cannot upgrade its snapshot, whatever the busy timeout). Readers (the web app) keep deferred
    transactions, so under WAL they never wait for a writer; the web app's writes go through
    `writes(engine)`, which waits at most `write_timeout` seconds for the lock (default: 5 s, or
    for a `writer` engine, a command's, as long as its other transactions: 30 s). A `writer`
    engine on a SQLite file checkpoints its WAL in a thread after each commit
    (app/db/checkpoint.py), not inside the commit.
    """
    if url.startswith("sqlite"):
        _bind_directly()
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **JSON_CODEC)

        # pysqlite's own transaction handling breaks SAVEPOINT and ignores BEGIN modes; take it
        # over (the recipe in SQLAlchemy's SQLite dialect docs, "Serializable isolation").
        @event.listens_for(engine, "begin")
        def _begin(conn):  # noqa: ANN001
            wait = conn.get_execution_options().get(WRITE)
            # busy_timeout is per connection: set it for this kind of transaction when it changes
            busy_ms = READ_BUSY_MS if wait is None else round(wait * 1000)
            info = conn.connection.info
            if info.get("busy_ms") != busy_ms:
                conn.exec_driver_sql(f"PRAGMA busy_timeout={busy_ms}")
                info["busy_ms"] = busy_ms
            conn.exec_driver_sql("BEGIN IMMEDIATE" if writer or wait is not None else "BEGIN")

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, record):  # noqa: ANN001
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            # WAL lets the dashboard read while an ingest writes; NORMAL is durable enough in WAL;
            # busy_timeout makes a second writer wait instead of failing at once.
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute(f"PRAGMA busy_timeout={READ_BUSY_MS}")
            cur.execute("PRAGMA foreign_keys=ON")
            if writer:  # the ingest's B-tree and index pages stay in memory (SQLite's default: 2 MB)
                cur.execute(f"PRAGMA cache_size=-{WRITER_CACHE_KB}")
            if checkpointer is not None:  # its thread checkpoints; this connection only past the safety net
                cur.execute(f"PRAGMA wal_autocheckpoint={FALLBACK_PAGES}")
            cur.close()
            record.info["busy_ms"] = READ_BUSY_MS

        database = engine.url.database
        checkpointer = Checkpointer(database) if writer and database and database != ":memory:" \
            and not database.startswith("file:") else None
        if checkpointer is not None:
            # the WAL is checkpointed by a thread once a transaction that committed hands its
            # connection back (app/db/checkpoint.py), not inside the commit
            @event.listens_for(engine, "commit")
            def _committed(conn):  # noqa: ANN001
                conn.connection.info["committed"] = True

            @event.listens_for(engine.pool, "checkin")
            def _checked_in(dbapi_conn, record):  # noqa: ANN001
                if record is not None and record.info.pop("committed", False):
                    checkpointer.soon()

            @event.listens_for(engine, "engine_disposed")
            def _disposed(_engine):  # noqa: ANN001
                checkpointer.stop()

        engine.rollscope_checkpointer = checkpointer

    else:
        # Postgres: each process keeps `pool_size` connections, up to `max_overflow` more under load
        # (ROLLSCOPE_DB__POOL_SIZE / __MAX_OVERFLOW; docs/deploy.md sizes them against max_connections).
        engine = create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=max_overflow,
                               **JSON_CODEC)

        @event.listens_for(engine, "begin")
        def _begin(conn):  # noqa: ANN001
            wait = conn.get_execution_options().get(WRITE)
            if wait is not None:
                # a row lock held longer than this fails the statement (55P03 lock_not_available);
                # 0 means "no limit" to Postgres, so the shortest wait is 1 ms
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{max(1, round(wait * 1000))}ms'")

    # kept on the engine (not in a module-level map, which would keep every engine alive)
    engine.rollscope_write_timeout = (write_timeout if write_timeout is not None
                                      else READ_BUSY_MS / 1000 if writer else WRITE_TIMEOUT)
    engine.rollscope_writers = {}  # timeout → its write engine (`writes`)
    return engine


def _bind_directly() -> None:
    """Make sqlite3 bind None and bytes without its adaptation protocol. sqlite3 binds int, float
    and str at once, but None and bytes only after looking for an adapter, then `__adapt__` on the
    protocol and `__conform__` on the value (attribute lookups that fail): ~0.5 µs a value on this
    machine, a third of the CPU of inserting the bench workload's node rows (27 columns, most of
    them NULL, the token arrays bytes). An adapter registered for their exact types is found by
    the first lookup and hands the value back unchanged, so the values bound are the same ones.
    Process-wide (sqlite3 keeps one adapter table); registering again replaces them with the same."""
    sqlite3.register_adapter(type(None), {}.get)  # a C callable that returns None for its argument
    sqlite3.register_adapter(bytes, bytes)  # bytes(b) is b itself


def writes(engine: Engine, timeout: float | None = None) -> Engine:
    """`engine` for the web app's writes (same pool): each transaction takes the write lock when
    it begins (SQLite `BEGIN IMMEDIATE`) and waits for it at most `timeout` seconds (default: the
    engine's `write_timeout`; SQLite busy_timeout, Postgres `lock_timeout`), after which the
    statement fails with an error `lock_busy` recognises (the app answers 503 with Retry-After).
    0 does not wait at all. The same engine object is returned for the same arguments."""
    base = getattr(engine, "_proxied", None) or engine  # an OptionEngine's own engine
    if timeout is None:
        timeout = getattr(base, "rollscope_write_timeout", WRITE_TIMEOUT)
    made = base.__dict__.setdefault("rollscope_writers", {})  # an engine not made by make_engine too
    if timeout not in made:
        made[timeout] = base.execution_options(**{WRITE: float(timeout)})
    return made[timeout]


# SQLite SQLITE_BUSY (5) and SQLITE_LOCKED (6), their extended codes included; Postgres 55P03
# lock_not_available (lock_timeout); 40P01 deadlock_detected, 40001 serialization_failure.
_SQLITE_BUSY = (5, 6)
_PG_RACES = ("40P01", "40001")


def _orig(exc: BaseException) -> BaseException:
    return exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc


def lock_timed_out(exc: BaseException) -> bool:
    """True when the write lock was not free within the timeout: SQLite "database is locked"
    (SQLITE_BUSY / SQLITE_LOCKED), Postgres `lock_timeout` (55P03). No fault of the data."""
    orig = _orig(exc)
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _SQLITE_BUSY
    if str(getattr(orig, "sqlstate", None) or "") == "55P03":
        return True
    text = str(orig).lower()
    return "database is locked" in text or "database table is locked" in text


def lock_busy(exc: BaseException) -> bool:
    """True for a write that gave way to other writers and can simply be tried again later: the
    lock was not free in time (`lock_timed_out`), or Postgres picked it to lose a deadlock or a
    serialization conflict (40P01, 40001)."""
    return lock_timed_out(exc) or str(getattr(_orig(exc), "sqlstate", None) or "") in _PG_RACES


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


def json_text(value) -> str:
    """The JSON text a JSON column binds for `value` (None as JSON null), for rows written by
    `bulk_insert`, which binds nothing itself."""
    return _json_dumps(value)


def insert_for(conn: sa.Connection, table: sa.Table):
    """The dialect's INSERT, which has ON CONFLICT on both SQLite and Postgres."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


_PROCESSORS: dict[tuple[str, str, tuple[str, ...]], list] = {}


def bind_processors(conn: sa.Connection, table: sa.Table, columns: tuple[str, ...]) -> list:
    """Per column of `table` in `columns`, the function SQLAlchemy applies to a value it binds
    there on this connection's dialect, or None when it binds the value as it is (JSON columns:
    `json_text`): what turns a row of Python values into one `bulk_insert` takes, the values stored
    being those an INSERT through SQLAlchemy stores (on SQLite: a datetime as its text, an int given
    to a float column as a float)."""
    key = (conn.dialect.name, table.name, columns)
    if key not in _PROCESSORS:
        _PROCESSORS[key] = [json_text if isinstance(table.c[c].type, sa.JSON) else
                            table.c[c].type.dialect_impl(conn.dialect).bind_processor(conn.dialect) for c in columns]
    return _PROCESSORS[key]


def bulk_insert(conn: sa.Connection, table: sa.Table, columns: tuple[str, ...], rows: list[tuple]) -> None:
    """INSERT ready rows (tuples in `columns` order; JSON columns as JSON text, binary as bytes)
    in the caller's transaction, with no per-value work by SQLAlchemy: `COPY ... FROM STDIN` on
    Postgres (psycopg's per-row executemany cost ~20 µs a row in Python, more than the database's
    own work), the driver's `executemany` on SQLite (a column None in every row bound as the
    literal NULL, `_without_nulls`). Datetimes are bound as they are: on SQLite, pass them as
    `sqlite_datetime` text. A failure is raised as SQLAlchemy's DBAPIError of the same kind, so
    callers treat it like any other statement's."""
    if not rows:
        return
    names = ", ".join(columns)
    if conn.dialect.name != "postgresql":
        conn.exec_driver_sql(*_without_nulls(table.name, names, rows))
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


def _without_nulls(table: str, names: str, rows: list[tuple]) -> tuple[str, list[tuple]]:
    """The SQLite INSERT of `rows` into `table` (`names`: its columns, comma-separated), with a
    column that is None in every row written as the literal NULL and left out of the rows: the
    same values stored, but no value bound for it (binding is most of the driver's cost per row,
    and most of a node row's columns are NULL in a whole batch: no timestamps, rewards, extras)."""
    values = list(zip(*rows))  # column by column (tuples: `count` runs in C)
    given = [col.count(None) != len(rows) for col in values]
    if all(given) or not any(given):
        return f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(given))})", rows
    marks = ", ".join("?" if g else "NULL" for g in given)
    return (f"INSERT INTO {table} ({names}) VALUES ({marks})",
            list(zip(*[col for col, g in zip(values, given) if g])))
