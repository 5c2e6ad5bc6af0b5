"""Paired comparison of two runs by task: the `paired` section of `/compare?runs=A,B` (and of
`compare.json`), and one task's rollouts of both runs side by side (`/compare/task?runs=A,B&task=T`).
The statistics are app/paired_stats.py's (formula and sources there); the rewards are
app/queries/paired.py's (errors scored 0, as compare's task table).
"""
from __future__ import annotations

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
    `reward` and `method` say what was compared and how."""

    runs: list[str]
    reward: str
    method: str
    level: float
    resamples: int
    seed: int
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


def uncompared(key: str, ra: dict, rb: dict, in_a: bool, in_b: bool) -> paired_stats.TaskDiff | None:
    """The task's entry when it cannot be compared: in one run only ("not in run A" / "not in run
    B") or in both without a scored reward in one (`NO_REWARD`): no diff, no interval, no verdict.
    None when both runs have scored rollouts of it."""
    a, b = ra.get(key), rb.get(key)
    if a is not None and b is not None:
        return None
    if not in_a and not in_b:
        note = "in neither run"
    elif not in_a or not in_b:
        note = "not in run A" if not in_a else "not in run B"
    else:
        note = NO_REWARD.format("A" if a is None else "B") if (a is None) != (b is None) else NO_REWARD_EITHER
    return paired_stats.TaskDiff(0 if a is None else int(a.size), 0 if b is None else int(b.size),
                                 paired_stats.mean(a), paired_stats.mean(b),
                                 None, None, None, None, note)


def paired_section(session: Session, run_a: str, run_b: str, *, steps: StepRange = StepRange(), offset: int = 0,
                   json: bool = False, smooth: int | None = None) -> PairedSection:
    """The paired comparison of B = `run_b` against A = `run_a` over the step range (both runs
    exist: the caller checked). Only tasks both runs have scored rollouts of are compared
    (`shared_tasks`); the others follow them, with a `note` and no verdict. Links go to JSON
    twins when `json`."""
    ra = q_paired.task_rewards(session=session, run_id=run_a, steps=steps)
    rb = q_paired.task_rewards(session=session, run_id=run_b, steps=steps)
    ka = q_paired.task_keys(session=session, run_id=run_a, steps=steps) | set(ra)
    kb = q_paired.task_keys(session=session, run_id=run_b, steps=steps) | set(rb)
    shared = sorted(set(ra) & set(rb))
    diffs, resamples = paired_stats.paired_differences(shared, [ra[k] for k in shared], [rb[k] for k in shared])
    sign = paired_stats.sign_test_of(diffs)
    ordered = [(shared[i], diffs[i]) for i in sorted(range(len(shared)), key=lambda i: _order(diffs[i], shared[i]))]
    rest = [(k, uncompared(k, ra, rb, k in ka, k in kb)) for k in sorted((ka | kb) - set(shared))]
    ordered += sorted(rest, key=lambda kd: (kd[1].note, kd[0]))
    rng = str(steps) or None
    tasks = [PairedTask(task=k, **vars(d), url=task_url([run_a, run_b], k, json=json, steps=rng),
                        urls=[urls.rollouts(r, json=json, task=k, steps=rng) for r in (run_a, run_b)])
             for k, d in ordered[offset:offset + PAIRED_LIMIT]]
    more = offset + PAIRED_LIMIT < len(ordered)
    return PairedSection(
        runs=[run_a, run_b], reward=REWARD, method=METHOD, level=paired_stats.LEVEL, resamples=resamples,
        seed=paired_stats.SEED, sign_test=SignTestOut(**vars(sign)),
        verdicts={v: sum(d.verdict == v for d in diffs) for v in paired_stats.VERDICTS},
        shared_tasks=len(shared), only_a=len(ka - kb), only_b=len(kb - ka),
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
    ra, rb = (q_paired.task_rewards(session=session, run_id=r, steps=steps, task=task) for r in (run_a, run_b))
    d = uncompared(task, ra, rb, sides[0].total > 0, sides[1].total > 0)
    if d is None:
        (d,), _ = paired_stats.paired_differences([task], [ra[task]], [rb[task]])
    return TaskPairPage(
        task=task, steps=str(steps), sides=sides, limit=q_paired.TASK_ROLLOUTS_LIMIT,
        paired=PairedTask(task=task, **vars(d), url=task_url([run_a, run_b], task, json=json, steps=rng),
                          urls=[s.rollouts_url for s in sides]),
        compare_url=urls.compare([run_a, run_b], json=json, steps=rng))
