"""`GET /api/v1/quarantine`: the records rejected at ingest, for scripts (the `/quarantine`
page's rows: app/views/quarantine.py), newest first, keyset-paged."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from app import urls
from app.api.v1.schemas import Page
from app.deps import SessionDep
from app.errors import ApiError
from app.params import OptCount, OptStr
from app.queries import quarantine as q_quarantine
from app.views.quarantine import QuarantineRecord, record, runs_with_pages

router = APIRouter(tags=["ingest"])


@router.get("/quarantine", response_model=Page[QuarantineRecord])
def list_quarantine_api(request: Request, session: SessionDep,
                        file: Annotated[OptStr, Query(description="one source file's records (the path as ingested, "
                                                                  "or `http/<sha256>.jsonl`, `/v1/traces`)")] = None,
                        after: OptCount = None, limit: Annotated[int | None, Query(ge=1, le=1000)] = None):
    """Quarantined records, newest first, `limit` at a time after `after` (the previous page's
    `next`). Each: file, line (null: the whole file), field, error, raw (first 4 KB); `run` (when
    known or given); `source` (a file's path, or `http:<token name>` for HTTP ingest and
    `/v1/traces`; `source_kind` file | http, `token`); `first_seen`, `last_seen` (RFC 3339 `Z`).
    422 for a `limit` over `api.max_page_size`."""
    api = request.app.state.settings.api
    if limit is not None and limit > api.max_page_size:
        raise ApiError(422, f"limit must be at most {api.max_page_size}", field="limit")
    rows, nxt = q_quarantine.list_quarantine(session=session, file=file, before=after, limit=limit or api.page_size)
    runs = runs_with_pages(session, rows)
    items = [record(r, twin=True, runs=runs) for r in rows]
    if nxt is None:
        return Page[QuarantineRecord](items=items)
    return Page[QuarantineRecord](items=items, next=str(nxt),
                                  next_url=urls.api_quarantine(file=file, limit=limit, after=nxt))
