"""What the ingest status reads (the `/ingest` page, its twin, `GET /api/v1/ingest/status`,
`/metrics`): the worker's spool files, rollouts stored and records quarantined per source file,
and the live sources of the service itself (HTTP ingest, the OTLP receiver). The worker writes
these rows; any process can read them. The page model is app.views.ingest_status.

Workers (`worker_heartbeat`, app/worker/heartbeat.py) are *live*, *stale* (no beat for more than
`STALE_BEATS` of their intervals: killed, hung, or cut off from the database) or *gone* (stopped
cleanly). A spool file's *holder* is the worker whose claim on it is current, else the workers
that follow its folder (a live one first). Its lag is measured against its size on disk now,
stat'ed by the process that reads the status (`file_size`): the web server sees the spool at the
same path as the workers in the supported deployments (docs/deploy.md); where it cannot (another
host), the last size a worker recorded is used and `size_from` says so."""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from app.db import models
from app.worker.heartbeat import STALE_BEATS
from app.worker.spool_files import INGEST

S, R, Q = models.SpoolFile.__table__, models.Rollout.__table__, models.Quarantine.__table__
H = models.WorkerHeartbeat.__table__
BANNER_WINDOW = timedelta(hours=1)  # a run whose newest spool rollout is older than this shows no banner


@dataclass
class LiveCounts:
    """One live source's numbers: rollouts stored (rows, every attempt), in the last minute, the
    last stored; records quarantined, the last one's time and error (`field: error`)."""

    stored: int = 0
    stored_recent: int = 0
    last_stored: datetime | None = None
    rejected: int = 0
    last_rejected: datetime | None = None
    last_error: str | None = None


@dataclass
class IngestCounts:
    """Everything the status shows, read in one connection."""

    files: list  # spool_file rows of the ingest spool, in claim order
    recent: dict[str, int]  # source file → rollouts stored since `since`
    quarantined: dict[str, int]  # source file → records in the quarantine
    rollouts: int
    live: dict[str, LiveCounts]  # 'http' | 'otlp' → its numbers, for those with any row
    workers: list  # worker_heartbeat rows, the latest beat first
    now: datetime  # when read (the reader's clock: states and ages are measured from it)


def _kind(col):
    """'http' for HTTP ingest's files (`http/<sha256>.jsonl`), 'otlp' for the receiver's, else NULL."""
    return sa.case((col.like("http/%"), "http"), (col == "/v1/traces", "otlp"))


def _live_only(col):
    """The rows `_kind` names, as ranges an index on `col` serves on both databases (a LIKE
    prefix is not index-served on SQLite's default collation or Postgres's without
    text_pattern_ops): "http/" ≤ col < "http0" ("0" follows "/"), or the receiver's name."""
    return sa.or_(sa.and_(col >= "http/", col < "http0"), col == "/v1/traces")


def ingest_counts(engine, since: datetime) -> IngestCounts:
    """The status's numbers; `since` starts "the last minute"."""
    with engine.connect() as conn:
        files = conn.execute(sa.select(S).where(S.c.spool == INGEST).order_by(S.c.pk)).all()
        recent = dict(conn.execute(sa.select(R.c.source_file, sa.func.count()).where(R.c.ingested_at >= since)
                                   .group_by(R.c.source_file)).all())
        quarantined = dict(conn.execute(sa.select(Q.c.source_file, sa.func.count()).group_by(Q.c.source_file)).all())
        rollouts = conn.execute(sa.select(sa.func.count()).select_from(R)).scalar_one()
        live = _live_counts(conn, since)
        workers = heartbeats(conn)
    return IngestCounts(files, recent, quarantined, rollouts, live, workers, models.utcnow())


def heartbeats(conn) -> list:
    """Every worker's heartbeat row, the latest beat first."""
    return conn.execute(sa.select(H).order_by(H.c.beat_at.desc(), H.c.pk.desc())).all()


