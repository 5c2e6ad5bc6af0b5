"""Single-rollout reads: one rollout's row, its attempts and its envelope. (The list of
rollouts: app/queries/rollout_list.py.)"""
from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import RolloutDetail
from app.queries.common import R


def get_rollout(*, session: Session, run_id: str, rollout_id: str, attempt: int | None = None):
    """The summary row of a rollout (latest attempt unless `attempt` is given), or None."""
    q = sa.select(R).where(R.c.run_id == run_id, R.c.rollout_id == rollout_id)
    if attempt is not None:
        q = q.where(R.c.attempt == attempt)
    return session.execute(q.order_by(R.c.attempt.desc()).limit(1)).first()


def rollout_attempts(*, session: Session, run_id: str, rollout_id: str) -> list:
    """Every attempt of a rollout id in a run (summary columns of each), by attempt."""
    cols = [R.c.attempt, R.c.ending, R.c.ending_detail, R.c.reward, R.c.reward_status, R.c.step]
    return session.execute(sa.select(*cols).where(R.c.run_id == run_id, R.c.rollout_id == rollout_id)
                           .order_by(R.c.attempt)).all()


def get_envelope(*, session: Session, rollout_pk: int) -> dict:
    """The stored envelope of a rollout (calls, rewards, errors, timing, task, extra); {} if none."""
    d = session.get(RolloutDetail, rollout_pk)
    return (d.envelope or {}) if d else {}


def rollout_by_pk(*, session: Session, run_id: str, rollout_pk: int):
    """(rollout_id, attempt) of a stored rollout of the run, or None."""
    return session.execute(
        sa.select(R.c.rollout_id, R.c.attempt).where(R.c.pk == rollout_pk, R.c.run_id == run_id)).first()


def first_envelope(*, session: Session, run_id: str) -> dict:
    """The envelope of the run's first stored rollout (what the run page's metadata reads the
    sampling models from); {} for a run without rollouts."""
    first_pk = session.execute(sa.select(R.c.pk).where(R.c.run_id == run_id).order_by(R.c.pk).limit(1)).scalar()
    return get_envelope(session=session, rollout_pk=first_pk) if first_pk is not None else {}
