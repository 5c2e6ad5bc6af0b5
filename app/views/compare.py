"""Compare runs (`/compare?runs=a,b&steps=&smooth=`): every comparable chart overlaid on one step
axis, and the differences per ending and per task over the step range, from the rollups."""
from __future__ import annotations

from typing import Any

from sqlmodel import Session

from app import charts, urls
from app.queries import runs as q_runs
from app.queries.steps import StepRange, run_totals, step_stats, task_totals
from app.views.common import PageModel
from app.views.paired import PairedSection, paired_section
from ingest.stats import ENDINGS


class CompareRun(PageModel):
    id: str
    name: str | None
    url: str
    rollouts: int
    mean_reward: float | None
    mean_reward_no_errors: float | None
    first_step: int | None
    last_step: int | None


class ComparePage(PageModel):
    """`charts`: per comparable chart id, its title, caption and overlaid figure's `json_url` /
    `csv_url`; `endings`: per ending the counts and shares per run (in `runs` order) and `delta`
    (last − first run); `tasks`: per task the rollouts, mean reward (errors scored 0) and errors
    per run and `delta`, largest change first (the first 200 of `tasks_total`); `paired`: the
    paired comparison by task of two runs (app/views/paired.py `PairedSection`), None with
    `paired_note` saying why when more than two runs are compared."""

    runs: list[CompareRun]
    steps: str
    smooth: int
    charts: dict[str, dict[str, Any]]
    endings: list[dict[str, Any]]
    tasks: list[dict[str, Any]]
    tasks_total: int
    paired: PairedSection | None
    paired_note: str | None


def compare_page(session: Session, run_ids: list[str], *, steps: StepRange, window: int,
                 json: bool = False, paired_offset: int = 0) -> ComparePage | None:
    """Two or more runs on one step axis: every comparable chart overlaid, and the differences per
    ending (share of rollouts) and per task (mean reward, errors scored 0) over the step range.
    With exactly two runs, the paired comparison by task (`paired`, its page from `paired_offset`).
    `json`: run and rollouts links go to JSON twins (charts' `json_url`/`csv_url` are data already)."""
    runs = [q_runs.get_run(session=session, run_id=r) for r in run_ids]
    missing = [r for r, got in zip(run_ids, runs) if got is None]
    if missing:
        return None
    # the totals compare shows: rollouts, endings, mean rewards (exact, from each step's partial
    # sums); without a step range, rollouts without a step count too, as on the run page and in
    # the task table
    whole = steps.first is None and steps.last is None
    stats = {r: step_stats(session=session, run_id=r, steps=steps, include_unstepped=whole,
                           sections=("endings", "reward")) for r in run_ids}
    figures = {c.id: {"title": c.title, "caption": c.caption,
                      **{f"{ext}_url": urls.compare_chart(c.id, run_ids, f".{ext}", steps=str(steps), smooth=window)
                         for ext in ("json", "csv")}}
               for c in charts.REGISTRY.values() if c.comparable}
    totals = {r: run_totals(stats[r]) for r in run_ids}
    ending_rows = []
    for e in ENDINGS:
        shares = [(totals[r]["endings"][e] / totals[r]["rollouts"]) if totals[r]["rollouts"] else None for r in run_ids]
        if any(totals[r]["endings"][e] for r in run_ids):
            ending_rows.append({"ending": e, "counts": [totals[r]["endings"][e] for r in run_ids], "shares": shares,
                                "delta": (shares[-1] - shares[0]) if None not in (shares[0], shares[-1]) else None})
    tt = task_totals(session=session, run_ids=run_ids, steps=steps)
    task_rows_ = []
    for key in sorted(set().union(*(tt[r].keys() for r in run_ids))):
        means = [tt[r].get(key, {}).get("mean_reward") for r in run_ids]
        errs = [tt[r].get(key, {}).get("errors", 0) for r in run_ids]
        task_rows_.append({"task": key, "rollouts": [tt[r].get(key, {}).get("rollouts", 0) for r in run_ids],
                           "mean_reward": means, "errors": errs,
                           "delta": (means[-1] - means[0]) if None not in (means[0], means[-1]) else None,
                           "urls": [urls.rollouts(r, json=json, task=key) for r in run_ids]})
    task_rows_.sort(key=lambda t: (-abs(t["delta"] or 0.0), t["task"]))
    return ComparePage(
        runs=[CompareRun(id=r.id, name=r.name, url=urls.run(r.id, json=json), rollouts=totals[r.id]["rollouts"],
                         mean_reward=totals[r.id]["mean_reward"],
                         mean_reward_no_errors=totals[r.id]["mean_reward_no_errors"],
                         first_step=totals[r.id]["first_step"], last_step=totals[r.id]["last_step"]) for r in runs],
        steps=str(steps), smooth=window,
        charts=figures,
        endings=ending_rows,
        tasks=task_rows_[:200], tasks_total=len(task_rows_),
        paired=(paired_section(session, run_ids[0], run_ids[1], steps=steps, offset=paired_offset, json=json,
                               smooth=window) if len(run_ids) == 2 else None),
        paired_note=(None if len(run_ids) == 2 else
                     f"The paired comparison by task needs exactly two runs; {len(run_ids)} are compared."),
    )


def compare_figure(session: Session, run_ids: list[str], chart: charts.Chart, *, steps: StepRange,
                   window: int) -> dict | None:
    """One chart with every run overlaid on the same step axis (`run: series` traces)."""
    if any(q_runs.get_run(session=session, run_id=r) is None for r in run_ids) or not chart.comparable:
        return None
    return charts.overlay({r: charts.figure(chart, r, step_stats(session=session, run_id=r, steps=steps,
                                                                 sections=chart.sections), None,
                                            window=window) for r in run_ids})
