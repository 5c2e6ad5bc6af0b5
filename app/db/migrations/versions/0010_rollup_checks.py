"""rollups for the run page, compare and the list at a million rollouts

Revision ID: 0010_rollup_checks
Revises: 0009_search_insert

- `run_task_rollup`: one row per (run, task) over all steps (compare's task table, the task
  facet, the heatmap's task volumes), kept at ingest by app/store/rollups.py; it and
  `task_rollup` gain `by_ending`, rollouts per agent and finding kind for each ending (the list's
  agent and finding facets under a task filter);
- the step rollups' `stats` gain `checks`: per step, the rollouts with a finding or a skipped
  outcome of each check kind and the reasons given (the run page's checks table and findings
  chart, which counted them with a join over every rollout of the run);
- the rollouts list's sort indexes end in `pk`, the keyset order (on Postgres a page sorted by
  reward sorted all 300,000 ties of reward 1.0 of the benchmark run), and the ending index
  continues with (step, pk): the ending filter in the list's default order; the (run, task)
  index of task_rollup also covers `errors`;
- `finding`'s rollout-scope indexes leave out the group findings (rollout_pk NULL): SQLite's
  statistics took "rollout_pk IS NULL" for a handful of rows and read every group finding
  through it (the rollouts list's findings column, 20 ms a page at 150,000 groups).

Every rollup is recomputed from the stored rows, at the head (app/db/derived.py) (`rollups.rebuild`), as `rollscope
rebuild-analytics` does.
"""
from alembic import op

from app.db import derived
import sqlalchemy as sa
import sqlmodel
from sqlalchemy.dialects import postgresql


revision = "0010_rollup_checks"
down_revision = "0009_search_insert"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
SORT_INDEXES = {  # name: (old columns, new columns)
    "ix_rollout_run_step": (["run_id", "step"], ["run_id", "step", "pk"]),
    "ix_rollout_run_ending": (["run_id", "ending"], ["run_id", "ending", "step", "pk"]),
    "ix_rollout_run_reward": (["run_id", "reward"], ["run_id", "reward", "pk"]),
    "ix_rollout_run_tokens": (["run_id", "n_tokens"], ["run_id", "n_tokens", "pk"]),
    "ix_rollout_run_turns": (["run_id", "n_turns"], ["run_id", "n_turns", "pk"]),
}
# the step facet under a task filter sums `errors` (ending=error) from this index alone
TASK_INDEX = (["run_id", "task_key", "step", "rollouts"], ["run_id", "task_key", "step", "rollouts", "errors"])

# rollout-scope lookups of `finding`, made partial: without the group findings (rollout_pk NULL)
FINDING_INDEXES = {"ix_finding_rollout_pk": ["rollout_pk"], "ix_finding_kind_rollout": ["kind", "rollout_pk"]}


def upgrade() -> None:
    op.create_table("run_task_rollup",
        sa.Column("pk", sa.Integer(), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("task_key", sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
        sa.Column("rollouts", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("scored", sa.Integer(), nullable=False),
        sa.Column("scored_no_errors", sa.Integer(), nullable=False),
        sa.Column("mean_reward", sa.Float(), nullable=True),
        sa.Column("mean_reward_no_errors", sa.Float(), nullable=True),
        sa.Column("endings", JSON, nullable=True),
        sa.Column("by_ending", JSON, nullable=True),
        sa.Column("sums", JSON, nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], ),
        sa.PrimaryKeyConstraint("pk"))
    op.create_index("uq_run_task_rollup_key", "run_task_rollup", ["run_id", "task_key"], unique=True)
    op.add_column("task_rollup", sa.Column("by_ending", JSON, nullable=True))
    for name, (_, cols) in SORT_INDEXES.items():
        op.drop_index(name, table_name="rollout")
        op.create_index(name, "rollout", cols, unique=False)
    op.drop_index("ix_task_rollup_run_task", table_name="task_rollup")
    op.create_index("ix_task_rollup_run_task", "task_rollup", TASK_INDEX[1], unique=False)
    for name, cols in FINDING_INDEXES.items():
        op.drop_index(name, table_name="finding")
        op.create_index(name, "finding", cols, unique=False, sqlite_where=sa.text("rollout_pk IS NOT NULL"),
                        postgresql_where=sa.text("rollout_pk IS NOT NULL"))

    derived.stale("rollups")  # recomputed at the head from the summary rows and findings stored
    bind = op.get_bind()
    # SQLite keeps no statistics of the new indexes until ANALYZE (without them it ran the ending
    # facet under a task filter through the ending index, 0.5 s). Only for tables with rows: the
    # statistics of an empty table would tell the planner it stays empty (Postgres keeps its
    # statistics per column and analyzes by itself).
    if bind.dialect.name == "sqlite":
        for table in ("rollout", "finding"):  # the rollups: when recomputed (app/db/derived.py)
            if bind.execute(sa.text(f"SELECT 1 FROM {table} LIMIT 1")).first() is not None:
                op.execute(f"ANALYZE {table}")


def downgrade() -> None:
    for name, cols in FINDING_INDEXES.items():
        op.drop_index(name, table_name="finding")
        op.create_index(name, "finding", cols, unique=False)
    op.drop_index("ix_task_rollup_run_task", table_name="task_rollup")
    op.create_index("ix_task_rollup_run_task", "task_rollup", TASK_INDEX[0], unique=False)
    for name, (cols, _) in SORT_INDEXES.items():
        op.drop_index(name, table_name="rollout")
        op.create_index(name, "rollout", cols, unique=False)
    with op.batch_alter_table("task_rollup") as b:
        b.drop_column("by_ending")
    op.drop_index("uq_run_task_rollup_key", table_name="run_task_rollup")
    op.drop_table("run_task_rollup")
