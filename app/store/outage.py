"""Database outages: which errors are not the data's fault, and how long a write waits them out.

One home for the classification every writer uses (the store's batches, the CLI's start-up and
its one-line report, the ingest worker's backoff):

- `out_of_space`: the database cannot grow (SQLite SQLITE_FULL, Postgres SQLSTATE class 53);
- `database_gone`: it cannot take writes for a reason outside the data (a lost or refused
  connection, no space): retried for `ROLLSCOPE_DB__RETRY_SECONDS` (`retry_waits`), then reported,
  never a quarantined record;
- `lost_a_race`: Postgres chose this transaction to give way to a concurrent one: tried again;
- `worker_waits`: what the long-running worker waits out (any operational error of the driver);
- a database that cannot be used at all (no such database or role, a refused password, ...) is
  not an outage: app/db/unusable.py `why_unusable`, which `not_the_data` also counts.

`with_retries` runs one transaction under these rules.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db.unusable import why_unusable

RETRY_SECONDS = 30.0  # default of `ROLLSCOPE_DB__RETRY_SECONDS` (app.config.DbSettings)


def retry_waits(seconds: float = RETRY_SECONDS) -> list[float]:
    """The pauses (s) between tries while a database is unreachable: 0.5 s doubling, at most
    15 s, adding up to `seconds` (the last one shortened to fit); [] for 0. 30 s gives
    0.5, 1, 2, 4, 8, 14.5. The CLI uses the same budget at start (`app.cli.common.open_engine`) and mid-ingest."""
    waits: list[float] = []
    wait, left = 0.5, max(0.0, seconds)
    while left > 1e-9:
        waits.append(min(wait, left))
        left -= waits[-1]
        wait = min(wait * 2, 15.0)
    return waits


def out_of_space(exc: BaseException) -> bool:
    """The database cannot grow: SQLite's SQLITE_FULL ("database or disk is full", also a file
    size limit) or Postgres's SQLSTATE class 53, insufficient resources (53100 disk_full, 53200
    out_of_memory)."""
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF == 13:  # SQLITE_FULL and its extended codes
        return True
    return str(getattr(orig, "sqlstate", None) or "").startswith("53")


def database_gone(exc: BaseException) -> bool:
    """The database cannot take writes for a reason outside the data: a lost or refused
    connection (a restart, a network cut) or no space left (`out_of_space`). Such an error is
    retried and then reported; it never quarantines a record. A database that cannot be used at
    all (no such database or role, a refused password, ...: app/db/unusable.py) is not gone:
    waiting would not help."""
    if out_of_space(exc):
        return True
    if why_unusable(exc):
        return False
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)):
        text = str(exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc).lower()
        return any(w in text for w in ("connect", "terminat", "server closed", "shutdown", "admin_shutdown",
                                       "the database system is", "broken pipe", "connection"))
    return False


def lost_a_race(exc: BaseException) -> bool:
    """Postgres chose this transaction to give way to a concurrent one (SQLSTATE 40P01
    deadlock_detected, 40001 serialization_failure): nothing is wrong with the data, and the
    transaction succeeds when tried again."""
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    return str(getattr(orig, "sqlstate", None) or "") in ("40P01", "40001")


def not_the_data(exc: BaseException) -> bool:
    """The database is gone or cannot be used: writing the rollouts one by one cannot help, and
    no record is to blame (the batch writer's fallback raises it instead). Other writers holding
    the lock past the write timeout (app.db.engine.lock_timed_out) are not the record's fault either."""
    from app.db.engine import lock_timed_out

    return database_gone(exc) or bool(why_unusable(exc)) or lock_timed_out(exc)


def worker_waits(exc: BaseException) -> bool:
    """An error the ingest worker waits out, with backoff, for as long as it runs: any
    operational or interface error of the driver (a lost or refused connection, a full disk, a
    locked SQLite file) or a connection the pool invalidated. Callers first rule out a database
    that cannot be used (`why_unusable`)."""
    return isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)) or (
        isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated)


def with_retries(engine: Engine, write: Callable[[sa.Connection], Any], committed: Callable[[], int],
                 retry_seconds: float = RETRY_SECONDS) -> Any:
    """`write(conn)` in one transaction, tried again while the database is unreachable
    (`retry_waits`) or when it gave way to a concurrent writer (`lost_a_race`). When the database
    stays away the error carries `rollouts_committed` (`committed()`: what earlier transactions
    stored) and `retried_seconds`."""
    for wait in (*retry_waits(retry_seconds), None):
        try:
            with engine.begin() as conn:
                return write(conn)
        except Exception as exc:
            if lost_a_race(exc) and wait is not None:
                time.sleep(wait / 10)
                continue
            if not database_gone(exc) or wait is None:
                if database_gone(exc):
                    exc.rollouts_committed = committed()  # type: ignore[attr-defined]
                    exc.retried_seconds = retry_seconds  # type: ignore[attr-defined]
                raise
            engine.dispose()
            time.sleep(wait)
    raise AssertionError("unreachable")
