"""Findings: the stored results of the trace checks in a run, keyset-paged, filterable by kind
and severity."""
from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import unquote

from fastapi import APIRouter, Path, Query, Request

from app import urls
from app.api.v1.schemas import Page
from app.deps import SessionDep
from app.errors import ApiError
from app.params import OptCount
from app.queries import findings as q_findings
from app.queries import runs as q_runs
from app.views.common import PageModel
from ingest import checks

router = APIRouter(tags=["findings"])
SEVERITIES = ["info", "warning", "error"]


class FindingItem(PageModel):
    """A finding (docs/checks.md): kind, severity, message, detail, and what it is about. A
    rollout-scope finding (`scope` "rollout") names its rollout, attempt and step and the node and
    token position it points at, and links to the rollout; a group-scope finding (`scope`
    "group") names its group (no rollout, node or position) and links to the group."""

    kind: str
    severity: str
    scope: Literal["rollout", "group"]
    message: str
    node: int | None
    position: int | None
    detail: dict[str, Any] | None
    rollout_id: str | None
    attempt: int | None
    step: int | None
    group_id: str | None
    url: str


@router.get("/runs/{run}/findings", response_model=Page[FindingItem])
def list_findings(request: Request, session: SessionDep,
                  run: Annotated[str, Path(description="run id (`/` encoded as `%2F`)")],
                  kind: Annotated[str | None, Query(description="a finding kind")] = None,
                  severity: Annotated[str | None, Query(description="info, warning or error",
                                                        json_schema_extra={"enum": SEVERITIES})] = None,
                  after: OptCount = None, limit: Annotated[int | None, Query(ge=1, le=1000)] = None):
    """A run's findings in the order they were stored, `limit` at a time after `after`."""
    run_id = unquote(run)
    if q_runs.get_run(session=session, run_id=run_id) is None:
        raise ApiError(404, f"no run {run_id!r}", field="run")
    kind = checks.legacy_kind(kind) if kind is not None else None  # an old name selects the kind renamed from it
    if kind is not None and kind not in q_findings.FINDING_KINDS and \
            kind not in q_findings.run_finding_kinds(session=session, run_id=run_id):
        raise ApiError(422, "kind must be a finding kind: " + ", ".join(q_findings.FINDING_KINDS), field="kind")
    if severity is not None and severity not in SEVERITIES:
        raise ApiError(422, "severity must be one of " + ", ".join(SEVERITIES), field="severity")
    api = request.app.state.settings.api
    if limit is not None and limit > api.max_page_size:
        raise ApiError(422, f"limit must be at most {api.max_page_size}", field="limit")
    n = limit or api.page_size
    rows, nxt = q_findings.list_run_findings(session=session, run_id=run_id, kind=kind, severity=severity,
                                             after=after, limit=n)
    items = [FindingItem(kind=r.kind, severity=r.severity, scope="rollout" if r.rollout_id is not None else "group",
                         message=r.message, node=r.node_idx, position=r.position, detail=r.detail,
                         rollout_id=r.rollout_id, attempt=r.attempt, step=r.step, group_id=r.group_id,
                         url=urls.rollout(run_id, r.rollout_id, json=True, attempt=r.attempt)
                         if r.rollout_id is not None
                         else urls.group(run_id, r.group_id, json=True)) for r in rows]
    return Page[FindingItem](items=items, next=str(nxt) if nxt is not None else None,
                             next_url=urls.api_findings(run_id, kind=kind, severity=severity, limit=limit, after=nxt)
                             if nxt is not None else None)
