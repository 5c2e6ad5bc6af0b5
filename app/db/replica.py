"""Read replicas: which engine serves a request's reads (`ROLLSCOPE_DB__READ_URL`).

Only the sessions of GET requests (HEAD arrives as GET) come here (app.deps.get_session); every
write, ingest, labels, notes, deletes and tokens, keeps the primary, `app.state.engine`. A read
goes to the replica when all of these hold, else to the primary:

- the replica answered its last check: a failed check or a failed connection puts it down for
  `read_retry_seconds`, after which it is tried again;
- it is a standby of this very primary: its `system_identifier` (pg_control_system(), the id
  `initdb` gave the cluster, which `pg_basebackup` copies) is the primary's. A URL that names a
  standby of another cluster (a staging replica, a neighbour's) serves no read: its pages would
  be another database's;
- it lags at most `read_max_lag_seconds` (see "Lag");
- it has replayed the client's own last write: the primary's LSN that the write's response gave
  the client (`Rollscope-LSN` header and cookie, app.read_your_writes) is at or before the
  replica's `pg_last_wal_replay_lsn()`.

The replica's replay LSN and lag are checked at most every `PROBE_SECONDS` by one request's
thread (one query on each server), not on every read; a check a little old only ever sends a
read to the primary that the replica could have served, never the other way round.

Lag. `now() - pg_last_xact_replay_timestamp()` alone misleads on an idle primary: no new
transactions, so the timestamp ages though nothing is missing. The check compares LSNs first: a
replica whose replay LSN has reached the primary's `pg_current_wal_flush_lsn()` (all the primary
could have sent) lags 0. Only a replica that is behind has its lag measured in time, since the
commit of the last transaction it replayed. Comparing with the primary rather than with the
replica's own receive LSN also catches a replica whose WAL receiver lost the primary (it has
replayed all it received, yet is behind). The time measure errs toward the primary: at the first
write after an idle spell the replica reads as lagging until it replays that write (milliseconds).
"""
from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, make_url
from sqlmodel import Session

PROBE_SECONDS = 0.5  # how old the replica's last check may be before a read checks it again
CONNECT_TIMEOUT = 2  # seconds to connect to the replica: a host that vanished must not hold a read long
APPLICATION_NAME = "rollscope-read"  # the replica connections' name in pg_stat_activity
_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")
log = logging.getLogger("rollscope.replica")

# positions as numbers of bytes (`pg_lsn - '0/0'` is numeric), compared in Python
_PRIMARY_FLUSHED = sa.text("SELECT pg_current_wal_flush_lsn() - '0/0'::pg_lsn, "
                           "(SELECT system_identifier FROM pg_control_system())")
_PRIMARY_INSERTED = sa.text("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")
_REPLICA = sa.text("SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn() - '0/0'::pg_lsn, "
                   "EXTRACT(EPOCH FROM clock_timestamp() - pg_last_xact_replay_timestamp()), "
                   "(SELECT system_identifier FROM pg_control_system())")


def parse_lsn(text: str | None) -> int | None:
    """A WAL position as Postgres writes it (`'16/B374D848'`, a `pg_lsn`) → its byte offset; None
    for None or for text that is no LSN (a client's header or cookie is not trusted)."""
    m = _LSN.fullmatch(text.strip()) if text else None
    return (int(m[1], 16) << 32) | int(m[2], 16) if m else None


