"""Ingest status for operators: the model of the `/ingest` page, its JSON twin `/ingest.json`
and `GET /api/v1/ingest/status`, which `/metrics` also reads (app.routes.status).

Per source (each file the worker follows): bytes behind (size seen minus committed offset),
records committed, records stored from it in the last minute (from `rollout.ingested_at`), the
last error and the number of its records in the quarantine. The live sources in the service
itself are listed too once they have received anything: `POST /api/v1/ingest` (HTTP ingest,
whose records' source file is `http/<sha256>.jsonl`) and the OTLP receiver (`/v1/traces`), with
their rollouts stored, records rejected (quarantined), the last one's time and the last error;
nothing is behind there (each request is stored before it is answered).
"""
from __future__ import annotations

from datetime import UTC, timedelta

from pydantic import BaseModel

from app import urls
from app.db import models
from app.queries.ingest_status import ingest_counts
from app.views.common import iso


class SourceStatus(BaseModel):
    """One file the worker follows, or a live source of the service (`kind` http | otlp)."""

    name: str
    path: str
    kind: str = "file"  # file | http | otlp
    format: str | None
    status: str  # active | done | gone; live for http and otlp
    bytes_behind: int
    records: int
    rejected: int
    records_last_minute: int
    records_per_s: float  # over the last minute
    quarantined: int
    last_error: str | None
    last_record_at: str | None = None  # RFC 3339 `Z`: the last rollout stored or record rejected (http, otlp)
    quarantine_url: str


class IngestStatus(BaseModel):
    """Every source, the totals, and the quarantine size."""

    sources: list[SourceStatus]
    bytes_behind: int
    records_last_minute: int
    quarantined: int
    rollouts: int


# (kind, name, path, format, the quarantine link's `file`)
LIVE = (("http", "HTTP ingest", "/api/v1/ingest", None, None),
        ("otlp", "OTLP receiver", "/v1/traces", "otlp", "/v1/traces"))


def ingest_status(engine) -> IngestStatus:
    """Ingest status from the database (the worker writes it; any process can read it)."""
    c = ingest_counts(engine, models.utcnow() - timedelta(minutes=1))
    recent, quarantined = c.recent, c.quarantined
    sources = [SourceStatus(
        name=f.name, path=f.path, format=f.format, status=f.status,
        bytes_behind=max(f.size - f.offset, 0) if f.status == "active" else 0,
        records=f.records, rejected=f.rejected, records_last_minute=recent.get(f.name, 0),
        records_per_s=round(recent.get(f.name, 0) / 60, 2), quarantined=quarantined.get(f.name, 0),
        last_error=f.last_error, quarantine_url=urls.quarantine(file=f.name)) for f in c.files]
    for kind, name, path, fmt, qfile in LIVE:
        n = c.live.get(kind)
        if n is None or (not n.stored and not n.rejected):
            continue
        sources.append(SourceStatus(
            name=name, path=path, kind=kind, format=fmt, status="live", bytes_behind=0, records=n.stored,
            rejected=n.rejected, records_last_minute=n.stored_recent, records_per_s=round(n.stored_recent / 60, 2),
            quarantined=n.rejected, last_error=n.last_error,
            last_record_at=iso(max((t for t in (n.last_stored, n.last_rejected) if t), key=_utc)),
            quarantine_url=urls.quarantine(file=qfile)))
    return IngestStatus(sources=sources, bytes_behind=sum(s.bytes_behind for s in sources),
                        records_last_minute=sum(recent.values()), quarantined=sum(quarantined.values()),
                        rollouts=c.rollouts)


def _utc(t):
    return t if t.tzinfo else t.replace(tzinfo=UTC)
