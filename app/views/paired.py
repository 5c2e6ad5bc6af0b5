"""Paired comparison of two runs by task: the `paired` section of `/compare?runs=A,B` (and of
`compare.json`), and one task's rollouts of both runs side by side (`/compare/task?runs=A,B&task=T`).
The statistics are app/paired_stats.py's (formula and sources there); the rewards are
app/queries/paired.py's (errors scored 0, as compare's task table).

What is read: every task's count, mean and moments from the rollups (`task_summaries`, one row
per task); every reward only of the small tasks (neither run has more than `EXACT_MAX` scored
rollouts of it), smallest first, at most `READ_CAP` rewards per comparison (`read_plan`). Those
get the bootstrap from every reward (method "bootstrap"); the others its approximation from the
moments (method "moments", app/paired_stats.py `moments_difference`). So a page costs the same
at 200,000 rollouts a run as at 2,000 (it read 400,000 rewards and drew 200 million: 11-23 s).
"""
from __future__ import annotations

import numpy as np
from sqlmodel import Session

from app import paired_stats, urls
from app.queries import paired as q_paired
from app.queries import runs as q_runs
from app.queries.paired import TaskSummary
from app.queries.steps import StepRange
from app.views.chart import RunRef
from app.views.common import PageModel

PAIRED_LIMIT = 200  # tasks listed per page of the paired section; `paired_offset` pages on
EXACT_MAX = 100  # scored rollouts of a task per run up to which its rewards are read (the bootstrap on every one)
READ_CAP = 2_000  # rewards read per comparison, both runs: at most 4 M bootstrap draws (~0.15 s of CPU here)
REWARD = "mean reward, errors scored 0 (as the run page and compare's task table); rollouts without a reward left out"
METHOD = ("per task, B − A with a 95 % percentile interval of the stratified bootstrap (each run's rollouts "
          "of the task resampled on their own; exact for pass/fail rewards; for tasks with more than "
          f"{EXACT_MAX} scored rollouts in a run, or past {READ_CAP:,} rewards read, its approximation from the "
          "rollups' moments, Cornish-Fisher); sign test across tasks, exact two-sided binomial p")
NO_REWARD = "no scored reward in run {}"
NO_REWARD_EITHER = "no scored reward in either run"


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
    verdict: str | None
    note: str | None
    method: str | None
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
    first), then unclear, then the tasks not compared (no verdict; `note` says why);
    `PAIRED_LIMIT` per page from `offset`, `tasks_total` in all, `next_url` the next page (None
    on the last). `shared_tasks`: tasks both runs have scored rollouts of (the ones compared);
    `only_a` / `only_b`: tasks only one run has rollouts of. `verdicts`: tasks per verdict over
    the compared tasks; the sign test is over them too.
    `resamples`: bootstrap replicates per task on the sampled path (pass/fail tasks are exact).
    `reward` and `method` say what was compared and how. The bound: `rewards_read` rewards were
    read (at most `read_cap`), of the tasks with at most `exact_max` scored rollouts in each run;
    `from_moments` compared tasks had their interval from the rollups' moments instead."""

    runs: list[str]
    reward: str
    method: str
    level: float
    resamples: int
    seed: int
    exact_max: int
    read_cap: int
    rewards_read: int
    from_moments: int
    sign_test: SignTestOut
    verdicts: dict[str, int]
    shared_tasks: int
    only_a: int
    only_b: int
    tasks: list[PairedTask]
    tasks_total: int
    offset: int
    limit: int
    next_url: str | None


def _order(t: paired_stats.TaskDiff, key: str) -> tuple:
    return (t.verdict == "unclear", t.ci_low is None, t.diff is None, -abs(t.diff or 0.0), key)


def uncompared(key: str, sa: dict[str, TaskSummary], sb: dict[str, TaskSummary]) -> paired_stats.TaskDiff | None:
    """The task's entry when it cannot be compared: in one run only ("not in run A" / "not in run
    B") or in both without a scored reward in one (`NO_REWARD`): no diff, no interval, no verdict.
    None when both runs have scored rollouts of it."""
    ta, tb = sa.get(key), sb.get(key)
    a, b = (t.scored if t is not None else None for t in (ta, tb))
    if a is not None and b is not None:
        return None
    if ta is None and tb is None:
        note = "in neither run"
    elif ta is None or tb is None:
        note = "not in run A" if ta is None else "not in run B"
    else:
        note = NO_REWARD.format("A" if a is None else "B") if (a is None) != (b is None) else NO_REWARD_EITHER
    return paired_stats.TaskDiff(0 if a is None else a.n, 0 if b is None else b.n, a and a.mean, b and b.mean,
                                 None, None, None, None, note, None)


def read_plan(shared: list[str], sa: dict[str, TaskSummary], sb: dict[str, TaskSummary]) -> list[str]:
    """The shared tasks compared from every reward: those with at most `EXACT_MAX` scored
    rollouts in each run (or without sums in the rollups: rewards past ~1e96), smallest first
    (then by key) while the rewards read stay within `READ_CAP`. The same tasks whichever page
    asks (compare, or one task side by side), so both show the same interval."""
    small = sorted((sa[k].scored.n + sb[k].scored.n, k) for k in shared
                   if max(sa[k].scored.n, sb[k].scored.n) <= EXACT_MAX
                   or sa[k].scored.sum_sq is None or sb[k].scored.sum_sq is None)
    chosen, total = [], 0
    for size, k in small:
        if total + size > READ_CAP:
            break
        chosen.append(k)
        total += size
    return sorted(chosen)


