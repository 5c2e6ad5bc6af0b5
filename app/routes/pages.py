"""Dashboard pages. Each returns HTML or its JSON twin (`.json` suffix or Accept: application/json).

URLs are stable and readable; training code may print them into its logs:
`/runs`, `/runs/{run}`,
`/runs/{run}/rollouts?step=&ending=&group=&task=&reward_min=&reward_max=&flag=&label=&staleness=&after=`,
`/runs/{run}/rollouts/{rollout_id}`, `/runs/{run}/groups/{group_id}`, `/quarantine?file=&before=`.

Ids may contain `/`: links encode it as `%2F`, and the app routes on a path where `%2F`, `%2E`
and `%25` stay encoded (app.main.routing_path), so every id parameter is unquoted here, once. An
id ending in `.json` is linked as `...%2Ejson`, apart from its twin's suffix (app.render.by_id). Routes with
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

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response

from app import urls
from app.deps import RefuseUnknownQuery, SessionDep
from app.errors import ApiError, not_found
from app.params import (
    SORT_PATTERN,
    Count,
    Filters,
    OptCount,
    OptInt,
    OptLimit,
    OptSmooth,
    OptStr,
    check_cursors,
    check_rollout_filters,
    step_range,
)
from app.queries import rollout_list
from app.queries import runs as q_runs
from app.queries.nodes import get_node
from app.queries.rollout_list import RolloutFilters
from app.queries.steps import StepRange
from app.render import accepts_json, by_id, csv_response, page_route, respond, suffix_of, wants_json
from app.text import reveal_invisible
from app.views import group_extras, tokenpages
from app.views.groups import group_page
from app.views.quarantine import quarantine_page
from app.views.rollout import rollout_page
from app.views.rollouts import CSV_COLUMNS, rollouts_csv_rows, rollouts_page
from app.views.runs import run_page, runs_page
from ingest import checks
from ingest.fields import INT32_MAX
from ingest.schema import content_text

router = APIRouter(tags=["pages"], dependencies=[RefuseUnknownQuery])


def _shown(segment: str) -> str:
    """The id of a routed path segment (app.render.by_id) as a 404 names it: unquoted, without
    the twin's bare `.json` suffix (neither it nor the id with it exists)."""
    return unquote(segment[: -len(".json")] if segment.endswith(".json") else segment)


def _missing(session, run_id: str, what: str | None = None):
    """A `respond(missing=...)` callback: the 404 naming the run, or `what` in the run."""
    return lambda: not_found(run_id, what, run_exists=what is not None and
                             q_runs.get_run(session=session, run_id=run_id) is not None)
# A page whose last path segment is an id learns from app.render.by_id whether its `.json` is the
# twin suffix or part of the id: an id that itself ends in `.json` has the twin `<id>.json.json`
# (or `Accept: application/json`).


@router.get("/", include_in_schema=False)
def index() -> RedirectResponse:
    return RedirectResponse(urls.runs())


@page_route(router, "/runs")
def runs(request: Request, session: SessionDep):
    """All runs: rollouts, steps, mean reward (errors scored 0 / dropped) and ending counts per run."""
    json = wants_json(request)
    return respond(request, "runs.html", runs_page(session, json=json), json=json)


@page_route(router, "/quarantine")
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
              idx: Annotated[Count, Path()], reveal: bool = False):
    """The full text of one message, as text/plain (never rendered as HTML): text parts joined,
    other parts named (`[image_url]`), as in the page's preview (ingest.schema.content_text).
    `reveal=1` shows bidi controls and invisible characters as `⟨U+XXXX⟩` (app.text), as the page
    does; without it the text is exactly as stored."""
    node = get_node(session=session, run_id=unquote(run_id), rollout_pk=rollout_pk, idx=idx)
    if node is None:
        raise ApiError(404, "not found")
    text = content_text((node.message or {}).get("content"))
    if reveal:
        text = reveal_invisible(text)
    return PlainTextResponse(text, headers={"X-Content-Type-Options": "nosniff",
                                                     "Content-Security-Policy": "default-src 'none'"})


def _list_filters(query: str | None) -> tuple[RolloutFilters, str | None] | None:
    """The filters and sort of a rollouts-list query string (`list=`, as the list's rows carry
    it: every filter of the list page and `sort`), or None when there is none; values that do not
    parse are dropped (the list then is the wider one, or in step order)."""
    if query is None:
        return None
    from urllib.parse import parse_qsl

    kinds = {"step": int, "staleness": int, "signature": int, "reward_min": float, "reward_max": float,
             "component_min": float, "component_max": float}
    out: dict = {}
    sort = None
    for k, v in parse_qsl(query):
        if v == "":
            continue
        if k == "sort":
            try:
                rollout_list.parse_sort(v)
                sort = v
            except ValueError:
                pass
        elif k == "steps":
            try:
                StepRange.parse(v)
                out[k] = v
            except ValueError:
                pass
        elif k in ("step", "ending", "group", "task", "agent", "reward_min", "reward_max", "flag", "label",
                   "staleness", "component", "component_min", "component_max", "signature"):
            try:
                out[k] = kinds.get(k, str)(v) if k != "flag" else checks.legacy_kind(v)
            except ValueError:
                continue
    for k in ("step", "staleness", "signature"):
        if isinstance(out.get(k), int) and not 0 <= out[k] <= INT32_MAX:
            out.pop(k)
    for k in ("reward_min", "reward_max", "component_min", "component_max"):
        if k in out and out[k] != out[k] or k in out and abs(out[k]) == float("inf"):
            out.pop(k)
    if "component" not in out:
        out.pop("component_min", None)
        out.pop("component_max", None)
    return RolloutFilters(**out), sort


