"""The worker's loop: `rollscope worker --spool DIR`.

It polls the spool directories (every `poll` seconds when there is nothing to read), reads and
commits what collectors appended (app/worker/spool.py), and stops cleanly on SIGTERM or SIGINT:
the chunk in hand is committed or rolled back whole, never half. When the database goes away it
says so in one line, waits (0.5 s doubling to 30 s) and carries on from the offsets stored with
the last commit.

Every pass of a worker started with `beat_every` (the CLI: `ROLLSCOPE_WORKER__HEARTBEAT_SECONDS`)
is seen by others through its heartbeat (app/worker/heartbeat.py): a thread beats in the database
every `beat_every` seconds, and a clean stop (or an error that ends the loop) marks the worker gone.

SQLite has one writer: the worker holds an exclusive lock on `<database>.worker.lock` while it
runs, so a second worker on the same file refuses to start. Postgres takes any number.
"""
from __future__ import annotations

import fcntl
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import Engine

from app.db.unusable import DatabaseUnusable, why_unusable
from app.forking import not_inherited
from app.store.gc_relaxed import relaxed_gc
from app.store.outage import worker_waits
from app.worker.heartbeat import Heartbeat
from app.worker.spool import Left, Spool

MAX_BACKOFF = 30.0


@dataclass
class Ran:
    """What a run did: `commits` (chunks committed) and, with `once`, the files it `left` with
    bytes unread (each named on the log with why)."""

    commits: int = 0
    left: list[Left] = field(default_factory=list)


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
    not_inherited(f)  # a forked parser process (app/worker/parse.py) must not keep the lock alive
    return f


def _transient(exc: BaseException, engine: Engine) -> bool:
    """An outage the worker waits out (a lost or refused connection, a full disk). Raises
    DatabaseUnusable for what waiting cannot fix (a database or role that was dropped, a revoked
    grant: app/db/unusable.py)."""
    why = why_unusable(exc, engine.url.render_as_string(hide_password=False))
    if why:
        raise DatabaseUnusable(engine.url.render_as_string(hide_password=True), why) from exc
    return worker_waits(exc)


def run(engine: Engine, dirs: list[Path], *, stop: threading.Event | None = None, poll: float = 0.5,
        once: bool = False, log: Callable[[str], None] = print, heartbeat: Path | None = None,
        beat_every: float | None = None, **spool_options) -> Ran:
    """Ingest from `dirs` until `stop` is set (or, with `once`, until nothing is left to read).
    `heartbeat` is touched on every pass (health checks); with `beat_every` seconds, the worker
    beats in the database (`worker_heartbeat`, app/worker/heartbeat.py) and is marked gone when
    this returns or raises.

    With `once`, what is not readable yet is waited for when waiting `settle` seconds (2 s) more
    would make it so (a JSON document still being written settles); anything still unread after
    that is named on the log, one line per file with why, and listed in `Ran.left`."""
    stop = stop or threading.Event()
    spool = Spool(engine, dirs, log=log, own=[heartbeat] if heartbeat else [], **spool_options)
    beat = Heartbeat(engine, dirs, interval=beat_every, worker_id=lambda: spool.worker_id,
                     files=spool.claims.held, log=log) if beat_every else None
    try:
        if beat is not None:
            beat.start()
        with relaxed_gc():  # a worker prepares rollouts all its life (app/store/gc_relaxed.py)
            ran = _loop(spool, engine, stop, poll, once, log, heartbeat)
        if once and not stop.is_set():
            ran.left = spool.left_unread()
            for f in ran.left:
                log(f"worker: left {f.name} unread: {f.why}")
        return ran
    finally:
        spool.close()
        if beat is not None:
            beat.stop()


def _loop(spool: Spool, engine: Engine, stop: threading.Event, poll: float, once: bool,
          log: Callable[[str], None], heartbeat: Path | None) -> Ran:
    backoff = 0.0
    total = 0
    settle_by: float | None = None  # --once: when nothing else is left, wait until then at most
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
        if done:
            settle_by = None
        elif once:
            now = time.monotonic()
            settle_by = settle_by or now + spool.settle + poll
            due = min((f.due for f in spool.left_unread() if f.due is not None), default=None)
            if due is None or now + due > settle_by:
                break  # nothing left that waiting `settle` seconds would make readable
            stop.wait(min(max(due, poll), settle_by - now))
        else:
            stop.wait(poll)
    return Ran(total)


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
