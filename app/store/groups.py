"""The group pass: group-scope checks (ingest/checks/groups.py), stored in the `finding` table
with the group's identity (`rollout_pk` NULL, `run_id`, `group_id`).

A group's findings depend on all its members, so they are recomputed from the stored members
whenever a batch inserts or replaces one of them, inside the batch's transaction: a reader sees
the members and their group's findings change together.

Two Postgres writers may store members of one group at the same moment. Each takes a
transaction-scoped advisory lock per group (in key order, so two writers cannot deadlock on them)
before it deletes and recomputes, so the second waits for the first to commit and then sees its
members and findings: the group's findings are stored once. SQLite has one writer at a time.
"""
from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from app.db import models
from app.store.prepare import _json_safe
from ingest.checks import Group, GroupMember, run_group_checks

R = models.Rollout.__table__
F = models.Finding.__table__


def _latest_attempt():
    A = R.alias("other_attempt")
    return (sa.select(sa.func.max(A.c.attempt))
            .where(A.c.run_id == R.c.run_id, A.c.rollout_id == R.c.rollout_id).scalar_subquery())


_MEMBER_COLUMNS = (R.c.run_id, R.c.group_id, R.c.rollout_id, R.c.attempt, R.c.group_index, R.c.group_size,
                   R.c.reward, R.c.reward_status, R.c.ending, R.c.step, R.c.advantage, R.c.advantage_estimator)


def _member(r) -> GroupMember:
    return GroupMember(r.rollout_id, r.attempt, r.group_index, r.group_size, r.reward, r.reward_status, r.ending,
                       r.step, r.advantage)


def load_group(conn: sa.Connection, run_id: str, group_id: str) -> Group:
    """A group's members as the checks see them: the latest attempt of each rollout id (across
    the run), in group index then ingest order."""
    return load_groups(conn, [(run_id, group_id)])[(run_id, group_id)]


def load_groups(conn: sa.Connection, keys: list[tuple[str, str]]) -> dict[tuple[str, str], Group]:
    """Several groups in one query (see `load_group`)."""
    rows = conn.execute(
        sa.select(*_MEMBER_COLUMNS)
        .where(sa.tuple_(R.c.run_id, R.c.group_id).in_(keys), R.c.attempt == _latest_attempt())
        .order_by(R.c.run_id, R.c.group_id, sa.func.coalesce(R.c.group_index, 1 << 30), R.c.pk)).all()
    groups = {key: Group(key[0], key[1], []) for key in keys}
    for r in rows:
        group = groups[(r.run_id, r.group_id)]
        group.members.append(_member(r))
        group.estimator = group.estimator or r.advantage_estimator  # the first member that declares one
    return groups


def lock_groups(conn: sa.Connection, keys: list[tuple[str, str]]) -> None:
    """On Postgres, hold a transaction-scoped advisory lock on each (run_id, group_id) of the
    sorted `keys` until the transaction ends (one statement; the lock key is Postgres's 64-bit
    `hashtextextended` of the run id and group id joined by U+001F). A no-op on SQLite, whose write lock already
    serialises writers."""
    if conn.dialect.name != "postgresql":
        return
    names = [f"{run_id}\x1f{group_id}" for run_id, group_id in keys]
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(k) FROM "
                         "(SELECT DISTINCT hashtextextended(n, 0) AS k "
                         "FROM unnest(CAST(:names AS text[])) AS n) AS keys "
                         "ORDER BY k"), {"names": names})


def recheck_groups(conn: sa.Connection, keys: Iterable[tuple[str, str]]) -> int:
    """Recompute and store the group findings of each (run_id, group_id) in `keys`, replacing
    what was stored: three statements whatever the number of groups (delete, load, insert).
    Returns the number of findings stored (skipped outcomes excluded)."""
    keys = sorted(set(keys))
    if not keys:
        return 0
    lock_groups(conn, keys)
    conn.execute(F.delete().where(F.c.rollout_pk.is_(None), sa.tuple_(F.c.run_id, F.c.group_id).in_(keys)))
    total, rows = 0, []
    for (run_id, group_id), group in load_groups(conn, keys).items():
        if not group.members:
            continue
        results = run_group_checks(group)
        rows += [dict(rollout_pk=None, run_id=run_id, group_id=group_id, kind=f.kind, severity=f.severity,
                      node_idx=None, position=None, message=f.message, detail=_json_safe(f.detail))
                 for f in results.all]
        total += len(results.findings)
    if rows:
        conn.execute(F.insert(), rows)
    return total