def _utc(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def worker_state(w, now: datetime) -> str:
    """`gone` (stopped cleanly), `stale` (its last beat is older than STALE_BEATS of its
    intervals) or `live`."""
    if w.stopped_at is not None:
        return "gone"
    return "stale" if (now - _utc(w.beat_at)).total_seconds() > STALE_BEATS * w.interval_seconds else "live"


def placed_path(path: str, cwd: str | None) -> str:
    """`path` as a worker stored it, placed with that worker's working folder `cwd` when relative."""
    return os.path.normpath(path if os.path.isabs(path) or not cwd else os.path.join(cwd, path))


def spool_of(w, path: str) -> str | None:
    """The spool folder of worker `w` (as it was given) that holds `path` (a file's path as the
    worker stored it; relative ones are placed with the worker's working folder), or None."""
    p = placed_path(path, w.cwd)
    for d in w.spools or []:
        if p.startswith(placed_path(d, w.cwd).rstrip(os.sep) + os.sep):
            return d
    return None


def holder(f, workers: list, now: datetime):
    """The worker that holds spool file `f`: the one whose claim on it is current, else a live
    one that follows its folder, else the one of those that beat last; None when no worker with a
    heartbeat ever followed it."""
    if f.claimed_by and f.claimed_until is not None and _utc(f.claimed_until) >= now:
        for w in workers:
            if w.worker_id == f.claimed_by:
                return w
    followers = [w for w in workers if spool_of(w, f.path) is not None]
    live = [w for w in followers if worker_state(w, now) == "live"]
    return (live or followers or [None])[0]


def file_size(f, w) -> int | None:
    """Spool file `f`'s size on disk now, stat'ed by this process (its path placed with its
    holder `w`'s working folder when relative), or None when this host cannot see it."""
    try:
        return os.stat(placed_path(f.path, w.cwd if w is not None else None)).st_size
    except OSError:
        return None


def lag_of(f, size: int | None) -> int:
    """Bytes of spool file `f` not yet committed: its size now (`size`, or the last size a worker
    recorded when None) less its committed offset; 0 for a file deleted, or finished and unchanged
    since. A gzip file's offset counts uncompressed bytes: its lag is what it grew since last seen."""
    if f.status == "gone":
        return 0
    now_size = f.size if size is None else size
    if f.head[:2] == b"\x1f\x8b":
        return max(now_size - f.size, 0)
    if f.status != "active" and now_size == f.size:
        return 0
    return max(now_size - f.offset, 0)


@dataclass
class Unseen:
    """A file in a spool folder that no live worker follows, which no worker has recorded yet
    (written after its worker died): its path, size, and the worker that followed the folder."""

    path: str
    size: int
    worker: object


def unseen_files(files: list, workers: list, now: datetime) -> list[Unseen]:
    """Files in the spool folders no live worker follows (those this process can see) that have
    no `spool_file` row: their bytes are behind too. A folder a live worker follows is left alone
    (that worker records a new file within a poll), so this walks nothing while workers are up."""
    from app.worker.spool_files import scan

    live = [w for w in workers if worker_state(w, now) == "live"]
    known = {(f.device, f.inode) for f in files}
    out: list[Unseen] = []
    seen_folders: set[str] = set()
    for w in workers:
        for d in w.spools or []:
            folder = placed_path(d, w.cwd)
            if folder in seen_folders or any(spool_of(x, os.path.join(folder, "x")) for x in live):
                continue
            seen_folders.add(folder)
            for key, f in scan([Path(folder)]).items():
                if key not in known:
                    path = os.path.join(d, os.path.relpath(f.path, folder))
                    out.append(Unseen(path, f.size, w))
    return sorted(out, key=lambda u: u.path)


@dataclass
class Stopped:
    """A spool a run's rollouts came from, with no live worker: its folder, since when nothing
    reads it (the last beat of its last worker, or the run's last rollout from it), that worker
    (None if no worker with a heartbeat ever followed it) and its state, the bytes waiting in the
    run's files there, and those files."""

    spool: str
    since: datetime
    worker: str | None
    state: str | None
    lag_bytes: int
    files: list[str]


def ingestion_stopped(conn, run_id: str) -> list[Stopped]:
    """The spools a run's recent rollouts (stored in the last BANNER_WINDOW from a spool file)
    came from that no live worker reads now (the run page's banner). [] when the run received
    nothing lately from a spool file without a live holder. Cheap while workers are up: it reads
    the spool files and the heartbeats (small tables), and the run's rollouts only when some file
    that is not finished has no live holder, and then only those files' (ix_rollout_source_file)."""
    now = models.utcnow()
    workers = heartbeats(conn)
    orphans = {}
    for f in conn.execute(sa.select(S).where(S.c.spool == INGEST, S.c.status == "active")).all():
        w = holder(f, workers, now)
        if w is None or worker_state(w, now) != "live":
            orphans[f.name] = (f, w)
    if not orphans:
        return []
    last = dict(conn.execute(
        sa.select(R.c.source_file, sa.func.max(R.c.ingested_at))
        .where(R.c.source_file.in_(sorted(orphans)), R.c.run_id == run_id, R.c.ingested_at >= now - BANNER_WINDOW)
        .group_by(R.c.source_file)).all())
    out: dict[str, Stopped] = {}
    for name in sorted(last):
        f, w = orphans[name]
        folder = (spool_of(w, f.path) if w is not None else None) or os.path.dirname(f.path)
        since = _utc(w.beat_at) if w is not None else _utc(last[f.name])
        lag = lag_of(f, file_size(f, w))
        st = out.get(folder)
        if st is None:
            out[folder] = Stopped(folder, since, w.worker_id if w else None, worker_state(w, now) if w else None,
                                  lag, [f.path])
        else:
            st.lag_bytes += lag
            st.files.append(f.path)
            st.since = max(st.since, since)
    return sorted(out.values(), key=lambda s: s.spool)


def _live_counts(conn, since) -> dict[str, LiveCounts]:
    """HTTP ingest's and the OTLP receiver's numbers. Index-served (migration 0008): only the
    live sources' rows are read."""
    kr, kq = _kind(R.c.source_file), _kind(Q.c.source_file)
    out: dict[str, LiveCounts] = {}
    for k, n, recent, last in conn.execute(
            sa.select(kr, sa.func.count(), sa.func.count().filter(R.c.ingested_at >= since),
                      sa.func.max(R.c.ingested_at))
            .where(_live_only(R.c.source_file)).group_by(kr)):
        out[k] = LiveCounts(stored=n, stored_recent=recent, last_stored=last)
    rejected = {k: (n, last, pk) for k, n, last, pk in conn.execute(
        sa.select(kq, sa.func.count(), sa.func.max(Q.c.last_seen), sa.func.max(Q.c.pk))
        .where(_live_only(Q.c.source_file)).group_by(kq))}
    errors = {r.pk: (f"{r.field}: " if r.field else "") + r.error for r in conn.execute(
        sa.select(Q.c.pk, Q.c.field, Q.c.error).where(Q.c.pk.in_([v[2] for v in rejected.values()])))} \
        if rejected else {}
    for k, (n, last, pk) in rejected.items():
        c = out.setdefault(k, LiveCounts())
        c.rejected, c.last_rejected, c.last_error = n, last, errors.get(pk)
    return out
