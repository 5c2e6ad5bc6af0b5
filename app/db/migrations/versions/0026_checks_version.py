"""checks version: each rollout records which checks ran on it

- `rollout.checks_version`: the version of the checks registry that ran on the rollout
  (ingest/checks/registry.py `version`; a check declares the version that first runs it, its
  `since`). A check added after a rollout was stored is "not run" on it, not "checked, nothing
  found". NULL for the rollouts stored before this revision: which checks ran on them was not
  kept, and the run page says so (`rollscope recheck` runs today's checks and stamps them).
- the step rollups' `checks` gain `ran` (checks version → rollouts of the step; `null` for
  NULL), recomputed at the head (app/db/derived.py).

Revision ID: 0026_checks_version
Revises: 0025_page_indexes
"""
from alembic import op
import sqlalchemy as sa

from app.db import derived


revision = "0026_checks_version"
down_revision = "0025_page_indexes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("rollout", sa.Column("checks_version", sa.Integer(), nullable=True))
    derived.stale("rollups")  # the step rollups' checks gain `ran`


def downgrade() -> None:
    # ALTER TABLE … DROP COLUMN (SQLite >= 3.35), as 0023. The step rollups keep their `ran`,
    # which the older code never reads.
    op.drop_column("rollout", "checks_version")
