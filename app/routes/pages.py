"""Dashboard pages. Each returns HTML or its JSON twin (`.json` suffix or Accept: application/json).

URLs are stable and readable; training code may print them into its logs:
`/runs`, `/runs/{run}`, `/runs/{run}/rollouts?step=&ending=&group=&task=&reward_min=&reward_max=&flag=&after=`,
`/runs/{run}/rollouts/{rollout_id}`, `/runs/{run}/groups/{group_id}`, `/quarantine?file=&before=`.

Ids may contain `/`: links encode it as `%2F`, and the app routes on a path where `%2F` and `%25`
stay encoded (app.main.routing_path), so every id parameter is unquoted here, once. Routes with
a fixed tail come before the catch-all run page, and `{run_id:path}` also accepts ids typed with
bare slashes.

Every page answers HEAD as it answers GET, headers without the body (app.main.HeadAsGet).

A rollout is identified by (run, rollout id, attempt): `/runs/{run}/rollouts/{id}` shows the
latest attempt, `?attempt=N` attempt N. Links to a retried rollout (attempt > 0, or an id with
several attempts) always name their attempt.

Query values: an empty value means "no filter" (an HTML form submits every field); integers are
bounded to int32, the range of Postgres INTEGER columns, so an out-of-range value is a 422.
"""
from __future__ import annotations

from typing import Annotated
from urllib.parse import unquote

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import PlainTextResponse, RedirectResponse
from pydantic import BeforeValidator, Field

from app import urls
from app.deps import SessionDep
from app.queries import groups as q_groups
from app.queries import rollouts as q_rollouts
from app.queries import runs as q_runs
from app.queries.common import ENDINGS, INT32_MAX, INT32_MIN
from app.queries.nodes import get_node
from app.render import respond, split_twin, wants_json
from app.views.groups import group_page
from app.views.runs import run_page
from app.views.quarantine import quarantine_page
from app.views.rollout import rollout_page
from ingest.schema import content_text

router = APIRouter(tags=["pages"])


def _blank_is_none(v):
    return None if v == "" else v


Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)]
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
OptInt = Annotated[Int32 | None, BeforeValidator(_blank_is_none)]
OptCount = Annotated[Count | None, BeforeValidator(_blank_is_none)]
OptFloat = Annotated[Annotated[float, Field(allow_inf_nan=False)] | None, BeforeValidator(_blank_is_none)]
OptStr = Annotated[str | None, BeforeValidator(_blank_is_none)]
OptLimit = Annotated[Annotated[int, Field(ge=1, le=1000)] | None, BeforeValidator(_blank_is_none)]


def _twin(value: str, exists) -> tuple[str, bool]:
    """The id in the last path segment and whether the JSON twin is asked for. A trailing `.json`
    asks for the twin, unless the id itself ends in `.json` (it exists and the stripped id does
    not): then the segment is the id and the twin is `<id>.json.json` or `Accept: application/json`."""
    value = unquote(value)
    stripped, js = split_twin(value)
    if js and not exists(stripped) and exists(value):
        return value, False
    return stripped, js


@router.get("/", include_in_schema=False)
def index() -> RedirectResponse:
    return RedirectResponse(urls.runs())


@router.get("/runs")
@router.get("/runs.json")
def runs(request: Request, session: SessionDep):
    """All runs: rollouts, steps, mean reward (errors scored 0 / dropped) and ending counts per run."""
    from app.analytics import pages as analytics_pages

    return respond(request, "runs.html", analytics_pages.runs_overview(session), json=wants_json(request))


@router.get("/quarantine")
@router.get("/quarantine.json")
def quarantine(request: Request, session: SessionDep, file: OptStr = None, before: OptCount = None,
               limit: OptLimit = None):
    """Records rejected at ingest, newest first: file, line, field, error and the first 4 KB of the
    record. `file=` keeps one file's; `before=` is the keyset cursor of the next page."""
    json = wants_json(request)
    data = quarantine_page(session, file=file, before=before,
                           limit=limit or request.app.state.settings.web.page_size, keep_limit=limit, twin=json)
    return respond(request, "quarantine.html", data, json=json)


@router.get("/runs/{run_id:path}/nodes/{rollout_pk}/{idx}.txt")
def node_text(session: SessionDep, run_id: str, rollout_pk: Annotated[Count, Path()],
              idx: Annotated[Count, Path()]):
    """The full text of one message, as text/plain (never rendered as HTML): text parts joined,
    other parts named (`[image_url]`), as in the page's preview (ingest.schema.content_text)."""
    node = get_node(session=session, run_id=unquote(run_id), rollout_pk=rollout_pk, idx=idx)
    if node is None:
        raise HTTPException(404, "not found")
    text = content_text((node.message or {}).get("content"))
    return PlainTextResponse(text, headers={"X-Content-Type-Options": "nosniff",
                                                     "Content-Security-Policy": "default-src 'none'"})


