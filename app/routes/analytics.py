"""Analytics pages: charts, a training step's story, task changes, compare, search, and the deep
link to a message. Each page has its JSON twin (`.json` or Accept: application/json); charts and
task changes also a CSV download (`.csv`, one row per point).

`/runs/{run}/charts/{chart}[.json|.csv]?steps=A-B&smooth=N`, `/runs/{run}/steps/{step}`,
`/runs/{run}/task-changes?a=&b=`, `/compare?runs=a,b[,c...]&steps=&smooth=`,
`/search?q=&run=&before=`, `/runs/{run}/messages/{rollout_pk}/{idx}` (redirects to the message
on its rollout page: branch, page and anchor).

This router is included before app.routes.pages, whose `/runs/{run_id:path}` catches the rest.
"""
from __future__ import annotations

import csv
import io
from typing import Annotated
from urllib.parse import unquote

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BeforeValidator, Field

from app import charts
from app.analytics import pages
from app.analytics.steps import StepRange, one_step
from app.deps import RefuseUnknownQuery, SessionDep
from app.errors import ApiError
from app.params import (SORT_PATTERN, Count, OptCount, OptFloat, OptSmooth, OptStr, _blank_is_none,
                        check_list_query, check_rollout_filters, step_range)
from app.queries.common import INT32_MAX
from app.render import DOWNLOAD_SUFFIXES, respond, wants_json

router = APIRouter(tags=["analytics"], dependencies=[RefuseUnknownQuery])

SearchLimit = Annotated[Annotated[int, Field(ge=1, le=200)] | None, BeforeValidator(_blank_is_none)]


def _ext(value: str, allowed: tuple[str, ...]) -> tuple[str, str]:
    """'reward.csv' → ('reward', '.csv') for an allowed extension; else (value, ''). A download
    suffix (`.csv`, `.txt`) this page does not offer is a 404 saying so, not a bad parameter
    (`/steps/3.csv` is no step "3.csv")."""
    for ext in allowed:
        if value.endswith(ext):
            return value[: -len(ext)], ext
    for ext in DOWNLOAD_SUFFIXES:
        if value.endswith(ext):
            raise ApiError(404, f"this page has no {ext[1:].upper()} download (its data: the page's .json twin)")
    return value, ""


def _steps(text: str | None) -> StepRange:
    """`steps=A-B` parsed; 422 naming `steps` when it does not parse (app.params.step_range)."""
    return step_range(text)


def _run_ids(runs: list[str]) -> list[str]:
    """`runs=a,b` or `runs=a&runs=b` (the runs list's checkboxes) → distinct ids, in order."""
    ids = list(dict.fromkeys(r for part in runs for r in (x.strip() for x in part.split(",")) if r))
    if not 2 <= len(ids) <= 8:
        raise ApiError(422, "runs: give 2 to 8 different run ids, comma-separated (runs=a,b)", field="runs")
    return ids