def compared(session: Session, run_a: str, run_b: str, shared: list[str], sa: dict[str, TaskSummary],
             sb: dict[str, TaskSummary], *, steps: StepRange) -> tuple[dict[str, paired_stats.TaskDiff], int, int]:
    """The shared tasks' diffs ({task: TaskDiff}), replicates drawn per sampled task, and the
    rewards read: the `read_plan` tasks from every reward, the others from their moments."""
    read = read_plan(shared, sa, sb)
    ra = q_paired.task_rewards(session=session, run_id=run_a, steps=steps, tasks=read) if read else {}
    rb = q_paired.task_rewards(session=session, run_id=run_b, steps=steps, tasks=read) if read else {}
    empty = np.empty(0)
    diffs, resamples = paired_stats.paired_differences(read, [ra.get(k, empty) for k in read],
                                                       [rb.get(k, empty) for k in read])
    out = dict(zip(read, diffs))
    for k in shared:
        if k not in out:
            out[k] = paired_stats.moments_difference(sa[k].scored, sb[k].scored)
    return out, resamples, sum(x.size for x in (*ra.values(), *rb.values()))


def paired_section(session: Session, run_a: str, run_b: str, *, steps: StepRange = StepRange(), offset: int = 0,
                   json: bool = False, smooth: int | None = None) -> PairedSection:
    """The paired comparison of B = `run_b` against A = `run_a` over the step range (both runs
    exist: the caller checked). Only tasks both runs have scored rollouts of are compared
    (`shared_tasks`); the others follow them, with a `note` and no verdict. Links go to JSON
    twins when `json`."""
    sa = q_paired.task_summaries(session=session, run_id=run_a, steps=steps)
    sb = q_paired.task_summaries(session=session, run_id=run_b, steps=steps)
    shared = sorted(k for k in set(sa) & set(sb) if sa[k].scored is not None and sb[k].scored is not None)
    by, resamples, read = compared(session, run_a, run_b, shared, sa, sb, steps=steps)
    diffs = [by[k] for k in shared]
    sign = paired_stats.sign_test_of(diffs)
    ordered = [(shared[i], diffs[i]) for i in sorted(range(len(shared)), key=lambda i: _order(diffs[i], shared[i]))]
    rest = [(k, uncompared(k, sa, sb)) for k in sorted((set(sa) | set(sb)) - set(shared))]
    ordered += sorted(rest, key=lambda kd: (kd[1].note, kd[0]))
    rng = str(steps) or None
    tasks = [PairedTask(task=k, **vars(d), url=task_url([run_a, run_b], k, json=json, steps=rng),
                        urls=[urls.rollouts(r, json=json, task=k, steps=rng) for r in (run_a, run_b)])
             for k, d in ordered[offset:offset + PAIRED_LIMIT]]
    more = offset + PAIRED_LIMIT < len(ordered)
    return PairedSection(
        runs=[run_a, run_b], reward=REWARD, method=METHOD, level=paired_stats.LEVEL, resamples=resamples,
        seed=paired_stats.SEED, exact_max=EXACT_MAX, read_cap=READ_CAP, rewards_read=read,
        from_moments=sum(d.method == paired_stats.MOMENTS for d in diffs), sign_test=SignTestOut(**vars(sign)),
        verdicts={v: sum(d.verdict == v for d in diffs) for v in paired_stats.VERDICTS},
        shared_tasks=len(shared), only_a=len(set(sa) - set(sb)), only_b=len(set(sb) - set(sa)),
        tasks=tasks, tasks_total=len(ordered), offset=offset, limit=PAIRED_LIMIT,
        next_url=(urls.compare([run_a, run_b], json=json, steps=rng, smooth=smooth,
                               paired_offset=offset + PAIRED_LIMIT) if more else None))


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
    sa = q_paired.task_summaries(session=session, run_id=run_a, steps=steps)
    sb = q_paired.task_summaries(session=session, run_id=run_b, steps=steps)
    d = uncompared(task, sa, sb)
    if d is None:  # as the compare page has it: the same plan over every shared task
        shared = sorted(k for k in set(sa) & set(sb) if sa[k].scored is not None and sb[k].scored is not None)
        if task in read_plan(shared, sa, sb):
            ra, rb = (q_paired.task_rewards(session=session, run_id=r, steps=steps, tasks=[task]).get(task, np.empty(0))
                      for r in (run_a, run_b))
            (d,), _ = paired_stats.paired_differences([task], [ra], [rb])
        else:
            d = paired_stats.moments_difference(sa[task].scored, sb[task].scored)
    return TaskPairPage(
        task=task, steps=str(steps), sides=sides, limit=q_paired.TASK_ROLLOUTS_LIMIT,
        paired=PairedTask(task=task, **vars(d), url=task_url([run_a, run_b], task, json=json, steps=rng),
                          urls=[s.rollouts_url for s in sides]),
        compare_url=urls.compare([run_a, run_b], json=json, steps=rng))
