"""Runs: the list, one run with its totals, its training steps with their rollups, its metrics
as columns, and deleting a run (admin)."""
from __future__ import annotations

from typing import Annotated
from urllib.parse import unquote

from fastapi import APIRouter, Path, Response

from app.api.v1.schemas import Items
from app.deps import AdminToken, SessionDep, WriteDep
from app.errors import BUSY, ApiError
from app.queries import runs as q_runs
from app.views.common import PageModel
from app.views.runs import RunHeader, RunRow, RunTotals, StepView, run_summary, runs_page

router = APIRouter(tags=["runs"])
RunId = Annotated[str, Path(description="run id (`/` encoded as `%2F`)")]


class RunDetail(PageModel):
    run: RunHeader
    endings: list[str]
    totals: RunTotals


class RunMetrics(PageModel):
    """Per-step series as columns (one entry per step, in step order; `null` step last): the
    rollouts, both mean rewards, and the rate of each ending."""

    run: str
    step: list[int | None]
    rollouts: list[int]
    mean_reward: list[float | None]
    mean_reward_no_errors: list[float | None]
    excluded: list[int]
    rates: dict[str, list[float]]
    totals: RunTotals


def _page(session, run_id: str):
    page = run_summary(session, unquote(run_id), json=True)
    if page is None:
        raise ApiError(404, f"no run {unquote(run_id)!r}", field="run")
    return page


@router.get("/runs", response_model=Items[RunRow])
def list_runs(session: SessionDep):
    """Every run: rollouts, steps, mean reward (errors scored 0 / dropped), ending counts."""
    return Items[RunRow](items=runs_page(session, json=True).runs)


@router.get("/runs/{run}", response_model=RunDetail)
def get_run(session: SessionDep, run: RunId):
    """One run with its totals over every step."""
    page = _page(session, run)
    return RunDetail(run=page.run, endings=page.endings, totals=page.totals)


@router.get("/runs/{run}/steps", response_model=Items[StepView])
def get_steps(session: SessionDep, run: RunId):
    """The run's training steps with their rollups: counts and rates per ending, mean reward with
    errored rollouts scored 0 and dropped, and the rollouts excluded for a missing reward."""
    return Items[StepView](items=_page(session, run).steps)


@router.get("/runs/{run}/metrics", response_model=RunMetrics)
def get_metrics(session: SessionDep, run: RunId):
    """The run's per-step metrics as columns, ready to plot."""
    page = _page(session, run)
    s = page.steps
    return RunMetrics(run=page.run.id, step=[x.step for x in s], rollouts=[x.rollouts for x in s],
                      mean_reward=[x.mean_reward for x in s],
                      mean_reward_no_errors=[x.mean_reward_no_errors for x in s],
                      excluded=[x.excluded for x in s],
                      rates={e: [x.rates.get(e, 0.0) for x in s] for e in page.endings},
                      totals=page.totals)


@router.delete("/runs/{run}", status_code=204, response_class=Response, responses=BUSY)
def delete_run(write: WriteDep, token: AdminToken, run: RunId):
    """Delete a run with all its rollouts, nodes, findings, labels and notes. Needs an `admin`
    token. 404 if there is no such run; 503 with `Retry-After` when other writes hold the
    database longer than `ROLLSCOPE_DB__WRITE_TIMEOUT_SECONDS`."""
    run_id = unquote(run)

    def work(session):
        # the run's row locked first: a label, note or ingest of this run waits for the delete, or
        # the delete for it, so none is left behind without its run
        if not q_runs.hold_run(session=session, run_id=run_id, exclusive=True):
            raise ApiError(404, f"no run {run_id!r}", field="run")
        q_runs.delete_run(session=session, run_id=run_id)

    write(work)
    return Response(status_code=204)
