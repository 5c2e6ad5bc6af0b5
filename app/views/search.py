"""The search page (`/search?q=&run=&before=`: hits with marked snippets, newest first) and the
deep link to one message that each hit carries. The query: app/queries/search.py."""
from __future__ import annotations

from urllib.parse import urlencode

from sqlmodel import Session

from app import urls
from app.queries import nodes as q_nodes
from app.queries import rollouts as q_rollouts
from app.queries import runs as q_runs
from app.queries import search as search_q
from app.views.common import PageModel
from ingest.graph import branches


class SearchHit(PageModel):
    """A matching message: where it is, its role, and `snippet` as segments (`{"text", "hit"}`,
    so the template escapes trace text and marks hits without rendering it as HTML); `url` the
    message's deep link (a redirect to its rollout page), `rollout_url` its rollout."""

    run_id: str
    rollout_id: str
    attempt: int
    step: int | None
    rollout_pk: int
    node_idx: int
    role: str | None
    snippet: list[dict]
    url: str
    rollout_url: str


class SearchPage(PageModel):
    q: str
    run: str | None
    runs: list[str]
    hits: list[SearchHit]
    next_url: str | None
    limit: int


def search_page(session: Session, text: str, *, run_id: str | None, limit: int, before: int | None,
                json: bool = False) -> SearchPage:
    """Messages whose text matches `text` (every word, as a prefix-free full-text match), newest
    first, within one run or across runs; each hit with a snippet (marked segments), the link
    to its message and `rollout_url`. `json`: `rollout_url` and `next_url` go to JSON twins (a
    hit's `url` is the message's deep link, a redirect to the rollout page)."""
    hits, nxt = search_q.search(session=session, text=text, run_id=run_id, limit=limit, before=before) \
        if text.strip() else ([], None)
    params = {"q": text, **({"run": run_id} if run_id else {})}
    return SearchPage(
        q=text, run=run_id,
        runs=q_runs.run_ids(session=session),
        hits=[SearchHit(**h, url=urls.message(h["run_id"], h["rollout_pk"], h["node_idx"]),
                        rollout_url=urls.rollout(h["run_id"], h["rollout_id"], json=json, attempt=h["attempt"] or None))
              for h in hits],
        next_url=urls.search(json=json, **params, before=nxt) if nxt else None,
        limit=limit,
    )


MESSAGES_PER_PAGE = 50  # as the rollout page (ROLLSCOPE_WEB__MESSAGES_PER_PAGE's default)


def message_url(session: Session, run_id: str, rollout_pk: int, idx: int) -> str | None:
    """The rollout-page URL showing message `idx` of a stored rollout: the first branch that
    holds it, the page of that branch it falls on, and its anchor; None when there is no such
    message in the run."""
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
            return f"{urls.run(run_id)}/rollouts/{urls.q(row.rollout_id)}?{urlencode(params)}#node-{idx}"
    return None