@router.get("/runs/{run_id:path}/rollouts/{rollout_id:path}")
def rollout(request: Request, session: SessionDep, run_id: str, rollout_id: str,
            branch: OptCount = None, offset: OptCount = None, attempt: OptInt = None,
            tokens: Annotated[str | None, Query(pattern="^all$")] = None,
            focus: Annotated[str | None, Query(pattern=r"^(m|node|t)-\d{1,10}$")] = None, limit: OptLimit = None,
            node: OptCount = None, from_: Annotated[OptCount, Query(alias="from")] = None, to: OptCount = None,
            at: OptCount = None, radius: OptCount = None, vs: OptCount = None,
            list_: Annotated[str | None, Query(alias="list", max_length=2000)] = None,
            graph: Annotated[int | None, Query(ge=1, le=1)] = None):
    """One rollout: ending, reward, findings, the message graph, branches, and one page
    (`ROLLSCOPE_WEB__MESSAGES_PER_PAGE`, 50) of the messages of one branch with tool calls paired to
    results and the token strip. `tokens=all`
    (or the JSON twin) gives every token with ids, loss mask, behaviour logprobs and advantages,
    and, on a branch's first page or with `graph=1`, the graph (nodes with parent, role, sampled,
    token counts, branches); later pages link it as `graph_url`.

    `focus=m-N` / `t-N` opens the page holding message N / branch token N (the page's script
    adds it for a `#m-N` / `#t-N` link). `attempt=N` shows attempt N of the rollout id; without
    it, the latest attempt.

    Token windows: `node=N&from=S&to=E` gives tokens S..E of node N on `branch` (an htmx
    fragment, or JSON); `at=T&radius=R` the tokens around branch offset T (R ≤ 2048, default
    128). `vs=B` shows `branch` and branch B side by side from their fork point.

    A branch, node, offset, token position (`focus=t-N`, `at`, `from`/`to`) or radius out of
    range is a 422 in the one error shape, naming the parameter (never a silent clamp).

    `list=` carries the query of the rollouts list the reader came from (its filters and `sort`):
    the page then links the previous and next rollout of that list in the list's order (keys
    `p` / `n`)."""
    run = unquote(run_id)
    if node is not None or at is not None:
        template, block = "tokens.html", None

        def build(rid: str, json: bool):
            return tokenpages.token_window_page(session, run, rid, branch=branch or 0, attempt=attempt, node=node,
                                                start=from_ or 0, end=to, at=at,
                                                radius=128 if radius is None else radius)
    elif vs is not None:
        template, block = "compare.html", None

        def build(rid: str, json: bool):
            return tokenpages.branch_compare_page(session, run, rid, a=branch or 0, b=vs, attempt=attempt)
    else:
        template, block = "rollout.html", "messages"

        def build(rid: str, json: bool):
            return rollout_page(session, run, rid, web=request.app.state.settings.web, branch=branch or 0,
                                offset=offset or 0, attempt=attempt, all_tokens=json or tokens == "all", focus=focus,
                                limit=limit, came_from=_list_filters(list_), json=json, with_graph=graph == 1)
    data, json = by_id(rollout_id, accepts_json(request), build)
    what = lambda: _missing_rollout(session, run, rollout_id, attempt)  # noqa: E731
    return respond(request, template, data, json=json, block=block, missing=lambda: _missing(session, run, what())())


def _missing_rollout(session, run: str, segment: str, attempt: int | None) -> str:
    """What a rollout page's 404 names (`segment` as routed): `rollout 'x'`, or `attempt N of
    rollout 'x'` when the rollout exists but has no attempt N."""
    from app.queries.rollouts import get_rollout

    shown = _shown(segment)
    if attempt is not None and any(get_rollout(session=session, run_id=run, rollout_id=r) is not None
                                   for r in dict.fromkeys((unquote(segment), shown))):
        return f"attempt {attempt} of rollout {shown!r}"
    return f"rollout {shown!r}"


