"""The search page (`/search?q=&run=&steps=&ending=&role=&kind=&flag=&after=`: rollouts whose
messages, tool outputs, errors or ending match, grouped, with facets) and the deep link to one
message that each hit carries. The query: app/queries/search_query.py and app/queries/search.py;
the shape of the JSON twin: docs/search.md."""
from __future__ import annotations

from sqlmodel import Session

from app import urls
from app.queries import nodes as q_nodes
from app.queries import rollouts as q_rollouts
from app.queries import runs as q_runs
from app.queries import search as search_q
from app.queries.search_query import KINDS, MAX_QUERY_CHARS, Query
from app.store.search import HEAD_TAIL_CHARS
from app.views.common import PageModel
from ingest.graph import branches


class SearchMatch(PageModel):
    """One matching text of a rollout: its `kind` (message, tool_output, tool_error,
    rollout_error, ending), the message's `role` and index (`node_idx`; None for a rollout error
    or the ending), `snippet` as segments (`{"text", "hit"}`: the template escapes trace text
    and marks hits, never rendering it as HTML), `truncated` when the text was longer than
    2 × HEAD_TAIL_CHARS characters and only its head and tail were searched, and `url` (the
    message's deep link, or the rollout page)."""

    kind: str
    role: str | None
    node_idx: int | None
    truncated: bool
    snippet: list[dict]
    url: str


class SearchHit(PageModel):
    """One rollout with matches: where it is, its ending (and the source's reason), `counts` of
    its matching texts per kind, `matches` (the first SHOWN_PER_ROLLOUT, most telling first),
    `more` (matching texts not shown), `url` its rollout page (JSON twin in the twin)."""

    run_id: str
    rollout_id: str
    attempt: int
    step: int | None
    ending: str
    ending_detail: str | None
    counts: dict[str, int]
    matches: list[SearchMatch]
    more: int
    truncated: bool
    url: str


class FacetValue(PageModel):
    """One facet value: `value` (a step, an ending, a kind), `count` (rollouts; texts for kind)
    and `url`, this search narrowed to it."""

    value: int | str | None
    count: int
    url: str


class SearchPage(PageModel):
    q: str
    query: dict
    run: str | None
    runs: list[str]
    kinds: list[str]
    hits: list[SearchHit]
    facets: dict[str, list[FacetValue]]
    total_rollouts: int
    total_matches: int
    capped: bool
    scan_cap: int
    next: str | None
    next_url: str | None
    notes: list[str]
    limit: int
    max_query_chars: int
    head_tail_chars: int


def search_page(session: Session, query: Query, *, params: dict[str, str | None], limit: int,
                after: str | None, json: bool = False) -> SearchPage:
    """The rollouts matching parsed `query` (app.queries.search.search), as a page: grouped
    hits with their snippets and links, facets by step, ending and kind with links that filter,
    the `next` cursor and `next_url`, and notes (terms dropped, a capped scan, texts whose middle
    was not searched). `params` are the URL's filter parameters (kept in every link); `json`:
    links go to JSON twins (a match's `url` to a message is the deep link, a redirect)."""
    res = search_q.search(session=session, query=query, limit=limit, after=after)
    keep = {"q": query.text, **{k: v for k, v in params.items() if v}}
    run = query.filters.get("run")

    def narrowed(name: str, value) -> str:
        return urls.search(json=json, **{**keep, name: value})

    hits = []
    for g in res.rollouts:
        rollout_url = urls.rollout(g.run_id, g.rollout_id, json=json, attempt=g.attempt or None)
        shown = g.matches[:search_q.SHOWN_PER_ROLLOUT]
        hits.append(SearchHit(
            run_id=g.run_id, rollout_id=g.rollout_id, attempt=g.attempt, step=g.step, ending=g.ending,
            ending_detail=g.ending_detail, counts={k: g.counts[k] for k in search_q.KIND_ORDER if g.counts[k]},
            matches=[SearchMatch(kind=m["kind"], role=m["role"], node_idx=m["node_idx"], truncated=m["truncated"],
                                 snippet=m.get("snippet", []),
                                 url=urls.message(g.run_id, g.rollout_pk, m["node_idx"])
                                 if m["node_idx"] is not None else rollout_url)
                     for m in shown],
            more=len(g.matches) - len(shown), truncated=any(m["truncated"] for m in g.matches), url=rollout_url))
    notes = list(query.notes)
    if res.capped:
        notes.append(f"more than {search_q.SCAN_CAP:,} texts match: the newest {search_q.SCAN_CAP:,} are grouped "
                     "and counted; narrow the search (run:, step:, kind:) to see the rest")
    if any(h.truncated for h in hits):
        notes.append(f"some texts are longer than {2 * HEAD_TAIL_CHARS:,} characters: only their first and last "
                     f"{HEAD_TAIL_CHARS:,} were searched (marked “middle not searched”)")
    facets = {"step": [FacetValue(value=v, count=n, url=narrowed("steps", v)) for v, n in res.facets["step"]
                       if v is not None],
              "ending": [FacetValue(value=v, count=n, url=narrowed("ending", v)) for v, n in res.facets["ending"]],
              "kind": [FacetValue(value=v, count=n, url=narrowed("kind", v)) for v, n in res.facets["kind"]]}
    return SearchPage(
        q=query.text, query=query.to_json(), run=str(run) if run else None,
        runs=q_runs.run_ids(session=session), kinds=list(KINDS), hits=hits, facets=facets,
        total_rollouts=res.total_rollouts, total_matches=res.total_matches, capped=res.capped,
        scan_cap=search_q.SCAN_CAP,
        next=res.next, next_url=urls.search(json=json, **keep, after=res.next) if res.next else None,
        notes=notes, limit=limit, max_query_chars=MAX_QUERY_CHARS, head_tail_chars=HEAD_TAIL_CHARS,
    )


MESSAGES_PER_PAGE = 50  # as the rollout page (ROLLSCOPE_WEB__MESSAGES_PER_PAGE's default)


def message_url(session: Session, run_id: str, rollout_pk: int, idx: int, *, json: bool = False) -> str | None:
    """The rollout-page URL (its JSON twin's when `json`) showing message `idx` of a stored
    rollout: the first branch that holds it, the page of that branch it falls on, and its anchor;
    None when there is no such message in the run."""
    row = q_rollouts.rollout_by_pk(session=session, run_id=run_id, rollout_pk=rollout_pk)
    if row is None:
        return None
    graph = q_nodes.graph_headers(session=session, rollout_pk=rollout_pk)
    if not any(g.idx == idx for g in graph):
        return None
    n_attempts = len(q_rollouts.rollout_attempts(session=session, run_id=run_id, rollout_id=row.rollout_id))
    for b, path in enumerate(branches(graph)):
        if idx in path:
            params = {"branch": b, "offset": path.index(idx) // MESSAGES_PER_PAGE * MESSAGES_PER_PAGE}
            if row.attempt or n_attempts > 1:
                params["attempt"] = row.attempt
            return urls.rollout(run_id, row.rollout_id, json=json, **params) + f"#node-{idx}"
    return None
