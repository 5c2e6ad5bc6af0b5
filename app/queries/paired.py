"""Reads for the paired comparison of two runs (app/views/paired.py): every scored reward of a
run's rollouts, by task, and one task's rollouts of a run for the side-by-side page.

Which reward: as the run page's and compare's "mean reward" (ingest/stats.py
`scored_with_errors`, the per-(step, task) rollups): an errored rollout scores 0 (its stored
reward ignored) where some rollout of its (step, task) recorded a reward, and counts nowhere
otherwise; a rollout without a reward (missing, NaN, ±inf: stored NULL) counts nowhere. So a
task's mean here is the compare table's mean for it. Every attempt counts, as in the rollups.
No sum of rewards is taken in SQL from the rollouts (counts and means are numpy's, in int64
and float64): nothing overflows a Postgres integer.

`task_summaries` reads the same figures per task from the rollups instead (count, mean, Σx², Σx³:
app/store/rollups.py), one row per task: what compare reads for every task, and the tasks too
large to read every reward of are compared from (app/views/paired.py).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import orjson
import sqlalchemy as sa
from sqlmodel import Session

from app.db import models
from app.paired_stats import Moments
from app.queries.steps import StepRange

R = models.Rollout.__table__
TR = models.TaskRollup.__table__
RT = models.RunTaskRollup.__table__
TASK_ROLLOUTS_LIMIT = 500  # rollouts listed per run on the side-by-side page
KEYS_PER_STATEMENT = 500  # task keys per `IN (...)` (SQLite's bound parameters)


def _in_range(steps: StepRange):
    """Without a range, rollouts without a step count too (as on the run page and compare's
    task table); a range holds only stepped rollouts."""
    return steps.where(R.c.step)


def task_rewards(*, session: Session, run_id: str, steps: StepRange = StepRange(),
                 tasks: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """{task key: the run's scored rewards of that task (float64, in no particular order)} over
    the step range, of every task or of `tasks` alone (one statement per `KEYS_PER_STATEMENT`
    of them, through the (run_id, task_key) index); rollouts without a task key are left out."""
    other = R.alias("same_step_task")
    recorded = sa.exists().where(other.c.run_id == R.c.run_id, other.c.task_key == R.c.task_key,
                                 other.c.step.is_not_distinct_from(R.c.step), other.c.reward.is_not(None))
    score = sa.case((R.c.ending == "error", sa.literal(0.0)), else_=R.c.reward)
    keys = None if tasks is None else sorted(set(tasks))
    parts = [R.c.task_key.is_not(None)] if keys is None else [
        R.c.task_key.in_(keys[i:i + KEYS_PER_STATEMENT]) for i in range(0, len(keys), KEYS_PER_STATEMENT)]
    by: dict[str, list[float]] = {}
    for which in parts:
        q = (sa.select(R.c.task_key, score)
             .where(R.c.run_id == run_id, which, _in_range(steps),
                    sa.or_(sa.and_(R.c.ending != "error", R.c.reward.is_not(None)),
                           sa.and_(R.c.ending == "error", recorded))))
        for task, reward in session.execute(q):
            by.setdefault(task, []).append(reward)
    return {k: np.asarray(v, dtype=np.float64) for k, v in by.items()}


@dataclass(frozen=True)
class TaskSummary:
    """A run's rollouts of one task over the step range, from the rollups: how many (`rollouts`,
    scored or not) and the `scored` rewards' moments (None when no reward is scored: errors
    score 0 only where a rollout of their step and task recorded one)."""

    rollouts: int
    scored: Moments | None


def _fraction(text) -> Fraction | None:
    """A stored exact sum, "numerator/denominator" (app/store/rollups.py writes str(Fraction)), or
    None. Split by hand: Fraction's own string parser costs several times more (2,000 a page)."""
    if not isinstance(text, str) or not text:
        return None
    num, _, den = text.partition("/")
    return Fraction(int(num), int(den or 1))


def task_summaries(*, session: Session, run_id: str, steps: StepRange = StepRange()) -> dict[str, TaskSummary]:
    """{task key: TaskSummary} of every task the run has a rollout of over the step range, from
    the rollups alone (no rollout read): over every step, the run's task rows (one per task,
    exact sums, `mean` the compare table's); over a range, the step rows in it summed by the
    database (the weighted mean compare's task table reads over a range; Σx², Σx³ summed in
    floats)."""
    out: dict[str, TaskSummary] = {}
    if steps.first is None and steps.last is None:
        # `sums` as text, parsed by orjson: fractions as strings and counts only, so the engine's
        # careful JSON reader (ingest.jsonio.loads) would cost several times more (1,000 rows a page)
        for t in session.execute(sa.select(RT.c.task_key, RT.c.rollouts, RT.c.scored, RT.c.mean_reward,
                                           sa.cast(RT.c.sums, sa.Text).label("sums"))
                                 .where(RT.c.run_id == run_id, RT.c.rollouts > 0)):
            sums = orjson.loads(t.sums) if t.sums else {}
            sums = sums if isinstance(sums, dict) else {}
            whole = not sums.get("no_moments")
            out[t.task_key] = TaskSummary(t.rollouts, Moments(
                t.scored, t.mean_reward, _fraction(sums.get("squares")) if whole else None,
                _fraction(sums.get("cubes")) if whole else None)
                if t.scored > 0 and t.mean_reward is not None else None)
        return out
    has_mean = TR.c.mean_reward.is_not(None)
    scored = sa.func.sum(sa.case((has_mean, TR.c.scored), else_=0))
    missing = sa.func.sum(sa.case((sa.and_(has_mean, sa.or_(TR.c.reward_sum_sq.is_(None),
                                                           TR.c.reward_sum_cube.is_(None))), 1), else_=0))
    q = (sa.select(TR.c.task_key, sa.func.sum(TR.c.rollouts).label("rollouts"), scored.label("scored"),
                   (sa.func.sum(TR.c.mean_reward * TR.c.scored) / sa.func.nullif(scored, 0)).label("mean"),
                   sa.func.sum(TR.c.reward_sum_sq).label("sq"), sa.func.sum(TR.c.reward_sum_cube).label("cube"),
                   missing.label("missing"))
         .where(TR.c.run_id == run_id, steps.where(TR.c.step)).group_by(TR.c.task_key)
         .having(sa.func.sum(TR.c.rollouts) > 0))
    for t in session.execute(q):
        n = int(t.scored or 0)
        whole = not t.missing and t.sq is not None and t.cube is not None
        moments = None
        whole = whole and math.isfinite(float(t.sq)) and math.isfinite(float(t.cube))
        if n > 0 and t.mean is not None:
            moments = Moments(n, float(t.mean), Fraction(float(t.sq)) if whole else None,
                              Fraction(float(t.cube)) if whole else None)
        out[t.task_key] = TaskSummary(int(t.rollouts), moments)
    return out


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
