"""A spool worker's heartbeat: who it is, what it follows and holds, and that it is alive.

A thread of the worker writes its `worker_heartbeat` row (app/db/models.py) when it starts and
then every `interval` seconds (`ROLLSCOPE_WORKER__HEARTBEAT_SECONDS`, 2 s): its id, host, pid,
version, the spool folders it follows, the files it holds a claim on, and the time. A clean stop
writes `stopped_at` (the worker is *gone*); a killed worker stops beating, and readers call it
*stale* once its last beat is older than `STALE_BEATS` of its own intervals
(app/queries/ingest_status.py `worker_state`).

The beat never stalls ingest: it runs in its own thread, each beat is one UPDATE of the worker's
own row (an INSERT the first time) in a transaction of its own, and on SQLite it waits for the
write lock at most one interval (a busy database skips a beat, never the worker's commit; the
lock is held for the one statement). The worker's chunk transactions never touch this row.
Errors are logged once and the beat carries on; they never reach the worker's loop.

A worker starting marks *gone* the workers that follow one of its folders (resolved paths, each
against its worker's working folder: `spool_files.roots_of`), have not stopped and
are known dead: of its own host, whose process no longer exists (`os.kill(pid, 0)`); on
Postgres, of any host, stale and without their session lock (app/worker/claims.py). A worker
restarted after a SIGKILL replaces the dead one, which would otherwise stay stale (and alerted
on) until its row is deleted (KEEP).
"""
from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from app.db.engine import writes
from app.worker.claims import WORKER_LOCK_CLASS, session_key
from app.worker.spool_files import roots_of

H = models.WorkerHeartbeat.__table__
STALE_BEATS = 3  # a worker whose last beat is older than this many intervals is stale
KEEP = timedelta(days=7)  # rows of workers stopped (or silent) longer ago are deleted when a worker starts


def version() -> str:
    """The installed rollscope's version (`unknown` when not installed as a package)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as of

    try:
        return of("rollscope")
    except PackageNotFoundError:
        return "unknown"


class Heartbeat:
    """The heartbeat of one worker. `worker_id()` and `files()` are asked at each beat (a worker's
    id changes when it takes a new session key; its claims come and go)."""

    def __init__(self, engine: Engine, dirs: list[Path], *, interval: float, worker_id: Callable[[], str],
                 files: Callable[[], list[str]], log: Callable[[str], None] = lambda _m: None):
        self.engine, self.interval = engine, interval
        self.dirs = [str(d) for d in dirs]
        self.worker_id, self.files, self.log = worker_id, files, log
        self.started = models.utcnow()
        self.pk: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self._write = writes(engine, timeout=interval)  # SQLite busy timeout / Postgres lock_timeout

    def start(self) -> None:
        """Beat once now (a database that is down is tried again at the next beat), then every
        `interval` seconds in a daemon thread."""
        self.beat()
        self._thread = threading.Thread(target=self._run, name="rollscope-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()

    def beat(self, *, stopped: bool = False) -> bool:
        """Write the row (insert it the first time); with `stopped`, mark the worker gone.
        True when written; errors are logged (once until a beat succeeds again), never raised."""
        now = models.utcnow()
        # a worker taken for dead (cut off from Postgres long enough to lose its session lock, and
        # marked gone by a worker starting meanwhile) that beats again is live again
        values = dict(worker_id=self.worker_id(), files=sorted(self.files()), beat_at=now,
                      stopped_at=now if stopped else None)
        first = self.pk is None
        try:
            with self._write.begin() as conn:
                if first:
                    conn.execute(H.delete().where(sa.or_(H.c.stopped_at < now - KEEP, H.c.beat_at < now - KEEP)))
                    pk = conn.execute(H.insert().values(
                        **values, host=socket.gethostname(), pid=os.getpid(), version=version(), spools=self.dirs,
                        cwd=os.getcwd(), interval_seconds=self.interval, started_at=self.started)
                        .returning(H.c.pk)).scalar_one()
                else:
                    conn.execute(H.update().where(H.c.pk == self.pk).values(**values))
        except Exception as exc:  # noqa: BLE001 - a missed beat is said, never raised into the worker
            if not self._failing:
                self.log(f"worker: heartbeat not recorded ({_first_line(exc)}); trying again every {self.interval:g} s")
            self._failing = True
            return False
        if first:
            self.pk = pk
        if self._failing:
            self.log("worker: heartbeat recorded again")
        self._failing = False
        if first:
            try:
                with self._write.begin() as conn:
                    self._replace_dead(conn)
            except Exception as exc:  # noqa: BLE001 - tidying up after dead workers is not worth a stop
                self.log(f"worker: could not look for dead workers ({_first_line(exc)})")
        return True

    def _replace_dead(self, conn) -> None:
        """Mark gone (at their last beat) the workers on one of our folders known dead: of this
        host, whose process is gone; on Postgres, of any host, stale and without their session
        lock (app/worker/claims.py)."""
        host = socket.gethostname()
        now = models.utcnow()
        mine = set(roots_of([Path(d) for d in self.dirs]))
        sessions = None
        if conn.dialect.name == "postgresql":
            sessions = {int(k) for k in conn.execute(sa.text(
                "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND classid = :c AND objsubid = 2 "
                "AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"),
                {"c": WORKER_LOCK_CLASS}).scalars()}
        for w in conn.execute(sa.select(H.c.pk, H.c.host, H.c.pid, H.c.worker_id, H.c.spools, H.c.beat_at, H.c.cwd,
                                        H.c.interval_seconds).where(H.c.stopped_at.is_(None),
                                                                    H.c.worker_id != self.worker_id())).all():
            if not set(roots_of([Path(d) for d in w.spools or []], w.cwd)) & mine:
                continue  # none of our folders (compared resolved: `./A` and `/tmp/A` are one, `/tmp/AB` another)
            beat = w.beat_at if w.beat_at.tzinfo else w.beat_at.replace(tzinfo=now.tzinfo)
            stale = (now - beat).total_seconds() > STALE_BEATS * w.interval_seconds
            key = session_key(w.worker_id)
            if (w.host == host and w.pid != os.getpid() and not _alive(w.pid)) or \
                    (stale and sessions is not None and key is not None and key not in sessions):
                conn.execute(H.update().where(H.c.pk == w.pk).values(stopped_at=w.beat_at))
                self.log(f"worker: worker {w.worker_id} died without stopping (last beat "
                         f"{w.beat_at:%Y-%m-%d %H:%M:%S} UTC); marked gone")

    def stop(self) -> None:
        """A clean stop: the thread ends and the row says the worker is gone (`stopped_at`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.interval + 5)
        self.beat(stopped=True)


def _alive(pid: int) -> bool:
    """Whether a process `pid` exists on this host (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _first_line(exc: BaseException) -> str:
    """The driver's message, its first line, cut to 200 characters."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
