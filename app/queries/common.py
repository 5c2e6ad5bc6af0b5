"""What the read modules share: table handles, the summary columns of a rollout row and its attempt
lookups. (The int32 bounds of query values are ingest/fields.py's; the ending list ingest/stats.py's.)"""
from __future__ import annotations

import sqlalchemy as sa

from app.db.models import Node, Rollout

R = Rollout.__table__
N = Node.__table__

# Columns a list row needs: nothing that grows with the trace.
SUMMARY_COLUMNS = [c for c in R.c if c.name not in ("content_hash", "raw_hash")]


def attempt_columns() -> list:
    """Per row: how many attempts its rollout id has in its run, and the latest attempt number
    (correlated lookups on the (run_id, rollout_id, attempt) unique index)."""
    A = R.alias("other_attempt")
    same = (A.c.run_id == R.c.run_id, A.c.rollout_id == R.c.rollout_id)
    return [sa.select(sa.func.count()).select_from(A).where(*same).scalar_subquery().label("n_attempts"),
            sa.select(sa.func.max(A.c.attempt)).where(*same).scalar_subquery().label("latest_attempt")]
