"""What the read modules share: table handles, the int32 bounds of query values, the ending list,
the summary columns of a rollout row, and exact reward sums."""
from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import Node, Rollout
from ingest.schema import Ending

# The endings in their display order, from the native schema (ingest/schema.py `Ending`).
ENDINGS: list[str] = [e.value for e in Ending]
# INTEGER columns are int32 on Postgres: a query value outside this range is refused (422), not sent.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
R = Rollout.__table__
N = Node.__table__

# Columns a list row needs: nothing that grows with the trace.
SUMMARY_COLUMNS = [c for c in R.c if c.name not in ("content_hash",)]


def attempt_columns() -> list:
    """Per row: how many attempts its rollout id has in its run, and the latest attempt number
    (correlated lookups on the (run_id, rollout_id, attempt) unique index)."""
    A = R.alias("other_attempt")
    same = (A.c.run_id == R.c.run_id, A.c.rollout_id == R.c.rollout_id)
    return [sa.select(sa.func.count()).select_from(A).where(*same).scalar_subquery().label("n_attempts"),
            sa.select(sa.func.max(A.c.attempt)).where(*same).scalar_subquery().label("latest_attempt")]


# SQLite sums REAL and would overflow to inf on huge finite rewards (1e308 + 1e308): there the
# sum is taken scaled down by 2**-64 (exact for normal floats). Postgres raises on float8
# overflow and underflow alike, so there the sum is taken in NUMERIC, which is exact.
_SQLITE_SCALE = 2.0 ** -64


def reward_columns(session: Session) -> tuple[list, float]:
    """Reward sums and counts, errors scored 0 (s0, c0) and errors dropped (s1, c1), and the
    scale the sums carry.

    An errored rollout's stored reward is ignored; missing (NULL) rewards count in neither."""
    is_err = R.c.ending == "error"
    if session.get_bind().dialect.name == "postgresql":
        reward, scale = sa.cast(R.c.reward, sa.Numeric), 1.0
    else:
        reward, scale = R.c.reward * _SQLITE_SCALE, _SQLITE_SCALE
    return [
        sa.func.sum(sa.case((is_err, 0), else_=reward)),
        sa.func.count(sa.case((is_err, 0.0), else_=R.c.reward)),
        sa.func.sum(sa.case((is_err, None), else_=reward)),
        sa.func.count(sa.case((is_err, None), else_=R.c.reward)),
    ], scale


def mean(total, count: int, scale: float) -> float | None:
    """The mean of a (scaled) sum; beyond the float range it is ±inf (null in JSON)."""
    if not count:
        return None
    return float((total or 0) / count) / scale
