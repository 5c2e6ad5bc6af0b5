"""Live pages: server-sent "changed" events and the fragments a page fetches on one.

`GET /runs/{run}/events[?since=VERSION]` and `GET /ingest/events` are `text/event-stream`
(WHATWG HTML, "Server-sent events"): an event per change of the run (`event: run`, `id:` the
run's version) or of the ingest status (`event: ingest`), `data:` one JSON object saying what
changed; an SSE comment (`: ping`) every `ROLLSCOPE_WEB__LIVE_HEARTBEAT_SECONDS` while idle. A
client that reconnects with `Last-Event-ID` (or `since=`) older than the run's version gets one
catch-up event at once. The changes come from app.live's watchers: one database read per watched
run per `ROLLSCOPE_WEB__LIVE_POLL_SECONDS` per process, whatever the number of pages listening.

On an event a page asks for what it shows, once: `/runs/{run}/live/run` (the run page's fragments
and the figures of the charts the event named), `/runs/{run}/live/rollouts` (the list's match
count; `rows=1` also its rows, total, pager and facets), `/runs/{run}/live/steps/{step}`, `/ingest/live`. Each answers
`{"version", "fragments": {element id: HTML}, "figures": {chart id: Plotly figure}}` (HTML from
the same autoescaped templates as the pages). Reading them needs what every page needs (the read
token when reading is locked: app.auth.ReadTokenGate). Shapes: docs/views.md, "Live updates".
"""
from __future__ import annotations

import gzip
from typing import Annotated
from urllib.parse import unquote

import orjson
from anyio import to_thread
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response
from jinja2_fragments import render_block
from sse_starlette import EventSourceResponse, ServerSentEvent

from app import charts
from app.deps import RefuseUnknownQuery, SessionDep
from app.errors import ApiError
from app.live import Hub, catch_up, run_state
from app.params import SORT_PATTERN, Filters, OptLimit, OptSmooth, OptStr, check_rollout_filters, step_range
from app.queries import rollout_facets
from app.queries import runs as q_runs
from app.render import templates
from app.views import chart as chart_view
from app.views import step as step_view
from app.views.ingest_status import ingest_status
from app.views.rollouts import rollouts_page
from app.views.runs import run_page
from ingest.fields import INT32_MAX

router = APIRouter(tags=["live"], dependencies=[RefuseUnknownQuery])
RETRY_MS = 3000  # the browser's wait before it reconnects a dropped stream (SSE `retry:`)
# the run page's fragments: element id → the include that renders it (each is one element with that id)
RUN_FRAGMENTS = {"run-head": "_run_head.html", "run-banner": "_run_banner.html", "run-alerts": "_run_alerts.html",
                 "run-metadata": "_run_meta.html", "run-steps": "_run_steps.html", "run-checks": "_run_checks.html",
                 "run-notes": "_run_notes.html"}
HEADLINE = {"endings": "ending_rates", "findings": "findings"}  # charts the run page embeds (app.views.runs)


def hub(request: Request) -> Hub:
    """This process's watchers (made on first use, with the settings' poll interval)."""
    state = request.app.state
    if getattr(state, "live", None) is None:
        state.live = Hub(state.engine, state.settings.web.live_poll_seconds)
    return state.live


def _event(ev: dict) -> ServerSentEvent:
    return ServerSentEvent(data=orjson.dumps(ev).decode(), event=ev["event"], id=ev.get("version"))


def _json(request: Request, body: dict) -> Response:
    """`body` as JSON, gzip-compressed when the client accepts it and it is over 2 KB (a run page's
    fragments, ~30 KB of table markup, travel as ~3 KB: a viewer's cost per change)."""
    raw = orjson.dumps(body)
    headers = {"Cache-Control": "no-store", "Vary": "Accept-Encoding"}
    if len(raw) > 2048 and "gzip" in request.headers.get("accept-encoding", ""):
        raw, headers["Content-Encoding"] = gzip.compress(raw, 5), "gzip"
    return Response(raw, media_type="application/json", headers=headers)


async def _stream(request: Request, key: tuple, first: dict | None, seen=None):
    async with hub(request).subscribe(key, seen) as queue:
        yield ServerSentEvent(comment="listening", retry=RETRY_MS)
        if first is not None:
            yield _event(first)
        while True:
            ev = await queue.get()
            yield _event(ev)
            if ev["event"] == "gone":
                return


def _respond_stream(request: Request, key: tuple, first: dict | None, seen=None) -> Response:
    if request.scope.get("rollscope.head"):  # a HEAD (app.main.HeadAsGet): the headers, no endless body
        return Response(b"", media_type="text/event-stream", headers={"Cache-Control": "no-store"})
    return EventSourceResponse(_stream(request, key, first, seen), headers={"Cache-Control": "no-store"},
                               ping=request.app.state.settings.web.live_heartbeat_seconds)


