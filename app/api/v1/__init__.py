"""`/api/v1`: runs, steps, metrics, groups, rollouts (list, one, a branch's messages and token
arrays), findings, labels and notes, and a run's export (streamed). Every JSON response is a
pydantic model (the OpenAPI schema is exact); every error is
`{"error": {"code", "message", "field"}}` (app.errors).

Ids are path segments: encode `/` in an id as `%2F`. Unknown query parameters are refused (422).
Lists are keyset-paged (`after` = the previous page's `next`), so a page never repeats or skips a
row that existed when the listing began, while ingest goes on. Item `url`s point to the JSON
twins of the pages.
"""
from __future__ import annotations

from fastapi import APIRouter

from app.api.v1 import export, findings, groups, index, labels, rollouts, runs
from app.api.v1.schemas import ERRORS
from app.deps import RefuseUnknownQuery

router = APIRouter(prefix="/api/v1", dependencies=[RefuseUnknownQuery], responses=ERRORS)
router.add_api_route("", index.api_index, response_model=index.ApiIndex, tags=["index"])
router.add_api_route("/", index.api_index, response_model=index.ApiIndex, include_in_schema=False)
for module in (runs, rollouts, groups, findings, labels, export):
    router.include_router(module.router)
