"""Paired comparison of two runs by task: the `paired` section of `/compare?runs=A,B` (and of
`compare.json`), and one task's rollouts of both runs side by side (`/compare/task?runs=A,B&task=T`).
The statistics are app/paired_stats.py's (formula and sources there); the rewards are
app/queries/paired.py's (errors scored 0, as compare's task table).
"""
from __future__ import annotations

import numpy as np
from sqlmodel import Session

from app import paired_stats, urls
from app.queries import paired as q_paired
from app.queries import runs as q_runs
from app.queries.steps import StepRange
from app.views.chart import RunRef
from app.views.common import PageModel

PAIRED_LIMIT = 200  # tasks listed per page of the paired section; `paired_offset` pages on
REWARD = "mean reward, errors scored 0 (as the run page and compare's task table); rollouts without a reward left out"
METHOD = ("per task, B − A with a 95 % percentile interval of the stratified bootstrap (each run's rollouts "
          "of the task resampled on their own; exact for pass/fail rewards); sign test across tasks, "
          "exact two-sided binomial p")


class PairedTask(PageModel):
    """One task: `n_a`/`n_b` rollouts scored in each run, `mean_a`/`mean_b`, `diff` = mean_b −
    mean_a, its 95 % interval `ci_low`..`ci_high` (None when a run has fewer than 2 scored
    rollouts of it: `note` says so), `verdict` (regressed / improved / unclear), `url` (both
    runs' rollouts of the task side by side) and `urls` (each run's rollouts list of the task)."""

    task: str
    n_a: int
    n_b: int
    mean_a: float | None
    mean_b: float | None
    diff: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str
    note: str | None
    url: str
    urls: list[str]


class SignTestOut(PageModel):
    """Tasks with diff > 0 (`n_plus`), < 0 (`n_minus`), = 0 (`ties`, left out), exact two-sided
    `p` (None when no task differs)."""

    n_plus: int
    n_minus: int
    ties: int
    p: float | None


class PairedSection(PageModel):
    """Run A = `runs[0]`, B = `runs[1]`. `tasks`: regressed and improved first (largest |diff|
    first), then unclear; `PAIRED_LIMIT` per page from `offset`, `tasks_total` in all,
    `next_url` the next page (None on the last). `verdicts`: tasks per verdict over all tasks.
    `resamples`: bootstrap replicates per task on the sampled path (pass/fail tasks are exact).
    `reward` and `method` say what was compared and how."""

    runs: list[str]
    reward: str
    method: str
    level: float
    resamples: int
    seed: int
    sign_test: SignTestOut
    verdicts: dict[str, int]
    tasks: list[PairedTask]
    tasks_total: int
    offset: int
    limit: int
    next_url: str | None


def _order(t: paired_stats.TaskDiff, key: str) -> tuple:
    return (t.verdict == "unclear", t.ci_low is None, t.diff is None, -abs(t.diff or 0.0), key)


def paired_section(session: Session, run_a: str, run_b: str, *, steps: StepRange = StepRange(), offset: int = 0,
                   json: bool = False) -> PairedSection:
    """The paired comparison of B = `run_b` against A = `run_a` over the step range (both runs
    exist: the caller checked). Links go to JSON twins when `json`."""
    ra = q_paired.task_rewards(session=session, run_id=run_a, steps=steps)
    rb = q_paired.task_rewards(session=session, run_id=run_b, steps=steps)
    keys = sorted(set(ra) | set(rb))
    empty = np.empty(0)
    diffs, resamples = paired_stats.paired_differences(keys, [ra.get(k, empty) for k in keys],
                                                       [rb.get(k, empty) for k in keys])
    sign = paired_stats.sign_test_of(diffs)
    order = sorted(range(len(keys)), key=lambda i: _order(diffs[i], keys[i]))
    page = order[offset:offset + PAIRED_LIMIT]
    rng = str(steps) or None
    tasks = [PairedTask(task=keys[i], **vars(diffs[i]),
                        url=task_url([run_a, run_b], keys[i], json=json, steps=rng),
                        urls=[urls.rollouts(r, json=json, task=keys[i], steps=rng) for r in (run_a, run_b)])
             for i in page]
    more = offset + PAIRED_LIMIT < len(keys)
    return PairedSection(
        runs=[run_a, run_b], reward=REWARD, method=METHOD, level=paired_stats.LEVEL, resamples=resamples,
        seed=paired_stats.SEED, sign_test=SignTestOut(**vars(sign)),
        verdicts={v: sum(d.verdict == v for d in diffs) for v in paired_stats.VERDICTS},
        tasks=tasks, tasks_total=len(keys), offset=offset, limit=PAIRED_LIMIT,
        next_url=(urls.compare([run_a, run_b], json=json, steps=rng, paired_offset=offset + PAIRED_LIMIT)
                  if more else None))


def task_url(run_ids: list[str], task: str, *, json: bool = False, **params) -> str:
    """Both runs' rollouts of one task side by side."""
    return urls.compare_task(run_ids, task, json=json, **params)


class TaskRollout(PageModel):
    """One rollout of the task: its id, attempt, step, ending (with the source's detail), reward
    (None when missing or non-finite: `reward_status` says which) and its page."""

    rollout_id: str
    attempt: int
    step: int | None
    ending: str
    ending_detail: str | None
    reward: float | None
    reward_status: str
    url: str


class TaskSide(PageModel):
    """One run's column: the run, its rollouts of the task (the first `LIMIT`), how many in all."""

    run: RunRef
    rollouts: list[TaskRollout]
    total: int
    rollouts_url: str


class TaskPairPage(PageModel):
    """`/compare/task?runs=A,B&task=T`: `sides` = [A, B]; `paired` the task's diff, interval and
    verdict as on the compare page; `compare_url` back to the comparison."""

    task: str
    steps: str
    sides: list[TaskSide]
    paired: PairedTask
    limit: int
    compare_url: str


def task_pair_page(session: Session, run_a: str, run_b: str, task: str, *, steps: StepRange = StepRange(),
                   json: bool = False) -> TaskPairPage:
    """Both runs' rollouts of `task` in two columns, with the task's paired difference (both runs
    exist: the caller checked; a task neither run has gives empty columns and no diff)."""
    rng = str(steps) or None
    sides = []
    for rid in (run_a, run_b):
        run = q_runs.get_run(session=session, run_id=rid)
        rows, total = q_paired.task_rollouts(session=session, run_id=rid, task=task, steps=steps)
        sides.append(TaskSide(
            run=RunRef(id=run.id, name=run.name, url=urls.run(run.id, json=json)),
            rollouts=[TaskRollout(rollout_id=r.rollout_id, attempt=r.attempt, step=r.step, ending=r.ending,
                                  ending_detail=r.ending_detail, reward=r.reward, reward_status=r.reward_status,
                                  url=urls.rollout(rid, r.rollout_id, json=json, attempt=r.attempt or None))
                      for r in rows],
            total=total, rollouts_url=urls.rollouts(rid, json=json, task=task, steps=rng)))
    ra, rb = (q_paired.task_rewards(session=session, run_id=r, steps=steps, task=task).get(task, np.empty(0))
              for r in (run_a, run_b))
    (d,), _ = paired_stats.paired_differences([task], [ra], [rb])
    return TaskPairPage(
        task=task, steps=str(steps), sides=sides, limit=q_paired.TASK_ROLLOUTS_LIMIT,
        paired=PairedTask(task=task, **vars(d), url=task_url([run_a, run_b], task, json=json, steps=rng),
                          urls=[s.rollouts_url for s in sides]),
        compare_url=urls.compare([run_a, run_b], json=json, steps=rng))