@router.get("/runs/{run_id:path}/rollouts/{rollout_id:path}")
def rollout(request: Request, session: SessionDep, run_id: str, rollout_id: str,
            branch: OptCount = None, offset: OptCount = None, attempt: OptInt = None, tokens: OptStr = None):
    """One rollout: ending, reward, findings, branches, and one page (`ROLLSCOPE_WEB__MESSAGES_PER_PAGE`,
    50) of the messages of one
    branch with tool calls paired to results and the token strip. `tokens=all` (or the JSON twin)
    gives every token with ids, loss mask, behaviour logprobs and advantages.

    `attempt=N` shows attempt N of the rollout id; without it, the latest attempt. `attempts`
    lists every attempt of the id with its link, the one shown marked `current`."""
    rollout_id, js = _twin(rollout_id, lambda rid: q_rollouts.get_rollout(
        session=session, run_id=unquote(run_id), rollout_id=rid) is not None)
    want_json = wants_json(request, js)
    data = rollout_page(session, unquote(run_id), rollout_id, web=request.app.state.settings.web,
                        branch=branch or 0, offset=offset or 0, attempt=attempt,
                        all_tokens=want_json or tokens == "all")
    return respond(request, "rollout.html", data, json=want_json, block="messages")


@router.get("/runs/{run_id:path}/groups/{group_id:path}")
def group(request: Request, session: SessionDep, run_id: str, group_id: str):
    """A group's rollouts side by side, with advantages under both baseline policies.

    Members are the latest attempt of each rollout id: a retried rollout counts once, in the
    member list, the baselines and the warnings. Its earlier attempts in the group are listed
    under `superseded`, each linking to its own attempt (`?attempt=N`). Warnings name a size
    other than the declared one, duplicate indices, and indices at or beyond the declared size."""
    group_id, js = _twin(group_id, lambda gid: q_groups.group_exists(session=session, run_id=unquote(run_id),
                                                                       group_id=gid))
    return respond(request, "group.html", group_page(session, unquote(run_id), group_id),
                   json=wants_json(request, js))


@router.get("/runs/{run_id:path}/rollouts")
@router.get("/runs/{run_id:path}/rollouts.json")
@router.get("/runs/{run_id:path}/rollouts.csv")
def rollouts(
    request: Request, session: SessionDep, run_id: str,
    step: OptCount = None, steps: OptStr = None, ending: OptStr = None, group: OptStr = None, task: OptStr = None,
    agent: OptStr = None, reward_min: OptFloat = None, reward_max: OptFloat = None, flag: OptStr = None,
    sort: OptStr = None, after: OptStr = None, before: OptStr = None, limit: OptLimit = None,
):
    """Rollout summaries of a run, filtered: `step` or `steps=A-B`, `ending`, `group` and `task`
    (prefix), `agent`, `reward_min`/`reward_max` (inclusive), `flag` (a finding kind). `sort` is
    `step` (default), `reward`, `tokens` or `turns`, `-` first for descending; missing values
    last. Every page has its own URL: `after` / `before` are keyset cursors from `next_url` /
    `prev_url`. The page carries `total` (all matches) and `facets` (value counts for ending,
    task, agent, step range and findings, each following the other filters). `.csv` downloads
    every matching row.

    Every attempt is a row; `n_attempts` counts the attempts of its rollout id, and the row's
    `url` names its attempt (`?attempt=N`) when that is > 0 or the id has several."""
    from app.analytics import listing
    from app.analytics import pages as analytics_pages

    if ending is not None and ending not in ENDINGS:
        raise HTTPException(422, f"ending must be one of {ENDINGS}")
    filters = listing.ListFilters(step=step, steps=steps, ending=ending, group=group, task=task, agent=agent,
                                  reward_min=reward_min, reward_max=reward_max, flag=flag)
    try:
        filters.step_range()
        listing.parse_sort(sort)
        for cursor in (after, before):
            if cursor:
                listing.decode_cursor(cursor, listing.parse_sort(sort)[0])
    except ValueError as exc:
        raise HTTPException(422, str(exc) if "sort" in str(exc) or "steps" in str(exc)
                            else "after/before: not a cursor from this page") from None
    rid = unquote(run_id)
    if request.url.path.endswith(".csv"):
        if q_runs.get_run(session=session, run_id=rid) is None:
            raise HTTPException(404, "not found")
        from fastapi.responses import StreamingResponse

        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in rid)[:100]
        return StreamingResponse(analytics_pages.rollouts_csv(session, rid, filters, sort=sort),
                                 media_type="text/csv; charset=utf-8",
                                 headers={"Content-Disposition": f'attachment; filename="{name}-rollouts.csv"'})
    json = wants_json(request)
    page_size = limit or request.app.state.settings.web.page_size
    data = analytics_pages.rollouts_list(session, rid, filters, sort=sort, after=after, before=before, limit=page_size,
                                         keep_limit=limit, twin=json)
    return respond(request, "rollouts.html", data, json=json, block="rows")


@router.get("/runs/{run_id:path}")
def run(request: Request, session: SessionDep, run_id: str, steps: OptStr = None,
        smooth: Annotated[Annotated[int, Field(ge=1, le=100)] | None, BeforeValidator(_blank_is_none)] = None):
    """A run: what the source recorded about it (model, config, tokenizer, source files, first and
    last ingest), per training step counts per ending and mean reward (errors scored 0 /
    dropped), and every training-step chart (each fetched from its JSON twin,
    `/runs/{run}/charts/{chart}.json`). `steps=A-B` limits the steps table and the charts;
    `smooth=N` adds an N-step moving average to the charts. Read from the per-step rollups."""
    from app.analytics.steps import StepRange

    run_id, js = _twin(run_id, lambda rid: q_runs.get_run(session=session, run_id=rid) is not None)
    try:
        rng = StepRange.parse(steps)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    return respond(request, "run.html", run_page(session, run_id, steps_range=rng, window=smooth or 1),
                   json=wants_json(request, js))
