"""Claims: which worker reads which spool file now (app/worker/spool.py tells the whole story).

A worker claims a file for a short lease with `SELECT ... FOR UPDATE SKIP LOCKED`. On Postgres a
claim is also tied to its worker's life: each worker holds a session-level advisory lock
(`WORKER_LOCK_CLASS`, a key of its own, named in its `worker_id` as `host:pid:s<key>`) on a
connection it keeps open, and a claim whose worker's lock is gone (killed, its connection died
with it) is taken over at once, not after the lease. A claim whose holder cannot be checked
(written by an older version) lapses with its lease, and the worker says which file waits on
whose lease, until when. On SQLite one worker at a time holds the database (app/worker/run.py's
lock file) and it lets go of every claim when it starts (`release_all`).
"""
from __future__ import annotations

import os
import random
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from app.worker.spool_files import INGEST, S

LEASE = timedelta(seconds=60)  # a claim lapses after this (a worker that died lets go)
WORKER_LOCK_CLASS = 0x726F6C6C  # pg_advisory_lock(class, key): "roll", the class of workers' session locks
_SESSION_KEY = re.compile(r":s(\d{1,10})\Z")


def new_worker_id() -> str:
    """`host:pid:s<key>`: who the worker is (for a person) and the key of its session lock."""
    return f"{socket.gethostname()}:{os.getpid()}:s{random.randint(1, 2**31 - 1)}"


def session_key(worker_id: str | None) -> int | None:
    """The advisory lock key named in a worker id (None for an id without one)."""
    m = _SESSION_KEY.search(worker_id or "")
    return int(m.group(1)) if m else None


