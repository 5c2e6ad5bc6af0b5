"""Analytics pages: charts, a training step's story, task changes, compare, search, and the deep
link to a message. Each page has its JSON twin (`.json` or Accept: application/json); charts and
task changes also a CSV download (`.csv`, one row per point).

`/runs/{run}/charts/{chart}[.json|.csv]?steps=A-B&smooth=N`, `/runs/{run}/steps/{step}`,
`/runs/{run}/task-changes?a=&b=`, `/runs/{run}/failures`,
`/compare?runs=a,b[,c...]&steps=&smooth=&paired_offset=`, `/compare/task?runs=a,b&task=&steps=`,
`/search?q=&run=&steps=&ending=&role=&kind=&flag=&after=`,
`/runs/{run}/messages/{rollout_pk}/{idx}` (redirects to the message
on its rollout page: branch, page and anchor).

This router is included before app.routes.pages, whose `/runs/{run_id:path}` catches the rest.
"""
from __future__ import annotations

from typing import Annotated
from urllib.parse import unquote

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import RedirectResponse
from pydantic import BeforeValidator, Field

from app import charts
from app.deps import RefuseUnknownQuery, SessionDep
from app.errors import ApiError, not_found
from app.params import (
    SORT_PATTERN,
    STEP_RANGE_OR_BLANK,
    Count,
    Filters,
    OptCount,
    OptSmooth,
    OptStr,
    _blank_is_none,
    check_rollout_filters,
    step_range,
)
from app.queries import rollout_facets, search_query
from app.queries import runs as q_runs
from app.queries import search as search_q
from app.queries.search_query import ENDINGS, KINDS, MAX_QUERY_CHARS, ROLES
from app.queries.steps import one_step
from app.render import csv_response, page_route, respond, split_suffix, suffix_of, wants_json
from app.views import chart as chart_view
from app.views import compare as compare_view
from app.views import failures as failures_view
from app.views import paired as paired_view
from app.views import search as search_view
from app.views import step as step_view
from app.views import task_changes as task_changes_view
from ingest.fields import INT32_MAX

router = APIRouter(tags=["analytics"], dependencies=[RefuseUnknownQuery])

SearchLimit = Annotated[Annotated[int, Field(ge=1, le=200)] | None, BeforeValidator(_blank_is_none)]
CHART_CSV = ["series", "step", "task", "value", "url"]  # app.charts.figure_rows


def _known_run(session, run_id: str) -> bool:
    return q_runs.get_run(session=session, run_id=run_id) is not None


def _run_ids(runs: list[str]) -> list[str]:
    """`runs=a,b`, or `runs=a&runs=b` (the runs list's checkboxes; each value one id, commas
    and all) → distinct ids, in order."""
    parts = runs if len(runs) > 1 else [x.strip() for x in runs[0].split(",")] if runs else []
    ids = list(dict.fromkeys(r for r in parts if r))
    if not 2 <= len(ids) <= 8:
        raise ApiError(422, "runs: give 2 to 8 different run ids, comma-separated (runs=a,b)", field="runs")
    return ids


def _existing_runs(session, ids: list[str]) -> list[str]:
    """The compared run ids, or the 404 naming the first that does not exist (`no run 'nope'`)."""
    for rid in ids:
        if not _known_run(session, rid):
            raise not_found(rid, None, run_exists=False, field="runs")
    return ids


SearchQuery = Annotated[str, Query(max_length=MAX_QUERY_CHARS, pattern=r"^[^\x00]*$", description=(
    "words (each a prefix), \"phrases\" and filters `run:X step:N|A-B ending:X role:X kind:X flag:X`, "
    "all ANDed (docs/search.md)"))]
SearchAfter = Annotated[OptStr, Query(description="the cursor `next` of the previous page",
                                      json_schema_extra={"pattern": f"^$|{search_q.CURSOR_PATTERN}"})]


