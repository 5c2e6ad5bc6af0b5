"""Ingest status for operators: the model of the `/ingest` page, its JSON twin `/ingest.json`
and `GET /api/v1/ingest/status`, which `/metrics` also reads (app.routes.status).

Per source (each file the worker follows, under its current path, with the path it was first
seen at when it was renamed since: `was`): bytes behind (its size on disk now, stat'ed by this
process, minus the committed offset; the last size a worker recorded when this host cannot see
the file: `size_from` "worker"), its holder (the worker reading it, and that worker's state),
records committed, records stored from it in the last minute (from `rollout.ingested_at`), the
last error (a record rejected, a file that cannot be read), the last notice apart from it (what
the worker noticed and handled: "its first bytes changed; read again from the start") and the
number of its records in the quarantine. `errors` and `notices` list them all again, by source.
The live sources in the service itself are listed too once they have received anything:
`POST /api/v1/ingest` (HTTP ingest, whose records' source file is `http/<sha256>.jsonl`) and the
OTLP receiver (`/v1/traces`), with their rollouts stored, records rejected (quarantined), the
last one's time and the last error; nothing is behind there (each request is stored before it is answered).
Every worker with a heartbeat (app/worker/heartbeat.py) is listed under `workers`: live, stale
(no beat for more than 3 of its intervals) or gone (stopped cleanly; listed for a day after).
"""
from __future__ import annotations

import os
from datetime import UTC, timedelta

from pydantic import BaseModel

from app import urls
from app.db import models
from app.queries.ingest_status import (
    file_size,
    holder,
    ingest_counts,
    lag_of,
    placed_path,
    spool_of,
    unseen_files,
    worker_state,
)
from app.views.common import iso, readable


class SourceStatus(BaseModel):
    """One file the worker follows, or a live source of the service (`kind` http | otlp).
    A file's `name` is what its records are known by (the path it was first seen at: the
    quarantine's `file`), `path` where it is now, `was` its first path when it was renamed
    (rotated) since, else None."""

    name: str
    path: str
    was: str | None = None
    kind: str = "file"  # file | http | otlp
    format: str | None
    status: str  # active | done | gone; unseen (a file no worker recorded yet); live for http and otlp
    bytes_behind: int
    records: int
    rejected: int
    records_last_minute: int
    records_per_s: float  # over the last minute
    quarantined: int
    last_error: str | None
    notice: str | None = None  # handled, nothing lost: a rewrite or truncation read again from the start
    last_record_at: str | None = None  # RFC 3339 `Z`: the last rollout stored or record rejected (http, otlp)
    last_record_text: str | None = None  # the same for a person, to the second
    quarantine_url: str
    size: int | None = None  # bytes: the file's size the lag is measured against (files only)
    size_from: str | None = None  # disk (stat'ed now by this process) | worker (the last size a worker recorded)
    holder: str | None = None  # the worker id holding the file (its claim, or the worker following its folder)
    holder_state: str | None = None  # live | stale | gone; None when no worker with a heartbeat follows it
    holder_problem: str | None = None  # for a person: a file with bytes to read, or still tailed, has no live holder


class WorkerStatus(BaseModel):
    """A spool worker, from its heartbeat: `state` live | stale (no beat for more than 3 × its
    `interval_seconds`) | gone (stopped cleanly); its last beat (RFC 3339 `Z`, and seconds ago),
    start, the spool folders it follows and the files it held a claim on at its last beat."""

    worker_id: str
    host: str
    pid: int
    version: str
    state: str
    started_at: str
    started_text: str  # the same for a person, to the second
    last_beat_at: str
    last_beat_text: str
    seconds_since_beat: float
    interval_seconds: float
    stopped_at: str | None = None
    spools: list[str]
    files: list[str]
    # its spool folders this host does not find (deleted or unmounted under a live worker: it waits
    # for them, reading nothing); [] when the worker is gone, or the web host cannot see its disk
    missing_spools: list[str] = []


class Message(BaseModel):
    """One source's last error or notice: `source` (its current path, or the live source's
    name) and `message`."""

    source: str
    message: str


