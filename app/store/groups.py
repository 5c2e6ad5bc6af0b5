"""The group pass: group-scope checks (ingest/checks/groups.py), stored in the `finding` table
with the group's identity (`rollout_pk` NULL, `run_id`, `group_id`).

A group's findings depend on all its members, so they are recomputed from the stored members
whenever a batch inserts or replaces one of them, inside the batch's transaction: a reader sees
the members and their group's findings change together.
"""
from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from app.db import models
from app.store.prepare import _json_safe
from ingest.checks import Group, GroupMember, run_group_checks

R = models.Rollout.__table__
F = models.Finding.__table__


def load_group(conn: sa.Connection, run_id: str, group_id: str) -> Group:
    """A group's members as the checks see them: the latest attempt of each rollout id (across
    the run), in group index then ingest order."""
    A = R.alias("other_attempt")
    latest = (sa.select(sa.func.max(A.c.attempt))
              .where(A.c.run_id == R.c.run_id, A.c.rollout_id == R.c.rollout_id).scalar_subquery())
    rows = conn.execute(
        sa.select(R.c.rollout_id, R.c.attempt, R.c.group_index, R.c.group_size, R.c.reward, R.c.reward_status,
                  R.c.ending, R.c.step)
        .where(R.c.run_id == run_id, R.c.group_id == group_id, R.c.attempt == latest)
        .order_by(sa.func.coalesce(R.c.group_index, 1 << 30), R.c.pk)).all()
    return Group(run_id, group_id, [GroupMember(r.rollout_id, r.attempt, r.group_index, r.group_size, r.reward,
                                                r.reward_status, r.ending, r.step) for r in rows])


def recheck_groups(conn: sa.Connection, keys: Iterable[tuple[str, str]]) -> int:
    """Recompute and store the group findings of each (run_id, group_id) in `keys`, replacing
    what was stored. Returns the number of findings stored (skipped outcomes excluded)."""
    total = 0
    for run_id, group_id in sorted(set(keys)):
        conn.execute(F.delete().where(F.c.run_id == run_id, F.c.group_id == group_id, F.c.rollout_pk.is_(None)))
        group = load_group(conn, run_id, group_id)
        if not group.members:
            continue
        results = run_group_checks(group)
        rows = [dict(rollout_pk=None, run_id=run_id, group_id=group_id, kind=f.kind, severity=f.severity,
                     node_idx=None, position=None, message=f.message, detail=_json_safe(f.detail))
                for f in results.all]
        if rows:
            conn.execute(F.insert(), rows)
        total += len(results.findings)
    return total
