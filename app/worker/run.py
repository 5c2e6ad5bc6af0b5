"""The worker's loop: `rollscope worker --spool DIR`.

It polls the spool directories (every `poll` seconds when there is nothing to read), reads and
commits what collectors appended (app/worker/spool.py), and stops cleanly on SIGTERM or SIGINT:
the chunk in hand is committed or rolled back whole, never half. When the database goes away it
says so in one line, waits (0.5 s doubling to 30 s) and carries on from the offsets stored with
the last commit.

SQLite has one writer: the worker holds an exclusive lock on `<database>.worker.lock` while it
runs, so a second worker on the same file refuses to start. Postgres takes any number.
"""
from __future__ import annotations

import fcntl
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db.unusable import DatabaseUnusable, why_unusable
from app.worker.spool import Spool

MAX_BACKOFF = 30.0


class WorkerLocked(RuntimeError):
    """Another worker already writes to this SQLite database."""


def sqlite_lock(engine: Engine):
    """An exclusive lock file beside a SQLite database (None for Postgres). Raises WorkerLocked
    when another worker holds it."""
    if engine.dialect.name != "sqlite":
        return None
    db = engine.url.database or ""
    if db in ("", ":memory:"):
        return None
    real = Path(db).resolve()  # the file itself, whatever link or relative path names it
    path = real.with_name(real.name + ".worker.lock")
    f = path.open("a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise WorkerLocked(f"another worker is writing to {db} (SQLite has one writer; "
                           "use Postgres for several workers)") from None
    return f


def _transient(exc: BaseException, engine: Engine) -> bool:
    """An outage the worker waits out (a lost or refused connection, a full disk). Raises
    DatabaseUnusable for what waiting cannot fix (a database or role that was dropped, a revoked
    grant: app/db/unusable.py)."""
    why = why_unusable(exc, engine.url.render_as_string(hide_password=False))
    if why:
        raise DatabaseUnusable(engine.url.render_as_string(hide_password=True), why) from exc
    return isinstance(exc, (sa.exc.OperationalError, sa.exc.InterfaceError)) or (
        isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated)


def run(engine: Engine, dirs: list[Path], *, stop: threading.Event | None = None, poll: float = 0.5,
        once: bool = False, log: Callable[[str], None] = print, heartbeat: Path | None = None,
        **spool_options) -> int:
    """Ingest from `dirs` until `stop` is set (or, with `once`, until nothing is left to read).
    `heartbeat` is touched on every pass (health checks). Returns the number of chunks committed."""
    stop = stop or threading.Event()
    spool = Spool(engine, dirs, log=log, **spool_options)
    try:
        return _loop(spool, engine, stop, poll, once, log, heartbeat)
    finally:
        spool.close()


def _loop(spool: Spool, engine: Engine, stop: threading.Event, poll: float, once: bool,
          log: Callable[[str], None], heartbeat: Path | None) -> int:
    backoff = 0.0
    total = 0
    claims_released = engine.dialect.name != "sqlite"  # one worker per SQLite file: a dead one's leases go
    while not stop.is_set():
        if heartbeat is not None:
            heartbeat.touch()
        try:
            if not claims_released:
                spool.release_claims()
                claims_released = True
            spool.sync_files()
            done = spool.work(stop.is_set)
            total += done
            if backoff:
                log("database reachable again; resuming from the stored offsets")
            backoff = 0.0
        except Exception as exc:  # noqa: BLE001 - only database outages are retried
            if not _transient(exc, engine):
                raise
            backoff = min(MAX_BACKOFF, max(0.5, backoff * 2))
            first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:200]
            log(f"database unavailable ({first}); retrying in {backoff:g} s")
            engine.dispose()
            stop.wait(backoff)
            continue
        if done == 0:
            if once:
                break
            stop.wait(poll)
    return total


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (a clean stop after the chunk in hand)."""
    stop = threading.Event()

    def handler(_signum, _frame):
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Poll `predicate` until true or `timeout` seconds (for tests and the bench)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