class IngestStatus(BaseModel):
    """Every source, the totals, and the quarantine size; the sources' last errors and their
    notices, apart."""

    sources: list[SourceStatus]
    workers: list[WorkerStatus] = []
    errors: list[Message] = []
    notices: list[Message] = []
    bytes_behind: int
    records_last_minute: int
    quarantined: int
    rollouts: int
    records_total: int = 0  # records the spool workers read, ever (never goes down; a read again adds)
    rejected_total: int = 0  # records they rejected, ever


GONE_SHOWN = timedelta(days=1)  # workers stopped longer ago are no longer listed (their rows go after 7 days)

# (kind, name, path, format, the quarantine link's `file`)
LIVE = (("http", "HTTP ingest", "/api/v1/ingest", None, None),
        ("otlp", "OTLP receiver", "/v1/traces", "otlp", "/v1/traces"))


def ingest_status(engine) -> IngestStatus:
    """Ingest status from the database (the worker writes it; any process can read it)."""
    c = ingest_counts(engine, models.utcnow() - timedelta(minutes=1))
    recent, quarantined = c.recent, c.quarantined
    sources = [SourceStatus(
        name=f.name, path=f.path, was=f.name if f.path != _first_path(f.name) else None, format=f.format,
        status=f.status, records=f.records, rejected=f.rejected, records_last_minute=recent.get(f.name, 0),
        records_per_s=round(recent.get(f.name, 0) / 60, 2), quarantined=quarantined.get(f.name, 0),
        **_error_and_notice(f), **_lag_and_holder(f, c.workers, c.now), quarantine_url=urls.quarantine(file=f.name))
        for f in c.files]
    for u in unseen_files(c.files, c.workers, c.now):  # written after their worker died: behind too
        state = worker_state(u.worker, c.now)
        sources.append(SourceStatus(
            name=u.path, path=u.path, format=None, status="unseen", bytes_behind=u.size, records=0, rejected=0,
            records_last_minute=0, records_per_s=0.0, quarantined=0, last_error=None, size=u.size, size_from="disk",
            holder=u.worker.worker_id, holder_state=state,
            holder_problem=f"no worker has seen it: its worker {u.worker.worker_id} is {state} "
                           f"(last beat {readable(u.worker.beat_at)})",
            quarantine_url=urls.quarantine(file=u.path)))
    for kind, name, path, fmt, qfile in LIVE:
        n = c.live.get(kind)
        if n is None or (not n.stored and not n.rejected):
            continue
        sources.append(SourceStatus(
            name=name, path=path, kind=kind, format=fmt, status="live", bytes_behind=0, records=n.stored,
            rejected=n.rejected, records_last_minute=n.stored_recent, records_per_s=round(n.stored_recent / 60, 2),
            quarantined=n.rejected, last_error=n.last_error,
            last_record_at=iso(last := max((t for t in (n.last_stored, n.last_rejected) if t), key=_utc)),
            last_record_text=readable(last),
            quarantine_url=urls.quarantine(file=qfile)))
    shown = [w for w in c.workers if w.stopped_at is None or _utc(w.stopped_at) >= c.now - GONE_SHOWN]
    return IngestStatus(sources=sources, workers=[_worker(w, c.now) for w in shown],
                        errors=[Message(source=s.path if s.kind == "file" else s.name, message=s.last_error)
                                for s in sources if s.last_error],
                        notices=[Message(source=s.path if s.kind == "file" else s.name, message=s.notice)
                                 for s in sources if s.notice],
                        bytes_behind=sum(s.bytes_behind for s in sources),
                        records_last_minute=sum(recent.values()), quarantined=sum(quarantined.values()),
                        rollouts=c.rollouts, records_total=sum(f.records_total for f in c.files),
                        rejected_total=sum(f.rejected_total for f in c.files))


def _lag_and_holder(f, workers: list, now) -> dict:
    """A spool file's lag against its size now, where that size came from, and its holder."""
    w = holder(f, workers, now)
    size = file_size(f, w)
    lag = lag_of(f, size)
    state = worker_state(w, now) if w is not None else None
    problem = None
    if state != "live" and (lag or f.status == "active"):
        folder = (spool_of(w, f.path) if w is not None else None) or "its folder"
        problem = (f"no worker follows {folder}" if w is None else
                   f"its worker {w.worker_id} is {state} (last beat {readable(w.beat_at)}): nothing reads "
                   f"{folder}")
    return {"bytes_behind": lag, "size": size if size is not None else f.size,
            "size_from": "disk" if size is not None else "worker", "holder": w.worker_id if w is not None else None,
            "holder_state": state, "holder_problem": problem}


