"""`GET /api/v1/ingest/status`: the ingest status for scripts and monitors (the `/ingest` page's
model: app.views.ingest_status)."""
from __future__ import annotations

from fastapi import APIRouter, Request

from app.views.ingest_status import IngestStatus, ingest_status

router = APIRouter(tags=["ingest"])


@router.get("/ingest/status")
def status_api(request: Request) -> IngestStatus:
    """Per source: bytes and records behind, records/s over the last minute, last error and
    quarantine count; plus totals."""
    return ingest_status(request.app.state.engine)