@router.get("/runs/{run_id:path}/groups/{group_id:path}")
def group(request: Request, session: SessionDep, run_id: str, group_id: str,
          sort: Annotated[str | None, Query(pattern="^(reward|advantage|index)$")] = None,
          a: OptStr = None, b: OptStr = None):
    """A group's rollouts side by side, with advantages under both baseline policies.

    Members are the latest attempt of each rollout id: a retried rollout counts once, in the
    member list, the baselines and the warnings. Its earlier attempts in the group are listed
    under `superseded`, each linking to its own attempt (`?attempt=N`). Warnings name a size
    other than the declared one, duplicate indices, indices at or beyond the declared size, and
    groups with no learning signal (all rewards equal, or one member left).

    Each member also carries the advantage under the three estimators (Dr. GRPO mean-centred,
    GRPO std-normalised with the sample std, RLOO leave-one-out) for both error policies, the
    advantage the source recorded (with a mismatch marked), and its tokens aligned on the prefix
    all members share. `sort=reward|advantage` orders the members; `a=ID&b=ID` diffs two
    members (messages, then tokens)."""
    if (a is None) != (b is None):
        missing = "b" if b is None else "a"
        raise ApiError(422, f"a diff names two members: give both a= and b= ({missing} is missing)", field=missing)
    run = unquote(run_id)
    if a is not None and b is not None:
        data, json = by_id(group_id, accepts_json(request),
                           lambda gid, json: group_extras.diff_page(session, run, gid, a, b))
        return respond(request, "diff.html", data, json=json,
                       missing=_missing(session, run, f"group {_shown(group_id)!r} with members {a!r} and {b!r}"))
    data, json = by_id(group_id, accepts_json(request),
                       lambda gid, json: group_page(session, run, gid, sort=None if sort == "index" else sort,
                                                    json=json))
    return respond(request, "group.html", data, json=json,
                   missing=_missing(session, run, f"group {_shown(group_id)!r}"))


@page_route(router, "/runs/{run_id:path}/rollouts", offers=(".json", ".csv"))
def rollouts(
    request: Request, session: SessionDep, run_id: str, filters: Filters,
    sort: Annotated[str | None, Query(pattern=SORT_PATTERN)] = None,
    after: OptStr = None, before: OptStr = None, limit: OptLimit = None,
):
    """Rollout summaries of a run, filtered (docs/api.md, "Filters": `step` or `steps=A-B`,
    `ending`, `group` and `task` (exact; a trailing `*` matches a prefix), `agent` (`(none)`:
    rollouts without one), `reward_min`/`reward_max` (inclusive), `flag`, `label`, `staleness`,
    `signature`: a failure signature's id). `sort` is
    `step` (default), `reward`, `tokens` or `turns`, `-` first for descending; missing values
    last. Every page has its own URL: `after` / `before` are keyset cursors from `next_url` /
    `prev_url`. The page carries `total` (all matches) and `facets` (value counts for ending,
    task, agent, step range and findings, each following the other filters). `.csv` downloads
    every matching row.

    Every attempt is a row; `n_attempts` counts the attempts of its rollout id, and the row's
    `url` names its attempt (`?attempt=N`) when that is > 0 or the id has several."""
    rid = unquote(run_id)
    check_rollout_filters(session, rid, filters)
    check_cursors(sort=sort, after=after, before=before)
    if suffix_of(request, (".csv",)):
        if q_runs.get_run(session=session, run_id=rid) is None:
            raise _missing(session, rid)()
        return csv_response(CSV_COLUMNS, rollouts_csv_rows(session, rid, filters, sort=sort),
                            f"{rid[:100]}-rollouts.csv")
    json = wants_json(request)
    page_size = limit or request.app.state.settings.web.page_size
    data = rollouts_page(session, rid, filters, sort=sort, after=after, before=before, limit=page_size,
                         keep_limit=limit, twin=json)
    return respond(request, "rollouts.html", data, json=json, block="rows", missing=_missing(session, rid))


@router.get("/runs/{run_id:path}")
def run(request: Request, session: SessionDep, run_id: str, steps: OptStr = None, smooth: OptSmooth = None,
        since: Annotated[str | None, Query(max_length=100, include_in_schema=False)] = None):
    """A run: what the source recorded about it (model, config, tokenizer, source files, first and
    last ingest), per training step counts per ending and mean reward (errors scored 0 /
    dropped), the checks table, and every training-step chart (each fetched from its JSON twin,
    `/runs/{run}/charts/{chart}.json`). `steps=A-B` limits the steps table and the charts;
    `smooth=N` adds an N-step moving average to the charts. Read from the per-step rollups.
    `since=<version>` (a live page polling with htmx): 204 when nothing changed since that version."""
    steps_range = step_range(steps)
    data, json = by_id(run_id, accepts_json(request), lambda rid, json: run_page(
        session, rid, json=json, steps_range=steps_range, window=smooth or 1))
    if data is not None and since and since == data.version and request.headers.get("hx-request"):
        return Response(status_code=204)  # a live page polling: nothing new, htmx keeps what it shows
    return respond(request, "run.html", data, json=json, missing=_missing(session, _shown(run_id)))