def _worker(w, now) -> WorkerStatus:
    beat = _utc(w.beat_at)
    return WorkerStatus(worker_id=w.worker_id, host=w.host, pid=w.pid, version=w.version, state=worker_state(w, now),
                        started_at=iso(w.started_at),
                        started_text=readable(w.started_at), last_beat_at=iso(beat), last_beat_text=readable(beat),
                        seconds_since_beat=round(max((now - beat).total_seconds(), 0.0), 1),
                        interval_seconds=w.interval_seconds, stopped_at=iso(w.stopped_at),
                        spools=list(w.spools or []), files=list(w.files or []),
                        missing_spools=_missing_spools(w))


def _missing_spools(w) -> list[str]:
    """The spool folders of a worker still beating that this host does not find, when it finds
    the worker's working folder (it shares the worker's disk: the supported deployments)."""
    if w.stopped_at is not None or not w.cwd or not os.path.isdir(w.cwd):
        return []
    return [d for d in (w.spools or []) if not os.path.isdir(placed_path(d, w.cwd))]


NOTICE_ENDINGS = ("read again from the start",)  # last_error texts of rows written before `notice` (0016)


def _error_and_notice(f) -> dict:
    """A spool file's `last_error` and `notice`; a notice an older worker stored as its last
    error is moved where it belongs."""
    error, notice = f.last_error, f.notice
    if error and error.endswith(NOTICE_ENDINGS):
        error, notice = None, notice or error
    return {"last_error": error, "notice": notice}


def _first_path(name: str) -> str:
    """The path a spool file was first seen at: its name, less the `~2` a name taken before
    gets (app/worker/spool_files.py `unique_name`)."""
    base, sep, n = name.rpartition("~")
    return base if sep and n.isdigit() else name


def _utc(t):
    return t if t.tzinfo else t.replace(tzinfo=UTC)


class StoppedSpool(BaseModel):
    """A spool a run's recent rollouts came from that no live worker reads: its folder, since when
    (RFC 3339 `Z`: its last worker's last beat, or the run's last rollout from it when no worker
    with a heartbeat followed it) and how long ago for a person, that worker and its state
    (stale | gone | None), the bytes waiting in the run's files there, those files, and the banner's
    sentence ("ingestion stopped 4 min ago: no live worker for spool /shared/spool")."""

    spool: str
    since: str
    ago: str
    worker: str | None
    worker_state: str | None
    lag_bytes: int
    files: list[str]
    message: str


class IngestionBanner(BaseModel):
    """The run page's `ingestion`: the spools of its recent rollouts with no live worker, and
    the link to /ingest."""

    stopped: list[StoppedSpool]
    ingest_url: str


def ingestion_banner(conn, run_id: str) -> IngestionBanner | None:
    """The run page's banner (templates/_ingest_banner.html; `ingestion` in its JSON twin), from
    app.queries.ingest_status.ingestion_stopped; None when there is nothing to say."""
    from app.queries.ingest_status import ingestion_stopped

    stopped = ingestion_stopped(conn, run_id)
    if not stopped:
        return None
    now = models.utcnow()
    out = []
    for s in stopped:
        ago = _ago((now - s.since).total_seconds())
        out.append(StoppedSpool(spool=s.spool, since=iso(s.since), ago=ago, worker=s.worker, worker_state=s.state,
                                lag_bytes=s.lag_bytes, files=s.files,
                                message=f"ingestion stopped {ago} ago: no live worker for spool {s.spool}"))
    return IngestionBanner(stopped=out, ingest_url=urls.ingest())


def _ago(seconds: float) -> str:
    """`12 s`, `4 min`, `3 h` (rounded down)."""
    seconds = max(seconds, 0)
    if seconds < 60:
        return f"{int(seconds)} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    return f"{int(seconds // 3600)} h"
