"""The runs list and a run's page (per-step rollups and the two charts)."""
from __future__ import annotations

from typing import Any

from sqlmodel import Session

from app import charts, urls
from app.queries import runs as q_runs
from app.queries.common import ENDINGS
from app.views.common import PageModel, iso


class RunRow(PageModel):
    """A run in the runs list. Means: errors scored 0, and errored rollouts dropped."""

    id: str
    name: str | None
    type: str
    rollouts: int
    first_step: int | None
    last_step: int | None
    steps: int
    mean_reward: float | None
    mean_reward_no_errors: float | None
    endings: dict[str, int]
    tokenizer: str | None
    created_at: str | None
    url: str


class RunsPage(PageModel):
    runs: list[RunRow]
    endings: list[str]


def runs_page(session: Session) -> RunsPage:
    """Every run with its counts, step range, mean rewards and ending counts."""
    rows = [RunRow(**(r | {"created_at": iso(r["created_at"])}), url=urls.run(r["id"]))
            for r in q_runs.list_runs(session=session)]
    return RunsPage(runs=rows, endings=ENDINGS)


class RunHeader(PageModel):
    id: str
    name: str | None
    type: str
    tokenizer: str | None
    url: str
    rollouts_url: str


class StepView(PageModel):
    """One training step: counts and rates per ending, mean rewards, and its rollouts' URL."""

    step: int | None
    rollouts: int
    endings: dict[str, int]
    mean_reward: float | None
    mean_reward_no_errors: float | None
    scored: int
    excluded: int
    rates: dict[str, float]
    url: str


class RunTotals(PageModel):
    rollouts: int
    endings: dict[str, int]
    mean_reward: float | None
    mean_reward_no_errors: float | None
    excluded: int
    retries: int


class RunCharts(PageModel):
    """Plotly figure data (`{"data", "layout"}`), drawn by static/app.js."""

    ending_rates: dict[str, Any]
    reward: dict[str, Any]


class RunPage(PageModel):
    run: RunHeader
    endings: list[str]
    steps: list[StepView]
    steps_recorded: bool
    totals: RunTotals
    charts: RunCharts | None


def run_page(session: Session, run_id: str) -> RunPage | None:
    """A run: per training step, counts per ending and both means; None if there is no such run."""
    run = q_runs.get_run(session=session, run_id=run_id)
    if run is None:
        return None
    steps = q_runs.run_steps(session=session, run_id=run_id)
    step_rows = [StepView(**s.__dict__, rates=s.rates(), url=urls.rollouts(run_id, step=s.step)) for s in steps]
    means = q_runs.reward_means(session=session, run_ids=[run_id]).get(run_id, {})
    # Without a training step (Tunix files, tau-bench) a per-step chart has no axis to draw on.
    steps_recorded = any(s.step is not None for s in steps)
    return RunPage(
        run=RunHeader(id=run.id, name=run.name, type=run.type, tokenizer=run.tokenizer_sha256,
                      url=urls.run(run.id), rollouts_url=urls.rollouts(run.id)),
        endings=ENDINGS,
        steps=step_rows,
        steps_recorded=steps_recorded,
        totals=RunTotals(rollouts=sum(s.rollouts for s in steps),
                         endings={e: sum(s.endings.get(e, 0) for s in steps) for e in ENDINGS},
                         mean_reward=means.get("mean_reward"),
                         mean_reward_no_errors=means.get("mean_reward_no_errors"),
                         excluded=means.get("excluded", 0),
                         retries=q_runs.count_retries(session=session, run_id=run_id)),
        charts=RunCharts(ending_rates=charts.ending_rates(run_id, steps), reward=charts.reward_trend(run_id, steps))
        if steps_recorded else None,
    )
