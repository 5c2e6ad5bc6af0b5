"""A run's rollouts list: filtered summary rows in a chosen order, one keyset page at a time,
with the total count of matches, facets and the URLs of the neighbouring pages, of each sort and
of the CSV download, and the CSV's rows (app/queries/rollout_list.py and rollout_facets.py run
the queries)."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from sqlmodel import Session

from app import urls
from app.queries import findings as q_findings
from app.queries import rollout_facets, rollout_list
from app.queries import runs as q_runs
from app.queries import signatures as q_signatures
from app.queries.common import SUMMARY_COLUMNS
from app.queries.rollout_list import RolloutFilters
from app.queries.steps import step_stats
from app.views.common import FindingLink, PageModel, RolloutSummary, summary_fields, with_labels
from ingest import checks
from ingest.stats import ENDINGS, gradient_tokens

SORTS = [("step", "step"), ("reward", "reward"), ("tokens", "tokens"), ("turns", "turns")]


class RunLink(PageModel):
    id: str
    name: str | None
    url: str


class SortLink(PageModel):
    """A sortable column: `url` sorts by it (descending when it is already the ascending sort)."""

    key: str
    label: str
    active: bool
    desc: bool
    url: str


class RolloutListRow(RolloutSummary):
    """A row of the rollouts list: the summary, and `gradient_tokens`, the "trained" column's
    number (`ingest.stats.gradient_tokens`: the mask-1 tokens `n_trained_tokens`, or 0 for a
    rollout that carries no gradient by itself, as the rollout page says)."""

    gradient_tokens: int = 0


class SignatureFilter(PageModel):
    """The `signature` filter's signature: its id, template (None when the run has no such
    signature) and its place on the run's failures page."""

    id: int
    template: str | None
    url: str


class RolloutsPage(PageModel):
    """One page of rows. Every page has its own URL: `next` / `prev` are the cursors of the
    neighbouring pages (`after=` / `before=`), `next_url` / `prev_url` / `first_url` their links on
    the same face (HTML or JSON twin). `total` counts every match (`total_capped`: at least that
    many, see app.queries.rollout_facets.COUNT_CAP); `facets` are value counts that follow the other
    filters, each value with the query that selects it."""

    run: RunLink
    filters: dict[str, int | float | str]
    sort: str
    list_query: str  # the filters and sort as a query string: each row's `list=` (its prev / next walk this list)
    sorts: list[SortLink]
    endings: list[str]
    finding_kinds: list[str]
    total: int
    total_capped: bool = False
    rollouts: list[RolloutListRow]
    next: str | None
    prev: str | None
    next_url: str | None
    prev_url: str | None
    first_url: str | None
    csv_url: str
    limit: int
    facets: dict[str, list[Any]] | None  # see app.queries.rollout_facets.facets; `timed_out`: facet names
    facets_base: str
    component_sort_url: str | None = None  # with a `component` filter: the list sorted by it, highest first
    signature: SignatureFilter | None = None  # with a `signature` filter: which signature that is



def with_finding_links(session, run_id: str, rows: list[RolloutSummary], url_of) -> None:
    """Fill each row's `findings` (the list's findings column, a rollout page's header): the
    rollout's own kinds (its `flags`, old names read as new) and its group's, sorted, each linking
    to `url_of(kind)` (a rollouts list filtered by it). One query for the groups of all rows."""
    by_group = q_findings.group_kinds(session=session, run_id=run_id,
                                      group_ids=sorted({r.group_id for r in rows if r.group_id is not None}))
    for r in rows:
        kinds = sorted({checks.legacy_kind(k) for k in (r.flags or [])} | set(by_group.get(r.group_id, [])))
        r.findings = [FindingLink(kind=k, label=checks.label(k), url=url_of(k)) for k in kinds]

