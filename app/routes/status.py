"""Ingest status for operators: `GET /api/v1/ingest/status`, the `/ingest` page (and its JSON
twin `/ingest.json`), and `/metrics` in Prometheus text format.

Per source (each file the worker follows): bytes behind (size seen minus committed offset),
records committed, records stored from it in the last minute (from `rollout.ingested_at`), the
last error and the number of its records in the quarantine. The live sources in the service
itself are listed too once they have received anything: `POST /api/v1/ingest` (HTTP ingest,
whose records' source file is `http/<sha256>.jsonl`) and the OTLP receiver (`/v1/traces`), with
their rollouts stored, records rejected (quarantined), the last one's time and the last error;
nothing is behind there (each request is stored before it is answered). `/metrics` adds request latency
histograms per route (collected by this process) and totals from the database.
"""
from __future__ import annotations

from datetime import UTC, timedelta

import sqlalchemy as sa
from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel

from app import urls
from app.asgi import Observed
from app.auth import ReadToken
from app.db import models
from app.errors import ErrorBody
from app.render import respond, wants_json
from app.views.common import iso
from app.worker.spool import INGEST

router = APIRouter(tags=["ingest"])
S, R, Q = models.SpoolFile.__table__, models.Rollout.__table__, models.Quarantine.__table__
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


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


def ingest_status(engine) -> IngestStatus:
    """Ingest status from the database (the worker writes it; any process can read it)."""
    since = models.utcnow() - timedelta(minutes=1)
    with engine.connect() as conn:
        files = conn.execute(sa.select(S).where(S.c.spool == INGEST).order_by(S.c.pk)).all()
        recent = dict(conn.execute(sa.select(R.c.source_file, sa.func.count()).where(R.c.ingested_at >= since)
                                   .group_by(R.c.source_file)).all())
        quarantined = dict(conn.execute(sa.select(Q.c.source_file, sa.func.count()).group_by(Q.c.source_file)).all())
        rollouts = conn.execute(sa.select(sa.func.count()).select_from(R)).scalar_one()
        live = _live_sources(conn, since)
    sources = [SourceStatus(
        name=f.name, path=f.path, format=f.format, status=f.status,
        bytes_behind=max(f.size - f.offset, 0) if f.status == "active" else 0,
        records=f.records, rejected=f.rejected, records_last_minute=recent.get(f.name, 0),
        records_per_s=round(recent.get(f.name, 0) / 60, 2), quarantined=quarantined.get(f.name, 0),
        last_error=f.last_error, quarantine_url=urls.quarantine(file=f.name)) for f in files] + live
    return IngestStatus(sources=sources, bytes_behind=sum(s.bytes_behind for s in sources),
                        records_last_minute=sum(recent.values()), quarantined=sum(quarantined.values()),
                        rollouts=rollouts)


# (kind, name, path, format, the quarantine link's `file`); `_kind` tells a `source_file`'s kind
LIVE = (("http", "HTTP ingest", "/api/v1/ingest", None, None),
        ("otlp", "OTLP receiver", "/v1/traces", "otlp", "/v1/traces"))


def _kind(col):
    """'http' for HTTP ingest's files (`http/<sha256>.jsonl`), 'otlp' for the receiver's, else NULL."""
    return sa.case((col.like("http/%"), "http"), (col == "/v1/traces", "otlp"))


def _live_only(col):
    """The rows `_kind` names, as ranges an index on `col` serves on both databases (a LIKE
    prefix is not index-served on SQLite's default collation or Postgres's without
    text_pattern_ops): "http/" ≤ col < "http0" ("0" follows "/"), or the receiver's name."""
    return sa.or_(sa.and_(col >= "http/", col < "http0"), col == "/v1/traces")


def _live_sources(conn, since) -> list[SourceStatus]:
    """HTTP ingest and the OTLP receiver, those that stored or rejected anything: rollouts stored
    (rows, every attempt), in the last minute, quarantined records, the last time, the last error.
    Index-served (migration 0008): only the live sources' rows are read."""
    kr, kq = _kind(R.c.source_file), _kind(Q.c.source_file)
    stored = {k: (n, recent, last) for k, n, recent, last in conn.execute(
        sa.select(kr, sa.func.count(), sa.func.count().filter(R.c.ingested_at >= since), sa.func.max(R.c.ingested_at))
        .where(_live_only(R.c.source_file)).group_by(kr))}
    rejected = {k: (n, last, pk) for k, n, last, pk in conn.execute(
        sa.select(kq, sa.func.count(), sa.func.max(Q.c.created_at), sa.func.max(Q.c.pk))
        .where(_live_only(Q.c.source_file)).group_by(kq))}
    errors = {r.pk: (f"{r.field}: " if r.field else "") + r.error for r in conn.execute(
        sa.select(Q.c.pk, Q.c.field, Q.c.error).where(Q.c.pk.in_([v[2] for v in rejected.values()])))} \
        if rejected else {}
    out = []
    for kind, name, path, fmt, qfile in LIVE:
        n, recent, last = stored.get(kind, (0, 0, None))
        nq, last_q, pk = rejected.get(kind, (0, None, None))
        if not n and not nq:
            continue
        out.append(SourceStatus(
            name=name, path=path, kind=kind, format=fmt, status="live", bytes_behind=0, records=n,
            rejected=nq, records_last_minute=recent, records_per_s=round(recent / 60, 2),
            quarantined=nq, last_error=errors.get(pk), last_record_at=iso(max((t for t in (last, last_q) if t), key=_utc)),
            quarantine_url=urls.quarantine(file=qfile)))
    return out


