"""Groups: whether a group exists in a run, and its members' summary rows."""
from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session

from app.queries.common import R, SUMMARY_COLUMNS, attempt_columns


def group_exists(*, session: Session, run_id: str, group_id: str) -> bool:
    return session.execute(sa.select(R.c.pk).where(R.c.run_id == run_id, R.c.group_id == group_id).limit(1)).first() is not None


def group_members(*, session: Session, run_id: str, group_id: str) -> list:
    """Summary rows of a group's rollouts (every attempt, each with `n_attempts` and
    `latest_attempt` of its rollout id across the run), by group index then ingest order."""
    return session.execute(
        sa.select(*SUMMARY_COLUMNS, *attempt_columns()).where(R.c.run_id == run_id, R.c.group_id == group_id)
        .order_by(sa.func.coalesce(R.c.group_index, 1 << 30), R.c.pk)).all()
