"""paired moments: the task rollups keep Σx² and Σx³ of the scored rewards, so that compare's
paired section reads a task's spread from the rollups instead of every reward of both runs
(issue 25: 11-23 s at 200,000 rollouts a run)

- `task_rollup.reward_sum_sq`, `task_rollup.reward_sum_cube`: per (run, step, task), Σx² and Σx³
  of the rewards in `mean_reward` (errors scored 0), exactly rounded (ingest/stats.py
  `power_sum`); NULL when nothing is scored or a power leaves the floats;
- `run_task_rollup.sums` gains "squares" and "cubes" (their exact sums over the task's step rows,
  as fractions) and "no_moments" (step rows scored without them). No schema change there.

Every rollup is recomputed from the stored rows, at the head (app/db/derived.py) (`rollups.rebuild`), as `rollscope
rebuild-analytics` does.

Revision ID: 0024_paired_moments
Revises: 0023_raw_hash
"""
from alembic import op
import sqlalchemy as sa

from app.db import derived


revision = "0024_paired_moments"
down_revision = "0023_raw_hash"
branch_labels = None
depends_on = None

COLUMNS = ("reward_sum_sq", "reward_sum_cube")


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("task_rollup", sa.Column(name, sa.Float(), nullable=True))

    derived.stale("rollups")  # recomputed at the head from the summary rows stored


def downgrade() -> None:
    # ALTER TABLE … DROP COLUMN (SQLite >= 3.35), as 0023: no batch copy of the table. The
    # run task rows keep their extra "squares"/"cubes" keys, which the older code never reads.
    for name in COLUMNS:
        op.drop_column("task_rollup", name)
