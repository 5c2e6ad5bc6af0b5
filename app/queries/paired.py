"""Reads for the paired comparison of two runs (app/views/paired.py): every scored reward of a
run's rollouts, by task, and one task's rollouts of a run for the side-by-side page.

Which reward: as the run page's and compare's "mean reward" (ingest/stats.py
`scored_with_errors`, the per-(step, task) rollups): an errored rollout scores 0 (its stored
reward ignored) where some rollout of its (step, task) recorded a reward, and counts nowhere
otherwise; a rollout without a reward (missing, NaN, ±inf: stored NULL) counts nowhere. So a
task's mean here is the compare table's mean for it. Every attempt counts, as in the rollups.
No sum is taken in SQL (counts and means are numpy's, in int64 and float64): nothing overflows
a Postgres integer.
"""
from __future__ import annotations

import numpy as np
import sqlalchemy as sa
from sqlmodel import Session

from app.db import models
from app.queries.steps import StepRange

R = models.Rollout.__table__
TR = models.TaskRollup.__table__
TASK_ROLLOUTS_LIMIT = 500  # rollouts listed per run on the side-by-side page


def _in_range(steps: StepRange):
    """Without a range, rollouts without a step count too (as on the run page and compare's
    task table); a range holds only stepped rollouts."""
    return steps.where(R.c.step)


def task_rewards(*, session: Session, run_id: str, steps: StepRange = StepRange(),
                 task: str | None = None) -> dict[str, np.ndarray]:
    """{task key: the run's scored rewards of that task (float64, in no particular order)} over
    the step range, of every task or of `task` alone. One statement; rollouts without a task
    key are left out."""
    other = R.alias("same_step_task")
    recorded = sa.exists().where(other.c.run_id == R.c.run_id, other.c.task_key == R.c.task_key,
                                 other.c.step.is_not_distinct_from(R.c.step), other.c.reward.is_not(None))
    score = sa.case((R.c.ending == "error", sa.literal(0.0)), else_=R.c.reward)
    q = (sa.select(R.c.task_key, score)
         .where(R.c.run_id == run_id, R.c.task_key.is_not(None) if task is None else R.c.task_key == task,
                _in_range(steps),
                sa.or_(sa.and_(R.c.ending != "error", R.c.reward.is_not(None)),
                       sa.and_(R.c.ending == "error", recorded))))
    by: dict[str, list[float]] = {}
    for task, reward in session.execute(q):
        by.setdefault(task, []).append(reward)
    return {k: np.asarray(v, dtype=np.float64) for k, v in by.items()}


def task_keys(*, session: Session, run_id: str, steps: StepRange = StepRange()) -> set[str]:
    """Every task key the run has a rollout of over the step range, scored or not (a run without
    rewards still has its tasks: the paired section lists them as in one run only). Read from the
    per-(step, task) rollups' covering index, not the rollouts."""
    q = sa.select(TR.c.task_key).where(TR.c.run_id == run_id, TR.c.rollouts > 0, steps.where(TR.c.step)).distinct()
    return set(session.execute(q).scalars())


def task_rollouts(*, session: Session, run_id: str, task: str, steps: StepRange = StepRange(),
                  limit: int = TASK_ROLLOUTS_LIMIT) -> tuple[list, int]:
    """A run's rollouts of one task over the step range, by step (no step last) then as stored:
    the first `limit` rows (rollout_id, attempt, step, ending, ending_detail, reward,
    reward_status) and how many there are (counted only past `limit`). No message body read."""
    where = (R.c.run_id == run_id, R.c.task_key == task, _in_range(steps))
    rows = session.execute(sa.select(R.c.rollout_id, R.c.attempt, R.c.step, R.c.ending, R.c.ending_detail,
                                     R.c.reward, R.c.reward_status)
                           .where(*where).order_by(R.c.step.is_(None), R.c.step, R.c.pk).limit(limit)).all()
    if len(rows) < limit:
        return rows, len(rows)
    return rows, int(session.execute(sa.select(sa.func.count()).select_from(R).where(*where)).scalar_one())
