"""Groups: whether a group exists in a run, and its members' summary rows."""
from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session

from app.queries.common import SUMMARY_COLUMNS, N, R, attempt_columns


def group_exists(*, session: Session, run_id: str, group_id: str) -> bool:
    return session.execute(
        sa.select(R.c.pk).where(R.c.run_id == run_id, R.c.group_id == group_id).limit(1)).first() is not None


def group_members(*, session: Session, run_id: str, group_id: str) -> list:
    """Summary rows of a group's rollouts (every attempt, each with `n_attempts` and
    `latest_attempt` of its rollout id across the run), by group index then ingest order."""
    return session.execute(
        sa.select(*SUMMARY_COLUMNS, *attempt_columns()).where(R.c.run_id == run_id, R.c.group_id == group_id)
        .order_by(sa.func.coalesce(R.c.group_index, 1 << 30), R.c.pk)).all()


def member_pks(*, session: Session, run_id: str, group_id: str) -> dict[tuple[str, int], int]:
    """(rollout id, attempt) → primary key, for every attempt in the group."""
    rows = session.execute(sa.select(R.c.pk, R.c.rollout_id, R.c.attempt)
                           .where(R.c.run_id == run_id, R.c.group_id == group_id)).all()
    return {(r.rollout_id, r.attempt): r.pk for r in rows}


def member_nodes(*, session: Session, pks: list[int]) -> dict[int, list]:
    """Per rollout pk, its nodes by idx: header, token arrays and extra, never the message body
    (one statement for the whole group)."""
    from types import SimpleNamespace

    cols = [N.c.rollout_pk, N.c.idx, N.c.parent, N.c.role, N.c.sampled, N.c.n_tokens, N.c.token_ids, N.c.mask,
            N.c.logprobs, N.c.advantages, N.c.extra]
    out: dict[int, list] = {pk: [] for pk in pks}
    if not pks:
        return out
    for r in session.execute(sa.select(*cols).where(N.c.rollout_pk.in_(pks)).order_by(N.c.rollout_pk, N.c.idx)):
        out[r.rollout_pk].append(SimpleNamespace(**r._mapping))
    return out
