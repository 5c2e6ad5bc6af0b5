"""page indexes: what the per-run pages need at 200,000 rollouts a run (issue 25, measured on
bench/generate_pg.py's runs, docs/deploy.md)

- `ix_search_doc_run_pk` on search_doc (run_id, pk): a search in one run reads the run's first
  and last text key from it and walks only that range newest first (app/queries/search.py
  `_run_keys`); it walked every later run's texts first (a common word in the first of 50 runs:
  10 s).
- `ix_finding_group_kind` on finding (run_id, kind, group_id) where rollout_pk IS NULL: the
  group findings of one kind in one run (the list's `flag=zero_variance_group` and its step
  range); Postgres filtered every group finding of every run in their one partition (63,000
  rows, 62 ms, for 16 groups).

Revision ID: 0025_page_indexes
Revises: 0024_paired_moments
"""
from alembic import op
import sqlalchemy as sa


revision = "0025_page_indexes"
down_revision = "0024_paired_moments"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_search_doc_run_pk", "search_doc", ["run_id", "pk"], unique=False)
    op.create_index("ix_finding_group_kind", "finding", ["run_id", "kind", "group_id"], unique=False,
                    sqlite_where=sa.text("rollout_pk IS NULL"), postgresql_where=sa.text("rollout_pk IS NULL"))


def downgrade() -> None:
    op.drop_index("ix_finding_group_kind", table_name="finding")
    op.drop_index("ix_search_doc_run_pk", table_name="search_doc")