def _opt(description: str, values: tuple[str, ...] | None = None):
    extra = {"enum": ["", *values]} if values else {"maxLength": 500}
    return Annotated[OptStr, Query(description=description, json_schema_extra=extra)]


SearchSteps = Annotated[OptStr, Query(description="a step range `A-B` (`A-`, `-B`, `A`)",
                                      json_schema_extra={"pattern": STEP_RANGE_OR_BLANK})]
SearchEnding = _opt("an ending", ENDINGS)
SearchRole = _opt("a message role", ROLES)
SearchKind = _opt("what matched: message, tool_output, tool_error, rollout_error, ending", KINDS)
SearchFlag = _opt("a finding kind")


@page_route(router, "/search")
def search(request: Request, session: SessionDep, q: SearchQuery = "", run: OptStr = None,
           steps: SearchSteps = None, ending: SearchEnding = None, role: SearchRole = None,
           kind: SearchKind = None, flag: SearchFlag = None, after: SearchAfter = None,
           limit: SearchLimit = None):
    """Full-text search over messages, tool outputs and errors, rollout errors and endings
    (docs/search.md): the rollouts whose texts hold every word (as a prefix) and phrase of `q`,
    with the filters of `q` and of the parameters (`run`, `steps`, `ending`, `role`, `kind`,
    `flag`), grouped by rollout (the most telling match first: rollout error, ending, tool
    error, tool output, message), `limit` rollouts a page (default 20) after cursor `after`.
    The twin: `hits` (per rollout: `counts` per kind, `matches` with snippet segments, `url`),
    `facets` (`step`, `ending`: rollouts; `kind`: texts; each value with a `url` that filters),
    `query` (`terms`, `filters`), `next` / `next_url`, `notes`. 422 for a query longer than
    1,000 characters, with NUL, `OR`/`NOT`, a bad filter value or cursor; 404 for an unknown run."""
    try:
        query = search_query.parse(q, run=run, steps=steps, ending=ending, role=role, kind=kind, flag=flag)
        search_q.check_cursor(after)
    except search_query.QueryError as exc:
        raise ApiError(422, str(exc), field=exc.field) from None
    except ValueError as exc:
        raise ApiError(422, str(exc), field="after") from None
    wanted = query.filters.get("run")
    if wanted is not None and not _known_run(session, str(wanted)):
        raise ApiError(404, f"no run {wanted!r}", field="run")
    json = wants_json(request)
    params = {"run": run, "steps": steps, "ending": ending, "role": role, "kind": kind, "flag": flag}
    data = search_view.search_page(session, query, params=params, limit=limit or 20, after=after, json=json)
    return respond(request, "search.html", data, json=json)


@page_route(router, "/compare")
def compare(request: Request, session: SessionDep, runs: Annotated[list[str], Query()] = [],  # noqa: B006
            steps: OptStr = None, smooth: OptSmooth = None, paired_offset: OptCount = None):
    """Two or more runs (`runs=a,b`, or `runs` repeated; up to 8) on one step axis: every
    comparable chart overlaid (`run: series`), and tables of the differences per ending (share)
    and per task (mean reward, errors scored 0; delta = last run − first run). With exactly two
    runs, `paired`: per task the difference of mean reward B − A with its 95 % bootstrap
    interval and verdict (regressed / improved / unclear; those beyond their interval first,
    200 a page from `paired_offset`, `next_url`), and the sign test across tasks (n+, n−, exact
    p); app/views/paired.py gives the shape, app/paired_stats.py the method and sources."""
    json = wants_json(request)
    ids = _existing_runs(session, _run_ids(runs))
    data = compare_view.compare_page(session, ids, steps=step_range(steps), window=smooth or 1, json=json,
                                     paired_offset=paired_offset or 0)
    return respond(request, "compare_runs.html", data, json=json)


