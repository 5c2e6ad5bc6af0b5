"""Derived tables that migrations recompute: once, at the head, with the head's code.

A migration that changes what the rollups or the search documents hold (0010, 0012, 0014, 0021,
0024) does not recompute them itself: the code that computes them is today's, written against
today's tables, so a migration that ran it halfway up the chain (0014 on a database going from
0002 to the head) queried columns a later migration adds. Instead it calls `stale("rollups")`,
and the environment (app/db/migrations/env.py) calls `rebuild_stale` after the last migration of
the run, in the same transaction, once per kind however many migrations asked.

An upgrade that stops short of the head (`alembic upgrade 0014`, tests of old revisions) leaves
them as they were: today's code cannot compute them for an older schema; `rollscope
rebuild-analytics` (app/cli/rebuild.py) does, at the head. A downgrade does not recompute them
either (the older code's `rebuild-analytics` does).
"""
from __future__ import annotations

import sqlalchemy as sa

KINDS = ("rollups", "search")
_KEY = "rollscope_derived_stale"
# rewritten wholesale by a rebuild: fresh planner statistics (Postgres analyzes a partitioned
# parent only when told; SQLite only tables with rows, whose absence would say "always empty")
_ANALYZE = {"rollups": ("step_rollup", "task_rollup", "run_task_rollup"), "search": ()}


def stale(kind: str) -> None:
    """Called from a migration's upgrade(): `kind` (one of KINDS) must be recomputed at the head.
    Raises ValueError for an unknown kind."""
    if kind not in KINDS:
        raise ValueError(f"unknown derived kind {kind!r}; one of {KINDS}")
    from alembic import context

    context.config.attributes.setdefault(_KEY, set()).add(kind)


def rebuild_stale(conn: sa.Connection, attributes: dict, at_head: bool) -> list[str]:
    """Recompute the kinds the migrations just run marked stale, if `at_head`; returns the kinds
    recomputed (in KINDS order), and clears the marks either way."""
    marked = attributes.pop(_KEY, set())
    kinds = [k for k in KINDS if k in marked]
    if not at_head:
        return []
    from app.store import rollups, search

    for kind in kinds:
        (rollups if kind == "rollups" else search).rebuild(conn)
        for table in _ANALYZE[kind]:
            if conn.dialect.name == "postgresql" or conn.execute(sa.text(f"SELECT 1 FROM {table} LIMIT 1")).first():
                conn.execute(sa.text(f"ANALYZE {table}"))
    return kinds