def format_lsn(lsn: int) -> str:
    """A byte offset → the `pg_lsn` text (`'16/B374D848'`), which `parse_lsn` reads back."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def replica_url(url: str) -> str:
    """The replica's URL with a connect timeout (`CONNECT_TIMEOUT`) and `application_name` unless it
    names its own."""
    u = make_url(url)
    extra = {k: v for k, v in (("connect_timeout", str(CONNECT_TIMEOUT)), ("application_name", APPLICATION_NAME))
             if k not in u.query}
    return u.update_query_dict(extra).render_as_string(hide_password=False)


@dataclass(frozen=True)
class ReplicaCheck:
    """The replica as last checked. `state`: `ok` (serves reads), `lagging` (answers, but further
    behind than the limit allows, or its lag is unknown) or `down` (did not answer; `detail` says
    why). `lag_seconds`: 0 when it has replayed all the primary flushed, else seconds since the
    last transaction it replayed (None when unknown). `replay_lsn`: `pg_last_wal_replay_lsn()` as
    a byte offset."""

    state: str
    lag_seconds: float | None = None
    replay_lsn: int | None = None
    detail: str | None = None


class ReadRouting:
    """Chooses the engine of each read: the `replica` or the `primary` (module docstring). Thread
    safe: the requests' threads share one. `reads` counts the sessions each engine served in this
    process (`/readyz`, `/metrics`)."""

    def __init__(self, primary: Engine, replica: Engine, *, max_lag_seconds: float, retry_seconds: float,
                 probe_seconds: float = PROBE_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.primary, self.replica = primary, replica
        self.max_lag_seconds, self.retry_seconds, self.probe_seconds = max_lag_seconds, retry_seconds, probe_seconds
        self.clock = clock
        self.reads = {"replica": 0, "primary": 0}
        self._last: ReplicaCheck | None = None
        self._checked_at = -math.inf
        self._down_until = -math.inf
        self._checking = threading.Lock()
        self._counting = threading.Lock()

    # --- the replica's state ---------------------------------------------------------------------

    def check(self, *, fresh: bool = False) -> ReplicaCheck | None:
        """The replica's state, checked again when the last check is older than `probe_seconds` and
        it is not resting after a failure (`fresh`: check now, waiting for a check under way; for
        `/readyz`). None while the first check is under way in another thread."""
        now = self.clock()
        if not fresh:
            if now < self._down_until or now - self._checked_at < self.probe_seconds:
                return self._last
            if not self._checking.acquire(blocking=False):
                return self._last  # another thread is checking: its previous answer will do
        else:
            self._checking.acquire()
        try:
            self._last = self._probe()
            self._checked_at = self.clock()
            return self._last
        finally:
            self._checking.release()

    def _probe(self) -> ReplicaCheck:
        try:
            with self.replica.connect() as conn:
                in_recovery, replay, age, system_id = conn.execute(_REPLICA).one()
        except (sa.exc.DBAPIError, OSError) as exc:
            return self._down(exc)
        if not in_recovery:
            # promoted, or the URL names a primary: its data may have parted from ours for good
            return self._down_for("not a standby (pg_is_in_recovery() is false)")
        replay = int(replay) if replay is not None else None
        try:
            with self.primary.connect() as conn:
                flushed, primary_id = conn.execute(_PRIMARY_FLUSHED).one()
        except (sa.exc.DBAPIError, OSError) as exc:
            return ReplicaCheck("lagging", None, replay, f"primary unreachable: {_why(exc)}")
        if system_id != primary_id:
            return self._down_for(f"not a standby of this primary (its system identifier {system_id} is not "
                                  f"the primary's {primary_id}: pg_control_system())")
        flushed = int(flushed)
        if replay is not None and replay >= flushed:
            lag = 0.0
        else:
            lag = max(0.0, float(age)) if age is not None else None
        ok = lag is not None and lag <= self.max_lag_seconds
        self._down_until = -math.inf  # answered: checked again as usual, even if a failure set a rest
        if self._last is not None and self._last.state == "down":
            log.warning("read replica answers again: reads go to it while it keeps up")
        return ReplicaCheck("ok" if ok else "lagging", lag, replay)

    def _down(self, exc: BaseException) -> ReplicaCheck:
        return self._down_for(_why(exc))

    def _down_for(self, why: str) -> ReplicaCheck:
        if self._last is None or self._last.state != "down":
            log.warning("read replica unusable (%s): reads go to the primary, replica tried again in %g s",
                        why, self.retry_seconds)
        self._down_until = self.clock() + self.retry_seconds
        return ReplicaCheck("down", None, None, why)

    def failed(self, exc: BaseException) -> None:
        """The replica failed a read's connection: down for `retry_seconds`, reads on the primary."""
        # not under the check's lock: a check under way (up to the connect timeout) must not hold this read
        self._last = self._down(exc)
        self._checked_at = self.clock()

    # --- choosing ---------------------------------------------------------------------------------

    def engine_for(self, min_lsn: int | None = None) -> Engine:
        """The engine for a read by a client whose last write is at `min_lsn` (None: none known):
        the replica if it is `ok` and has replayed `min_lsn`, else the primary. May check the
        replica (two short queries): call it off the event loop."""
        check = self.check()
        if check is not None and check.state == "ok" and \
                (min_lsn is None or (check.replay_lsn is not None and check.replay_lsn >= min_lsn)):
            return self.replica
        return self.primary

    def open_session(self, min_lsn: int | None = None) -> tuple[Session, Connection | None]:
        """A read session on `engine_for(min_lsn)` and, on the replica, the connection it is bound
        to (close it after the session). The replica's connection is taken here, pinged, so a
        replica gone since its last check costs a fallback to the primary, not a failed page."""
        if self.engine_for(min_lsn) is self.replica:
            try:
                conn = self.replica.connect()
            except (sa.exc.DBAPIError, OSError) as exc:
                self.failed(exc)
            else:
                self._count("replica")
                return Session(bind=conn), conn
        self._count("primary")
        return Session(self.primary), None

    def _count(self, engine: str) -> None:
        with self._counting:
            self.reads[engine] += 1

    def primary_lsn(self) -> int:
        """The primary's `pg_current_wal_insert_lsn()`, as a byte offset: taken after a write has
        committed, every replica that has replayed this far shows that write."""
        with self.primary.connect() as conn:
            return int(conn.execute(_PRIMARY_INSERTED).scalar_one())


def _why(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    first = str(orig).strip().splitlines()
    return f"{type(orig).__name__}: {first[0]}" if first else type(orig).__name__