@page_route(router, "/compare/task")
def compare_task(request: Request, session: SessionDep, runs: Annotated[list[str], Query()] = [],  # noqa: B006
                 task: Annotated[str, Query(min_length=1, max_length=500)] = "", steps: OptStr = None):
    """Both runs' rollouts of one task side by side (`runs=A,B`, exactly two; `task` the task
    key, exactly): two columns, each row a rollout link with its step, reward and ending (the
    first 500 per run), and the task's paired difference B − A with its interval and verdict as
    on `/compare`. An unknown run is a 404 naming it; a missing task or more runs a 422."""
    json = wants_json(request)
    ids = _existing_runs(session, _run_ids(runs))
    if len(ids) != 2:
        raise ApiError(422, "runs: the side-by-side task page compares exactly two runs (runs=a,b)", field="runs")
    if not task:
        raise ApiError(422, "task: give the task key (task=...)", field="task")
    data = paired_view.task_pair_page(session, ids[0], ids[1], task, steps=step_range(steps), json=json)
    return respond(request, "compare_task.html", data, json=json)


@router.get("/compare/charts/{chart_id}")
def compare_chart(request: Request, session: SessionDep, chart_id: str,
                  runs: Annotated[list[str], Query()] = [],  # noqa: B006
                  steps: OptStr = None,
                  smooth: OptSmooth = None):
    """One chart with the runs overlaid: `.json` (figure data) or `.csv` (series `run: name`)."""
    chart_id, ext = split_suffix(chart_id, (".json", ".csv"))
    chart = charts.REGISTRY.get(chart_id)
    if chart is None or not chart.comparable:
        raise HTTPException(404, f"no comparable chart {chart_id!r}")
    ids = _existing_runs(session, _run_ids(runs))
    fig = compare_view.compare_figure(session, ids, chart, steps=step_range(steps), window=smooth or 1)
    if fig is None:
        raise HTTPException(404, "not found")
    if ext == ".csv":
        return csv_response(CHART_CSV, charts.figure_rows(fig), f"compare-{chart_id}.csv")
    return respond(request, "chart.html", {"figure": fig, "chart": {"id": chart.id, "title": chart.title,
                                                                      "caption": chart.caption}},
                   json=True)


@router.get("/runs/{run_id:path}/charts/{chart_id}")
def chart(request: Request, session: SessionDep, run_id: str, chart_id: str, steps: OptStr = None,
          smooth: OptSmooth = None):
    """One chart of a run as Plotly figure data: the page, `.json` (the figure and its metadata)
    or `.csv` (series, step, task, value, url: one row per point). `steps=A-B` limits the step
    axis; `smooth=N` adds an N-step trailing moving average beside every line (raw points kept).
    Every point's `customdata` is the URL of the rollouts (or the step page) behind it."""
    chart_id, ext = split_suffix(chart_id, (".json", ".csv"))
    if chart_id not in charts.REGISTRY:
        raise HTTPException(404, f"no chart {chart_id!r}; charts: {', '.join(charts.REGISTRY)}")
    json = ext != ".csv" and wants_json(request, ext == ".json")
    data = chart_view.chart_page(session, unquote(run_id), chart_id, steps=step_range(steps), window=smooth or 1,
                                 json=json)
    if data is not None and ext == ".csv":
        return csv_response(CHART_CSV, charts.figure_rows(data.figure), f"{data.run.id}-{chart_id}.csv")
    return respond(request, "chart.html", data, json=json,
                   missing=lambda: not_found(unquote(run_id), None, run_exists=False))


@router.get("/runs/{run_id:path}/facets.json")
def facets(request: Request, session: SessionDep, run_id: str, filters: Filters,
           sort: Annotated[str | None, Query(pattern=SORT_PATTERN)] = None):
    """Facet counts of the rollouts list (JSON only): value counts for ending, task, agent, step
    range and findings under the given filters, each facet ignoring its own filter. Takes every
    parameter the list takes (a list's query can be reused as is); `sort` changes no count."""
    rid = unquote(run_id)
    check_rollout_filters(session, rid, filters)  # 422s as the list's
    if not _known_run(session, rid):
        raise HTTPException(404, "not found")
    total, capped = rollout_facets.count(session=session, run_id=rid, filters=filters)
    return respond(request, "", {"facets": rollout_facets.facets(session=session, run_id=rid, filters=filters),
                                 "total": total, "total_capped": capped}, json=True)


