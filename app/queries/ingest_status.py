"""What the ingest status reads (the `/ingest` page, its twin, `GET /api/v1/ingest/status`,
`/metrics`): the worker's spool files, rollouts stored and records quarantined per source file,
and the live sources of the service itself (HTTP ingest, the OTLP receiver). The worker writes
these rows; any process can read them. The page model is app.views.ingest_status."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from app.db import models
from app.worker.spool_files import INGEST

S, R, Q = models.SpoolFile.__table__, models.Rollout.__table__, models.Quarantine.__table__


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
    return IngestCounts(files, recent, quarantined, rollouts, live)


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