def csv_response(rows: list[dict], columns: list[str], filename: str) -> Response:
    """`rows` as a CSV download (header `columns`), formula-safe."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(columns)
    for r in rows:
        w.writerow([pages.csv_cell(r.get(c)) for c in columns])
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in filename)[:120]
    return Response(buf.getvalue(), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{safe}"'})


@router.get("/search")
@router.get("/search.json")
def search(request: Request, session: SessionDep, q: str = "", run: OptStr = None, before: OptCount = None,
           limit: SearchLimit = None):
    """Full-text search over message content and tool output: messages holding every word of
    `q`, newest first, within `run` or across runs. Each hit has a snippet (segments, `hit` marks
    a match) and `url`, the deep link to its message. Keyset pages: `before` from `next_url`.
    An unknown `run` is a 404 naming `run`."""
    if "\x00" in q:
        raise HTTPException(400, "NUL character in the query")
    if run is not None and pages._run(session, run) is None:
        raise ApiError(404, f"no run {run!r}", field="run")
    json = wants_json(request, request.url.path.endswith(".json"))
    data = pages.search_page(session, q[:500], run_id=run, limit=limit or 20, before=before, json=json)
    return respond(request, "search.html", data, json=json)


@router.get("/compare")
@router.get("/compare.json")
def compare(request: Request, session: SessionDep, runs: Annotated[list[str], Query()] = [],  # noqa: B006
            steps: OptStr = None, smooth: OptSmooth = None):
    """Two or more runs (`runs=a,b`, or `runs` repeated; up to 8) on one step axis: every
    comparable chart overlaid (`run: series`), and tables of the differences per ending (share)
    and per task (mean reward, errors scored 0; delta = last run − first run)."""
    json = wants_json(request, request.url.path.endswith(".json"))
    data = pages.compare_page(session, _run_ids(runs), steps=_steps(steps), window=smooth or 1, json=json)
    return respond(request, "compare_runs.html", data, json=json)


@router.get("/compare/charts/{chart_id}")
def compare_chart(request: Request, session: SessionDep, chart_id: str,
                  runs: Annotated[list[str], Query()] = [],  # noqa: B006
                  steps: OptStr = None,
                  smooth: OptSmooth = None):
    """One chart with the runs overlaid: `.json` (figure data) or `.csv` (series `run: name`)."""
    chart_id, ext = _ext(chart_id, (".json", ".csv"))
    chart = charts.REGISTRY.get(chart_id)
    if chart is None or not chart.comparable:
        raise HTTPException(404, f"no comparable chart {chart_id!r}")
    fig = pages.compare_figure(session, _run_ids(runs), chart, steps=_steps(steps), window=smooth or 1)
    if fig is None:
        raise HTTPException(404, "not found")
    if ext == ".csv":
        return csv_response(charts.figure_rows(fig), ["series", "step", "task", "value", "url"], f"compare-{chart_id}.csv")
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
    chart_id, ext = _ext(chart_id, (".json", ".csv"))
    if chart_id not in charts.REGISTRY:
        raise HTTPException(404, f"no chart {chart_id!r}; charts: {', '.join(charts.REGISTRY)}")
    json = ext != ".csv" and wants_json(request, ext == ".json")
    data = pages.chart_page(session, unquote(run_id), chart_id, steps=_steps(steps), window=smooth or 1, json=json)
    if data is not None and ext == ".csv":
        return csv_response(charts.figure_rows(data["figure"]), ["series", "step", "task", "value", "url"],
                            f"{data['run']['id']}-{chart_id}.csv")
    return respond(request, "chart.html", data, json=json)


@router.get("/runs/{run_id:path}/facets.json")
def facets(request: Request, session: SessionDep, run_id: str, step: OptCount = None,
           steps: OptStr = None, ending: OptStr = None, group: OptStr = None, task: OptStr = None,
           agent: OptStr = None, flag: OptStr = None, reward_min: OptFloat = None, reward_max: OptFloat = None,
           label: OptStr = None, staleness: OptCount = None,
           sort: Annotated[str | None, Query(pattern=SORT_PATTERN)] = None):
    """Facet counts of the rollouts list (JSON only): value counts for ending, task, agent, step
    range and findings under the given filters, each facet ignoring its own filter. Takes every
    parameter the list takes (a list's query can be reused as is); `sort` changes no count."""
    from app.analytics import listing

    rid = unquote(run_id)
    check_rollout_filters(session, rid, ending=ending, flag=flag, after=None)  # 422s as the list's
    f = listing.ListFilters(step=step, steps=steps, ending=ending, group=group, task=task, agent=agent, flag=flag,
                            reward_min=reward_min, reward_max=reward_max, label=label, staleness=staleness)
    check_list_query(f, sort=sort, after=None, before=None)
    if pages._run(session, rid) is None:
        raise HTTPException(404, "not found")
    total, capped = listing.count(session=session, run_id=rid, filters=f)
    return respond(request, "", {"facets": listing.facets(session=session, run_id=rid, filters=f),
                                 "total": total, "total_capped": capped}, json=True)


@router.get("/runs/{run_id:path}/steps/{step}")
def step(request: Request, session: SessionDep, run_id: str, step: str):
    """A training step's story: counts per ending with the source's details, reward with and
    without errors against the previous 10 steps, groups and tasks most affected, findings, and
    every rollout that carried no gradient with its reason (first 200 listed)."""
    value, ext = _ext(step, (".json",))
    try:
        n = int(value)
        if not 0 <= n <= INT32_MAX:
            raise ValueError
    except ValueError:
        raise ApiError(422, "step: a whole number ≥ 0", field="step") from None
    json = wants_json(request, bool(ext))
    return respond(request, "step.html", pages.step_page(session, unquote(run_id), n, json=json), json=json)


@router.get("/runs/{run_id:path}/task-changes")
@router.get("/runs/{run_id:path}/task-changes.json")
@router.get("/runs/{run_id:path}/task-changes.csv")
def task_changes(request: Request, session: SessionDep, run_id: str, a: Annotated[Count, Query()],
                 b: Annotated[Count, Query()]):
    """Tasks whose ending counts or mean reward changed between steps `a` and `b`, largest change
    first; each links to both steps' rollouts of the task. `.csv` downloads the table. A step the
    run does not have is a 404 naming `a` or `b` (as `/steps/{step}` is)."""
    rid = unquote(run_id)
    if pages._run(session, rid) is not None:
        for field, n in (("a", a), ("b", b)):
            if one_step(session=session, run_id=rid, step=n) is None:
                raise ApiError(404, f"no step {n} in run {rid!r}", field=field)
    csv_ = request.url.path.endswith(".csv")
    json = not csv_ and wants_json(request, request.url.path.endswith(".json"))
    data = pages.task_changes(session, rid, a, b, json=json)
    if data is not None and csv_:
        rows = [{"task": t["task"], "rollouts_a": t["rollouts"][0], "rollouts_b": t["rollouts"][1],
                 "mean_reward_a": t["mean_reward"][0], "mean_reward_b": t["mean_reward"][1], "delta": t["delta"],
                 "endings_changed": "; ".join(f"{e} {x}→{y}" for e, (x, y) in t["endings"].items()),
                 "url_a": t["url_a"], "url_b": t["url_b"]} for t in data["tasks"]]
        return csv_response(rows, list(rows[0]) if rows else ["task"], f"{data['run']['id']}-tasks-{a}-{b}.csv")
    return respond(request, "task_changes.html", data, json=json)


@router.get("/runs/{run_id:path}/messages/{rollout_pk}/{idx}")
def message(session: SessionDep, run_id: str, rollout_pk: Annotated[int, Path(ge=0, le=INT32_MAX)],
            idx: Annotated[int, Path(ge=0, le=INT32_MAX)]):
    """The deep link to one message: redirects to its rollout page, on the branch and page that
    hold it, at its anchor (`#node-N`). Search hits link here."""
    url = pages.message_url(session, unquote(run_id), rollout_pk, idx)
    if url is None:
        raise HTTPException(404, "not found")
    return RedirectResponse(url, status_code=307)