@router.get("/runs/{run_id:path}/steps/{step}")
def step(request: Request, session: SessionDep, run_id: str, step: str):
    """A training step's story: counts per ending with the source's details, reward with and
    without errors against the previous 10 steps, groups and tasks most affected, findings, and
    every rollout that carried no gradient with its reason (first 200 listed)."""
    value, ext = split_suffix(step, (".json",))
    try:
        n = int(value)
        if not 0 <= n <= INT32_MAX:
            raise ValueError
    except ValueError:
        raise ApiError(422, "step: a whole number ≥ 0", field="step") from None
    json = wants_json(request, bool(ext))
    rid = unquote(run_id)
    return respond(request, "step.html", step_view.step_page(session, rid, n, json=json), json=json,
                   missing=lambda: not_found(rid, f"step {n}", run_exists=_known_run(session, rid)))


@page_route(router, "/runs/{run_id:path}/failures")
def failures(request: Request, session: SessionDep, run_id: str):
    """A run's failure signatures (docs/failures.md): the recurring templates of rollout errors,
    tool errors and failed rollouts' last assistant messages, mined at ingest with Drain3, most
    failed rollouts first, each with its share of the failed rollouts, steps (a sparkline), the
    step it arrived at ("new at step N"), example rollouts and the rollouts list filtered by it.
    The JSON twin is `GET /api/v1/runs/{run}/failures`'s shape."""
    rid = unquote(run_id)
    json = wants_json(request)
    return respond(request, "failures.html", failures_view.failures_page(session, rid, json=json), json=json,
                   missing=lambda: not_found(rid, None, run_exists=False))


@page_route(router, "/runs/{run_id:path}/task-changes", offers=(".json", ".csv"))
def task_changes(request: Request, session: SessionDep, run_id: str, a: Annotated[Count, Query()],
                 b: Annotated[Count, Query()]):
    """Tasks whose ending counts or mean reward changed between steps `a` and `b`, largest change
    first; each links to both steps' rollouts of the task. `.csv` downloads the table. A step the
    run does not have is a 404 naming `a` or `b` (as `/steps/{step}` is)."""
    rid = unquote(run_id)
    if _known_run(session, rid):
        for field, n in (("a", a), ("b", b)):
            if one_step(session=session, run_id=rid, step=n) is None:
                raise ApiError(404, f"no step {n} in run {rid!r}", field=field)
    csv_ = suffix_of(request, (".csv",)) == ".csv"
    json = not csv_ and wants_json(request)
    data = task_changes_view.task_changes_page(session, rid, a, b, json=json)
    if data is not None and csv_:
        rows = task_changes_view.task_changes_csv(data)
        return csv_response(task_changes_view.CSV_COLUMNS if rows else ["task"], rows,
                            f"{data.run.id}-tasks-{a}-{b}.csv")
    return respond(request, "task_changes.html", data, json=json,
                   missing=lambda: not_found(rid, None, run_exists=False))


@router.get("/runs/{run_id:path}/messages/{rollout_pk}/{idx}")
@router.get("/runs/{run_id:path}/messages/{rollout_pk}/{idx}.json")  # registered first (the lower decorator)
def message(request: Request, session: SessionDep, run_id: str,
            rollout_pk: Annotated[int, Path(ge=0, le=INT32_MAX)], idx: Annotated[int, Path(ge=0, le=INT32_MAX)]):
    """The deep link to one message: redirects to its rollout page, on the branch and page that
    hold it, at its anchor (`#node-N`); with `.json`, to that page's JSON twin. Search hits link
    here."""
    json = request.url.path.endswith(".json")
    url = search_view.message_url(session, unquote(run_id), rollout_pk, idx, json=json)
    if url is None:
        raise HTTPException(404, "not found")
    return RedirectResponse(url, status_code=307)
