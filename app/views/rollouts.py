"""A run's rollouts list: filtered summary rows, one keyset page at a time."""
from __future__ import annotations

from sqlmodel import Session

from app import urls
from app.queries import findings as q_findings
from app.queries import rollouts as q_rollouts
from app.queries import runs as q_runs
from app.queries.common import ENDINGS
from app.queries.rollouts import RolloutFilters
from app.views.common import FindingLink, PageModel, RolloutSummary, summary_row
from ingest import checks


class RunLink(PageModel):
    id: str
    name: str | None
    url: str


class RolloutsPage(PageModel):
    """One page of rows; `next` is the cursor of the next page (`after=`), `next_url` its link on
    the same face (HTML or JSON twin)."""

    run: RunLink
    filters: dict[str, int | float | str]
    endings: list[str]
    finding_kinds: list[str]
    rollouts: list[RolloutSummary]
    next: str | None
    next_url: str | None
    limit: int


def rollouts_page(session: Session, run_id: str, filters: RolloutFilters, after: str | None,
                  limit: int, *, keep_limit: int | None = None, twin: bool = False) -> RolloutsPage | None:
    """One page of a run's rollouts. The next link stays on the same face (HTML or JSON twin) and
    keeps an explicit `limit`. None if there is no such run."""
    run = q_runs.get_run(session=session, run_id=run_id)
    if run is None:
        return None
    rows, nxt = q_rollouts.list_rollouts(session=session, run_id=run_id, filters=filters, after=after, limit=limit)
    present = q_findings.run_finding_kinds(session=session, run_id=run_id)
    out_rows = [summary_row(r) for r in rows]
    by_group = q_findings.group_kinds(session=session, run_id=run_id,
                                      group_ids=sorted({r.group_id for r in out_rows if r.group_id is not None}))
    for r in out_rows:  # the findings column: the rollout's own kinds and its group's
        kinds = sorted({checks.legacy_kind(k) for k in (r.flags or [])} | set(by_group.get(r.group_id, [])))
        r.findings = [FindingLink(kind=k, label=checks.label(k), url=urls.rollouts(run_id, **{**filters.as_query(), "flag": k}))
                      for k in kinds]
    return RolloutsPage(
        run=RunLink(id=run.id, name=run.name, url=urls.run(run.id)),
        filters=filters.as_query(),
        endings=ENDINGS,
        finding_kinds=sorted(set(present) | set(q_findings.FINDING_KINDS)),
        rollouts=out_rows,
        next=nxt,
        next_url=urls.rollouts(run_id, json=twin, **filters.as_query(), limit=keep_limit, after=nxt) if nxt else None,
        limit=limit,
    )