def _utc(t):
    return t if t.tzinfo else t.replace(tzinfo=UTC)


@router.get("/api/v1/ingest/status", responses={code: {"model": ErrorBody} for code in (401, 403)})
def status_api(request: Request, _token: ReadToken) -> IngestStatus:
    """Per source: bytes and records behind, records/s over the last minute, last error and
    quarantine count; plus totals."""
    return ingest_status(request.app.state.engine)


@router.get("/ingest", include_in_schema=False)
@router.get("/ingest.json", include_in_schema=False)
def status_page(request: Request):
    """The ingest status page (refreshes itself every 2 s) and its JSON twin."""
    json = wants_json(request)
    return respond(request, "ingest.html", ingest_status(request.app.state.engine), json=json)


class Latency:
    """Request latency per route, as Prometheus histograms (this process's requests)."""

    def __init__(self):
        self.counts: dict[tuple[str, str, str], list[int]] = {}
        self.sums: dict[tuple[str, str, str], float] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, str(status))
        counts = self.counts.setdefault(key, [0] * (len(BUCKETS) + 1))
        for i, b in enumerate(BUCKETS):
            if seconds <= b:
                counts[i] += 1
        counts[-1] += 1
        self.sums[key] = self.sums.get(key, 0.0) + seconds

    def lines(self) -> list[str]:
        out = ["# HELP rollscope_http_request_seconds Request latency by route.",
               "# TYPE rollscope_http_request_seconds histogram"]
        for (method, route, status), counts in sorted(self.counts.items()):
            labels = f'method="{method}",route="{_esc(route)}",status="{status}"'
            for b, n in zip(BUCKETS, counts):
                out.append(f'rollscope_http_request_seconds_bucket{{{labels},le="{b}"}} {n}')
            out.append(f'rollscope_http_request_seconds_bucket{{{labels},le="+Inf"}} {counts[-1]}')
            out.append(f"rollscope_http_request_seconds_sum{{{labels}}} {self.sums[(method, route, status)]:.6f}")
            out.append(f"rollscope_http_request_seconds_count{{{labels}}} {counts[-1]}")
        return out


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Timed(Observed):
    """Observes each HTTP request's duration by route template (inside the routing middleware,
    whose scope carries the matched route)."""

    def __init__(self, app, *, latency: Latency):
        super().__init__(app)
        self.latency = latency

    def observe(self, scope, status: int, seconds: float) -> None:
        route = getattr(scope.get("route"), "path", None) or "other"
        self.latency.observe(scope["method"], route, status, seconds)


def install_latency(app) -> None:
    """Time every request (by route template, not by URL, so ids do not explode the labels)."""
    latency = Latency()
    app.state.latency = latency
    app.add_middleware(_Timed, latency=latency)


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> PlainTextResponse:
    """Prometheus text: rollouts ingested, records rejected (quarantined), bytes behind per source,
    records in the last minute, request latency."""
    st = ingest_status(request.app.state.engine)
    lines = [
        "# HELP rollscope_rollouts_ingested Rollouts stored.", "# TYPE rollscope_rollouts_ingested gauge",
        f"rollscope_rollouts_ingested {st.rollouts}",
        "# HELP rollscope_records_rejected Records in the quarantine.", "# TYPE rollscope_records_rejected gauge",
        f"rollscope_records_rejected {st.quarantined}",
        "# HELP rollscope_ingest_lag_bytes Bytes written to spool files and not yet ingested.",
        "# TYPE rollscope_ingest_lag_bytes gauge",
        f"rollscope_ingest_lag_bytes {st.bytes_behind}",
        "# HELP rollscope_ingest_records_last_minute Rollouts stored in the last minute.",
        "# TYPE rollscope_ingest_records_last_minute gauge",
        f"rollscope_ingest_records_last_minute {st.records_last_minute}",
    ]
    for s in st.sources:
        lines.append(f'rollscope_ingest_source_lag_bytes{{source="{_esc(s.name)}"}} {s.bytes_behind}')
    lines += request.app.state.latency.lines()
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")
