"""`/api/v1`: runs, steps, metrics, step alerts, groups, rollouts (list, one, a branch's messages and token
arrays), findings, labels and notes, a run's export (streamed), HTTP ingest, the ingest
status and the quarantine. Every JSON response is a
pydantic model (the OpenAPI schema is exact); every error is
`{"error": {"code", "message", "field"}}` (app.errors).

Ids are path segments: encode `/` in an id as `%2F`. Unknown query parameters are refused (422).
Lists are keyset-paged (`after` = the previous page's `next`), so a page never repeats or skips a
row that existed when the listing began, while ingest goes on. Item `url`s point to the JSON
twins of the pages.
"""
from __future__ import annotations

from fastapi import APIRouter

from app.api.v1 import (
    alerts,
    export,
    failures,
    findings,
    groups,
    index,
    ingest,
    labels,
    quarantine,
    rollouts,
    runs,
    status,
)
from app.deps import READ_ON_READS, RefuseUnknownQuery

# The error responses of each operation are written into the document by app.api.v1.openapi (from
# what the app does around the routes). Every operation checks the read token here (writes, through
# READ_ON_READS, check their own scope instead: `WriteToken` or `AdminToken` in their signature).
router = APIRouter(prefix="/api/v1", dependencies=[RefuseUnknownQuery, READ_ON_READS])
router.add_api_route("", index.api_index, response_model=index.ApiIndex, tags=["index"])
router.add_api_route("/", index.api_index, response_model=index.ApiIndex, include_in_schema=False)
for module in (runs, alerts, failures, rollouts, groups, findings, labels, export, ingest, status, quarantine):
    router.include_router(module.router)