@dataclass
class Claims:
    """One worker's claims. `say(pk, msg)` logs something about a file once."""

    engine: Engine
    say: Callable[[int, str], None]
    # whether a file's path is in this worker's spool folders: it claims only those (workers on
    # other folders share the table, app/worker/spool_files.py `within`)
    mine: Callable[[str], bool] = lambda _path: True
    worker_id: str = field(default_factory=new_worker_id)
    _session: sa.Connection | None = None  # Postgres: the connection holding this worker's advisory lock
    _held: dict[int, str] = field(default_factory=dict)  # pk → name of the files this worker claims now
    foreign: set[int] = field(default_factory=set)  # files (pk) found in other folders: not `mine`

    def held(self) -> list[str]:
        """The names of the files this worker holds a claim on now (its heartbeat lists them)."""
        return list(self._held.values())

    def release_all(self) -> None:
        """Let go of every file claim (the worker's own and a dead one's). For SQLite, where one
        worker at a time holds the database (app/worker/run.py's lock file): a worker killed with
        SIGKILL leaves 60 s leases that would otherwise stall its successor."""
        with self.engine.begin() as conn:
            conn.execute(S.update().where(S.c.spool == INGEST, S.c.claimed_by.is_not(None))
                         .values(claimed_by=None, claimed_until=None))
        self._held.clear()

    def hold_session(self) -> None:
        """Postgres: make sure this worker holds its advisory lock on a live connection (taken
        on the first pass, taken again after the connection was lost). Other workers take over
        the claims of a worker whose lock is gone. Raises the driver's error when the database
        is unreachable (the caller's backoff). If the key is still held by a connection of ours
        the server has not seen die yet, the worker takes a new key (and id)."""
        if self.engine.dialect.name != "postgresql":
            return
        if self._session is not None:
            try:
                self._session.exec_driver_sql("SELECT 1")
                return
            # a connection the server cut (a restart, a dropped database) is invalidated; used again
            # it raises PendingRollbackError, not the driver's error: either way it is replaced
            except (sa.exc.DBAPIError, sa.exc.PendingRollbackError):
                self.drop_session()
        if session_key(self.worker_id) is None:
            self.worker_id = new_worker_id()
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            while not conn.execute(sa.text("SELECT pg_try_advisory_lock(:c, :k)"),
                                   {"c": WORKER_LOCK_CLASS, "k": session_key(self.worker_id)}).scalar_one():
                self.worker_id = new_worker_id()
        except BaseException:
            conn.close()
            raise
        self._session = conn

    def drop_session(self) -> None:
        """Close the session lock's connection (its lock goes with it)."""
        if self._session is None:
            return
        try:
            self._session.close()  # its lock goes with it
        except Exception:  # noqa: BLE001 - a connection already gone
            pass
        self._session = None

    def _gone_holders(self, conn: sa.Connection, now) -> set[str]:
        """Postgres: the workers holding unexpired claims whose session lock is gone (killed,
        or their connection died): their claims are free. A holder whose id names no key
        (an older version) waits for its lease; that is said once per file and holder."""
        if conn.dialect.name != "postgresql":
            return set()
        held = conn.execute(sa.select(S.c.pk, S.c.name, S.c.claimed_by, S.c.claimed_until).where(
            S.c.spool == INGEST, S.c.status == "active", S.c.claimed_by.is_not(None),
            S.c.claimed_by != self.worker_id, S.c.claimed_until >= now)).all()
        if not held:
            return set()
        live = {int(k) for k in conn.execute(sa.text(
            "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND classid = :c AND objsubid = 2 AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"),
            {"c": WORKER_LOCK_CLASS}).scalars()}
        gone = set()
        for row in held:
            key = session_key(row.claimed_by)
            if key is None:
                self.say(row.pk, f"{row.name}: waits for worker {row.claimed_by}'s lease until "
                                 f"{row.claimed_until:%Y-%m-%d %H:%M:%S} UTC (its worker names no session to check)")
            elif key not in live:
                gone.add(row.claimed_by)
        return gone

    def claim(self, tried: set[int], *, nothing_new: Callable[[object, object], bool]):
        """Take a lease on one active file no other worker holds (row lock, SKIP LOCKED), not one
        of `tried`, nor one that `nothing_new(row, now)` says has nothing to read since the last
        look. The file's row, or None."""
        now = models.utcnow()
        with self.engine.begin() as conn:
            gone = self._gone_holders(conn, now)
            free = sa.or_(S.c.claimed_by.is_(None), S.c.claimed_until < now, S.c.claimed_by == self.worker_id,
                          *([S.c.claimed_by.in_(sorted(gone))] if gone else []))
            while True:
                wanted = sa.and_(S.c.spool == INGEST, S.c.status == "active", free)
                if tried or self.foreign:
                    wanted = sa.and_(wanted, S.c.pk.notin_(sorted(tried | self.foreign)))
                more = False  # rows of other folders were left out: look past them
                for row in conn.execute(sa.select(S).where(wanted).order_by(S.c.updated_at, S.c.pk).limit(50)
                                        .with_for_update(skip_locked=True)):
                    if not self.mine(row.path):
                        self.foreign.add(row.pk)  # another worker's folder (until the next look at the folders)
                        more = True
                        continue
                    if nothing_new(row, now):
                        continue  # nothing new since the last look
                    if row.claimed_by not in (None, self.worker_id):
                        why = ("its database session is gone (the worker died)" if row.claimed_by in gone
                               else "its lease lapsed")
                        self.say(row.pk, f"{row.name}: taking over from worker {row.claimed_by}: {why}; its lease "
                                         f"ran to {row.claimed_until:%Y-%m-%d %H:%M:%S} UTC")
                    conn.execute(S.update().where(S.c.pk == row.pk)
                                 .values(claimed_by=self.worker_id, claimed_until=now + LEASE))
                    self._held[row.pk] = row.name
                    return row
                if not more:
                    return None

    def release(self, pk: int) -> None:
        """Let go of this worker's claim on a file."""
        with self.engine.begin() as conn:
            conn.execute(S.update().where(S.c.pk == pk, S.c.claimed_by == self.worker_id)
                         .values(claimed_by=None, claimed_until=None))
        self._held.pop(pk, None)