@router.get("/runs/{run_id:path}/events")
async def run_events(request: Request, run_id: str,
                     since: Annotated[str | None, Query(max_length=100)] = None):
    """`text/event-stream` of the run's changes. Each `event: run` has `id:` the run's version
    (the run page's `version`) and `data:` `{"event": "run", "run", "version", "rollouts" (all
    attempts), "steps" (training steps), "new_steps", "changed_steps" (step numbers, null for
    rollouts without a step), "charts" (ids of the registered charts whose data changed),
    "receiving" (a rollout arrived in the last two minutes)}`; `event: gone` when the run is
    deleted (the stream ends). `since=` (or `Last-Event-ID`) older than the run's version: one
    catch-up event first, naming every chart. 404 for an unknown run."""
    rid = unquote(run_id)
    state = await to_thread.run_sync(run_state, request.app.state.engine, rid)
    if state is None:
        raise ApiError(404, f"no run {rid!r}")
    since = request.headers.get("last-event-id") or since  # a reconnect names the last event it had
    first = catch_up(rid, state) if since is not None and since != state.version else None
    return _respond_stream(request, ("run", rid), first, seen=state)


@router.get("/ingest/events", include_in_schema=False)
async def ingest_events(request: Request):
    """`text/event-stream` of the ingest status's changes: `event: ingest`, `data:`
    `{"event": "ingest", "version"}` whenever a spool file's row, the newest rollout or the
    quarantine changes (app.live.ingest_state); the `/ingest` page then fetches `/ingest/live`."""
    return _respond_stream(request, ("ingest",), None)


def _render(template: str, data) -> str:
    return templates.env.get_template(template).render(d=data, urls=templates.env.globals["urls"])


@router.get("/runs/{run_id:path}/live/run")
def live_run(request: Request, session: SessionDep, run_id: str, steps: OptStr = None, smooth: OptSmooth = None,
             charts_: Annotated[str | None, Query(alias="charts", max_length=2000)] = None,
             fragments: Annotated[int | None, Query(ge=0, le=1)] = None):
    """The run page's fragments (`fragments`: element id → HTML: header, ingest banner, metadata,
    steps table, checks table, notes) and, for each chart named in `charts=a,b` (ids of
    app.charts.REGISTRY), its figure under the page's `steps=` and `smooth=` (`figures`);
    `fragments=0`: the figures alone (charts that scrolled into view after they changed). 404 for
    an unknown run; an unknown chart id is left out."""
    rid = unquote(run_id)
    rng = step_range(steps)
    data = run_page(session, rid, steps_range=rng, window=smooth or 1)
    if data is None:
        raise ApiError(404, "not found")
    figures = {}
    for cid in dict.fromkeys((charts_ or "").split(",")):
        if cid in HEADLINE and data.charts is not None:
            figures[cid] = getattr(data.charts, HEADLINE[cid])
        elif cid in charts.REGISTRY:
            page = chart_view.chart_page(session, rid, cid, steps=rng, window=smooth or 1)
            if page is not None:
                figures[cid] = page.figure
    parts = {} if fragments == 0 else {k: _render(t, data) for k, t in RUN_FRAGMENTS.items()}
    return _json(request, {"version": data.version, "fragments": parts, "figures": figures})


@router.get("/runs/{run_id:path}/live/rollouts")
def live_rollouts(request: Request, session: SessionDep, run_id: str, filters: Filters,
                  sort: Annotated[str | None, Query(pattern=SORT_PATTERN)] = None,
                  after: OptStr = None, before: OptStr = None, limit: OptLimit = None,
                  rows: Annotated[int | None, Query(ge=1, le=1)] = None):
    """How many rollouts match the list's filters now (`total`, `total_capped` as the list's),
    and with `rows=1` the list's fragments for the same query (`fragments`: the total line, the
    rows, the pager, the facets). Takes every parameter the list takes. 404 for an unknown run."""
    rid = unquote(run_id)
    check_rollout_filters(session, rid, filters)
    if q_runs.get_run(session=session, run_id=rid) is None:
        raise ApiError(404, "not found")
    if rows is None:
        total, capped = rollout_facets.count(session=session, run_id=rid, filters=filters)
        return _json(request, {"total": total, "total_capped": capped})
    data = rollouts_page(session, rid, filters, sort=sort, after=after, before=before,
                         limit=limit or request.app.state.settings.web.page_size, keep_limit=limit)
    ctx = {"d": data, "urls": templates.env.globals["urls"]}
    fragments = {name: render_block(templates.env, "rollouts.html", block, **ctx)
                 for name, block in (("total", "total"), ("rows", "rows_body"), ("pager", "pager"),
                                             ("facets", "facets"))}
    return _json(request, {"total": data.total, "total_capped": data.total_capped, "fragments": fragments})


@router.get("/runs/{run_id:path}/live/steps/{step}")
def live_step(request: Request, session: SessionDep, run_id: str, step: Annotated[int, Path(ge=0, le=INT32_MAX)]):
    """The step page's body (`fragments["step-live"]`), for a page of the step in progress. 404
    for an unknown run or step."""
    data = step_view.step_page(session, unquote(run_id), step)
    if data is None:
        raise ApiError(404, "not found")
    return _json(request, {"fragments": {"step-live": _render("_step_body.html", data)}})


@router.get("/ingest/live", include_in_schema=False)
def live_ingest(request: Request):
    """The `/ingest` page's status block (`fragments["ingest-status"]`)."""
    data = ingest_status(request.app.state.engine)
    return _json(request, {"fragments": {"ingest-status": render_block(templates.env, "ingest.html", "status", d=data,
                                                              urls=templates.env.globals["urls"])}})
