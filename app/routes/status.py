"""Operators' pages: the `/ingest` status page (and its JSON twin `/ingest.json`; the model is
app.views.ingest_status, also served as `GET /api/v1/ingest/status`), and `/metrics` in
Prometheus text format: the status's totals plus request latency histograms per route
(collected by this process).
"""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from app.asgi import Observed
from app.render import respond, wants_json
from app.views.ingest_status import ingest_status

router = APIRouter(tags=["ingest"])
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


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
    """Prometheus text (format 0.0.4): rollouts stored, records in the quarantine, per source the
    bytes not yet ingested (`rollscope_ingest_lag_bytes{source}`, against each file's size on
    disk now), records read and rejected by the spool workers ever (counters kept in the database:
    they survive restarts and add up across workers), per worker not stopped its last heartbeat
    (Unix seconds) and interval, records in the last minute, request latency (this process), and
    with a read replica the read sessions each engine opened (`rollscope_db_reads_total{engine}`)."""
    st = ingest_status(request.app.state.engine)
    lines = [
        "# HELP rollscope_rollouts_ingested Rollouts stored.", "# TYPE rollscope_rollouts_ingested gauge",
        f"rollscope_rollouts_ingested {st.rollouts}",
        "# HELP rollscope_records_rejected Records in the quarantine.", "# TYPE rollscope_records_rejected gauge",
        f"rollscope_records_rejected {st.quarantined}",
        "# HELP rollscope_ingest_records_total Records the spool workers read (stored or unchanged), ever.",
        "# TYPE rollscope_ingest_records_total counter",
        f"rollscope_ingest_records_total {st.records_total}",
        "# HELP rollscope_ingest_rejected_total Records the spool workers rejected, ever.",
        "# TYPE rollscope_ingest_rejected_total counter",
        f"rollscope_ingest_rejected_total {st.rejected_total}",
        "# HELP rollscope_ingest_lag_bytes Bytes of a source not yet ingested: a spool file's size on disk now "
        "less its committed offset.",
        "# TYPE rollscope_ingest_lag_bytes gauge",
    ]
    lines += [f'rollscope_ingest_lag_bytes{{source="{_esc(s.name)}"}} {s.bytes_behind}' for s in st.sources]
    lines += ["# HELP rollscope_ingest_records_last_minute Rollouts stored in the last minute.",
              "# TYPE rollscope_ingest_records_last_minute gauge",
              f"rollscope_ingest_records_last_minute {st.records_last_minute}"]
    running = [w for w in st.workers if w.state != "gone"]
    lines += ["# HELP rollscope_worker_last_heartbeat_timestamp_seconds A spool worker's last heartbeat (Unix time); "
              "workers stopped cleanly are not listed.",
              "# TYPE rollscope_worker_last_heartbeat_timestamp_seconds gauge"]
    lines += [f'rollscope_worker_last_heartbeat_timestamp_seconds{{worker="{_esc(w.worker_id)}"}} '
              f"{_unix(w.last_beat_at):.3f}" for w in running]
    lines += ["# HELP rollscope_worker_heartbeat_interval_seconds Seconds between a spool worker's heartbeats.",
              "# TYPE rollscope_worker_heartbeat_interval_seconds gauge"]
    lines += [f'rollscope_worker_heartbeat_interval_seconds{{worker="{_esc(w.worker_id)}"}} {w.interval_seconds:g}'
              for w in running]
    routing = request.app.state.read_routing
    if routing is not None:  # with a read replica (app.db.replica): where this process's reads went
        lines += ["# HELP rollscope_db_reads_total Read sessions opened, by engine (replica or primary).",
                  "# TYPE rollscope_db_reads_total counter"]
        lines += [f'rollscope_db_reads_total{{engine="{k}"}} {v}' for k, v in sorted(routing.reads.items())]
    lines += request.app.state.latency.lines()
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


def _unix(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