def rollouts_page(session: Session, run_id: str, filters: RolloutFilters, *, sort: str | None = None,
                  after: str | None = None, before: str | None = None, limit: int, keep_limit: int | None = None,
                  twin: bool = False) -> RolloutsPage | None:
    """One page of a run's rollouts in `sort` order (see app.queries.rollout_list.page). Links stay on
    the same face (HTML or JSON twin) and keep an explicit `limit`; empty filters stay out of
    every URL. None if there is no such run."""
    run = q_runs.get_run(session=session, run_id=run_id)
    if run is None:
        return None
    got = rollout_list.page(session=session, run_id=run_id, filters=filters, columns=rollout_list.list_columns(),
                            sort=sort, after=after, before=before, limit=limit)
    name, desc = rollout_list.parse_sort(sort)
    sort_param = None if name == "step" and not desc else sort
    keep = {**filters.as_query(), "sort": sort_param, "limit": keep_limit}

    def url(json: bool, **extra) -> str:
        return urls.rollouts(run_id, json=json, **{k: v for k, v in {**keep, **extra}.items() if v not in (None, "")})

    sorts = []
    for key, label in SORTS:
        nxt = f"-{key}" if key == name and not desc else key
        sorts.append(SortLink(key=key, label=label, active=key == name, desc=key == name and desc,
                              url=url(twin, sort=None if nxt == "step" else nxt)))
    # kinds beyond the registry's (stored by older checks), from the rollups: no findings scan
    present = {k for st in step_stats(session=session, run_id=run_id, include_unstepped=True,
                                      sections=rollout_facets.list_sections(filters))
               for k in (st.get("findings") or {})}
    rows = [RolloutListRow.model_validate({**d, "gradient_tokens": gradient_tokens(d)})
            for d in with_labels(session, run_id, [summary_fields(r, json=twin) for r in got["rows"]])]
    with_finding_links(session, run_id, rows, lambda kind: url(twin, flag=kind))
    total, capped = rollout_facets.count(session=session, run_id=run_id, filters=filters)
    return RolloutsPage(
        run=RunLink(id=run.id, name=run.name, url=urls.run(run.id, json=twin)),
        filters=filters.as_query(),
        sort=sort or "step",
        list_query=urlencode({**filters.as_query(), **({"sort": sort_param} if sort_param else {})}),
        sorts=sorts,
        endings=ENDINGS,
        finding_kinds=sorted(set(present) | set(q_findings.FINDING_KINDS)),
        total=total,
        total_capped=capped,
        rollouts=rows,
        next=got["next"],
        prev=got["prev"],
        next_url=url(twin, after=got["next"]) if got["next"] else None,
        prev_url=url(twin, before=got["prev"]) if got["prev"] else None,
        first_url=url(twin) if got["prev"] else None,
        csv_url=urls.rollouts_csv(run_id, **{k: v for k, v in keep.items() if k != "limit" and v is not None}),
        limit=limit,
        facets=rollout_facets.facets(session=session, run_id=run_id, filters=filters),
        facets_base=urls.rollouts(run_id, json=twin),
        component_sort_url=url(twin, sort=f"-{rollout_list.COMPONENT_SORT}{filters.component}")
        if filters.component and sort != f"-{rollout_list.COMPONENT_SORT}{filters.component}" else None,
        signature=None if filters.signature is None else SignatureFilter(
            id=filters.signature,
            template=q_signatures.template_of(session=session, run_id=run_id, number=filters.signature),
            url=urls.failures(run_id, json=twin) + ("" if twin else f"#signature-{filters.signature}")),
    )


CSV_COLUMNS = ["run_id", "rollout_id", "attempt", "step", "group_id", "group_index", "task_key", "agent", "ending",
               "ending_detail", "reward", "reward_status", "n_turns", "n_tool_calls", "n_tokens", "n_trained_tokens",
               "gradient_tokens", "n_response_tokens", "n_tool_errors", "staleness", "flags", "url"]


def rollouts_csv_rows(session: Session, run_id: str, filters: RolloutFilters, *, sort: str | None,
                      chunk: int = 2000) -> Iterator[dict]:
    """Every matching rollout as a CSV row (CSV_COLUMNS, written by app.render.csv_response),
    in the list's order, fetched by keyset pages of `chunk`."""
    after = None
    while True:
        got = rollout_list.page(session=session, run_id=run_id, filters=filters, columns=SUMMARY_COLUMNS, sort=sort,
                                after=after, limit=chunk)
        for r in got["rows"]:
            d = dict(r._mapping)
            d["flags"] = " ".join(d.get("flags") or [])
            d["gradient_tokens"] = gradient_tokens(d)
            d["url"] = urls.rollout(d["run_id"], d["rollout_id"], attempt=d["attempt"] or None)
            yield d
        if not got["next"]:
            return
        after = got["next"]
