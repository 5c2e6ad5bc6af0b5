"""Runs: the runs list with rollout counts, step range, mean rewards and ending counts; one run;
per-step rollups."""
from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import Run
from app.queries.common import ENDINGS, R, mean, reward_columns


def reward_means(*, session: Session, run_ids: list[str] | None = None) -> dict[str, dict]:
    """Per run: mean reward with errors scored 0 and with errors dropped (the run page's and the
    runs list's figures, one computation)."""
    columns, scale = reward_columns(session)
    q = sa.select(R.c.run_id, sa.func.count(), *columns).group_by(R.c.run_id)
    if run_ids is not None:
        q = q.where(R.c.run_id.in_(run_ids))
    return {rid: {"rollouts": n, "mean_reward": mean(s0, c0, scale), "mean_reward_no_errors": mean(s1, c1, scale),
                  "scored": c0, "excluded": n - c0}
            for rid, n, s0, c0, s1, c1 in session.execute(q).all()}


def list_runs(*, session: Session) -> list[dict]:
    """Every run with rollout counts, step range, mean rewards and ending counts."""
    runs = {r.id: r for r in session.exec(sa.select(Run).order_by(Run.created_at, Run.id)).scalars()}
    stats = session.execute(
        sa.select(R.c.run_id, sa.func.count(), sa.func.min(R.c.step), sa.func.max(R.c.step),
                  sa.func.count(sa.distinct(R.c.step)))
        .group_by(R.c.run_id)).all()
    by_run = {s[0]: s for s in stats}
    means = reward_means(session=session)
    endings = session.execute(sa.select(R.c.run_id, R.c.ending, sa.func.count()).group_by(R.c.run_id, R.c.ending)).all()
    out = []
    for run_id, run in runs.items():
        s = by_run.get(run_id)
        m = means.get(run_id, {})
        counts = {e: 0 for e in ENDINGS}
        for rid, ending, n in endings:
            if rid == run_id:
                counts[ending] = n
        out.append({
            "id": run.id, "name": run.name, "type": run.type,
            "rollouts": s[1] if s else 0,
            "first_step": s[2] if s else None, "last_step": s[3] if s else None,
            "steps": s[4] if s else 0,
            "mean_reward": m.get("mean_reward"),  # errors scored 0
            "mean_reward_no_errors": m.get("mean_reward_no_errors"),  # errored rollouts dropped
            "endings": counts,
            "tokenizer": run.tokenizer_sha256,
            "created_at": run.created_at,
        })
    return out


def get_run(*, session: Session, run_id: str) -> Run | None:
    return session.get(Run, run_id)


@dataclass
class StepRow:
    step: int | None
    rollouts: int
    endings: dict[str, int]
    mean_reward: float | None  # errors scored 0
    mean_reward_no_errors: float | None  # errored rollouts dropped
    scored: int  # rollouts with a finite reward (or an error, scored 0)
    excluded: int  # missing / non-finite rewards

    def rates(self) -> dict[str, float]:
        return {e: (n / self.rollouts if self.rollouts else 0.0) for e, n in self.endings.items()}


def run_steps(*, session: Session, run_id: str) -> list[StepRow]:
    """Per training step: counts per ending and mean reward with and without errored rollouts.

    Every attempt counts: a rollout that errored and was retried is one error and one more
    rollout at that step (the error rate shows what the infrastructure did). Group baselines,
    in contrast, use only the latest attempt of each rollout (what the trainer used).

    "With errors" scores an errored rollout 0 (its stored reward is ignored); "without" drops
    errored rollouts. Rollouts with a missing or non-finite reward are excluded from both means
    and counted in `excluded`.
    """
    columns, scale = reward_columns(session)
    rows = session.execute(
        sa.select(R.c.step, R.c.ending, sa.func.count(), *columns)
        .where(R.c.run_id == run_id).group_by(R.c.step, R.c.ending)
    ).all()
    steps: dict[int | None, dict] = {}
    for step, ending, n, s0, c0, s1, c1 in rows:
        d = steps.setdefault(step, {"n": 0, "endings": {e: 0 for e in ENDINGS}, "s0": 0, "c0": 0, "s1": 0, "c1": 0})
        d["n"] += n
        d["endings"][ending] = d["endings"].get(ending, 0) + n
        d["s0"] += s0 or 0  # Decimal on Postgres, scaled float on SQLite
        d["c0"] += c0
        d["s1"] += s1 or 0
        d["c1"] += c1
    out = []
    for step in sorted(steps, key=lambda s: (s is None, s if s is not None else 0)):
        d = steps[step]
        out.append(StepRow(
            step=step, rollouts=d["n"], endings=d["endings"],
            mean_reward=mean(d["s0"], d["c0"], scale),
            mean_reward_no_errors=mean(d["s1"], d["c1"], scale),
            scored=d["c0"], excluded=d["n"] - d["c0"],
        ))
    return out


def count_retries(*, session: Session, run_id: str) -> int:
    """Rollouts of the run that are a retry (attempt > 0)."""
    return session.execute(sa.select(sa.func.count()).where(R.c.run_id == run_id, R.c.attempt > 0)).scalar_one()
