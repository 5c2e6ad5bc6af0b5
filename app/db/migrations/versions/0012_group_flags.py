"""rollups: a group-scope finding counts for every member of its group

The step and task rollups' finding counts (`stats.findings`, `by_ending`: the rollouts list's
`flag` facet, the findings chart, a step's story) held the rollouts' own findings only, so a
group finding (zero-variance group, advantage mismatch, ...) was missing from them while the
list's `flag=<kind>` filter, which their links open, selects the group's members. They now count
each member of a flagged group, as the checks table does. Every rollup is recomputed, at the head (app/db/derived.py), from
the stored rows (`rollups.rebuild`), as `rollscope rebuild-analytics` does. No schema change.

Revision ID: 0012_group_flags
Revises: 0011_search_words
"""
from app.db import derived


revision = "0012_group_flags"
down_revision = "0011_search_words"
branch_labels = None
depends_on = None


def upgrade() -> None:
    derived.stale("rollups")  # recomputed at the head from the summary rows and findings stored


def downgrade() -> None:
    pass  # no schema change; the older code's counts come back with its `rollscope rebuild-analytics`
