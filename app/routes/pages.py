"""Dashboard pages. Each returns HTML or its JSON twin (`.json` suffix or Accept: application/json).

URLs are stable and readable; training code may print them into its logs:
`/runs`, `/runs/{run}`, `/runs/{run}/rollouts?step=&ending=&group=&task=&reward_min=&reward_max=&flag=&after=`,
`/runs/{run}/rollouts/{rollout_id}`, `/runs/{run}/groups/{group_id}`.
"""
from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import PlainTextResponse, RedirectResponse

from app import views
from app.deps import SessionDep
from app.queries import ENDINGS, RolloutFilters, decode_cursor, get_node, list_quarantine
from app.render import respond, split_twin, wants_json

router = APIRouter(tags=["pages"])


@router.get("/", include_in_schema=False)
def index() -> RedirectResponse:
    return RedirectResponse("/runs")


@router.get("/runs")
@router.get("/runs.json")
def runs(request: Request, session: SessionDep):
    """All runs: rollouts, steps, mean reward and ending counts per run."""
    data = views.runs_page(session)
    return respond(request, "runs.html", data, json=wants_json(request, request.url.path.endswith(".json")))


@router.get("/quarantine")
@router.get("/quarantine.json")
def quarantine(request: Request, session: SessionDep):
    """Records rejected at ingest: file, line, field, error and the first 4 KB of the record."""
    rows = [{"file": q.source_file, "line": q.line, "field": q.field, "error": q.error, "raw": q.raw,
             "at": q.created_at.isoformat()} for q in list_quarantine(session=session)]
    return respond(request, "quarantine.html", {"records": rows},
                   json=wants_json(request, request.url.path.endswith(".json")))


@router.get("/runs/{run_id}")
def run(request: Request, session: SessionDep, run_id: str):
    """A run: per training step, counts per ending and mean reward (errors scored 0 / dropped),
    and the two charts as Plotly figure data."""
    run_id, js = split_twin(run_id)
    return respond(request, "run.html", views.run_page(session, run_id), json=wants_json(request, js))


@router.get("/runs/{run_id}/rollouts")
@router.get("/runs/{run_id}/rollouts.json")
def rollouts(
    request: Request, session: SessionDep, run_id: str,
    step: int | None = None, ending: str | None = None, group: str | None = None, task: str | None = None,
    reward_min: float | None = None, reward_max: float | None = None, flag: str | None = None,
    after: str | None = None, limit: int | None = Query(None, ge=1, le=1000),
):
    """Rollout summaries of a run, filtered, by (step, ingest order); keyset pages via `after`."""
    if ending is not None and ending != "" and ending not in ENDINGS:
        raise HTTPException(422, f"ending must be one of {ENDINGS}")
    if after:
        try:
            decode_cursor(after)
        except ValueError:
            raise HTTPException(422, "after: not a cursor from this API") from None
    filters = RolloutFilters(step=step, ending=ending or None, group=group or None, task=task or None,
                             reward_min=reward_min, reward_max=reward_max, flag=flag or None)
    page_size = limit or request.app.state.settings.page_size
    data = views.rollouts_page(session, run_id, filters, after, page_size)
    return respond(request, "rollouts.html", data, json=wants_json(request, request.url.path.endswith(".json")),
                   block="rows")


@router.get("/runs/{run_id}/rollouts/{rollout_id:path}")
def rollout(request: Request, session: SessionDep, run_id: str, rollout_id: str,
            branch: int = Query(0, ge=0), offset: int = Query(0, ge=0), attempt: int | None = None,
            tokens: str | None = None):
    """One rollout: ending, reward, findings, branches, and one page (50) of the messages of one
    branch with tool calls paired to results and the token strip. `tokens=all` (or the JSON twin)
    gives every token with ids, loss mask and behaviour logprobs."""
    rollout_id, js = split_twin(rollout_id)
    want_json = wants_json(request, js)
    data = views.rollout_page(session, run_id, rollout_id, branch=branch, offset=offset, attempt=attempt,
                              all_tokens=want_json or tokens == "all")
    return respond(request, "rollout.html", data, json=want_json, block="messages")


@router.get("/runs/{run_id}/groups/{group_id:path}")
def group(request: Request, session: SessionDep, run_id: str, group_id: str):
    """A group's rollouts side by side, with advantages under both baseline policies."""
    group_id, js = split_twin(group_id)
    return respond(request, "group.html", views.group_page(session, run_id, group_id), json=wants_json(request, js))


@router.get("/runs/{run_id}/nodes/{rollout_pk}/{idx}.txt")
def node_text(session: SessionDep, run_id: str, rollout_pk: int, idx: int):
    """The full text of one message, as text/plain (never rendered as HTML)."""
    node = get_node(session=session, rollout_pk=rollout_pk, idx=idx)
    if node is None:
        raise HTTPException(404, "not found")
    msg = node.message or {}
    content = msg.get("content")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return PlainTextResponse(content or "", headers={"X-Content-Type-Options": "nosniff",
                                                     "Content-Security-Policy": "default-src 'none'"})
