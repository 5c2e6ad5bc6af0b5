"""page indexes: what the per-run pages need at 200,000 rollouts a run (issue 25, measured on
bench/generate_pg.py's runs, docs/deploy.md)

- `ix_search_doc_run_pk` on search_doc (run_id, pk): a search in one run reads the run's first
  and last text key from it and walks only that range newest first (app/queries/search.py
  `_run_keys`); it walked every later run's texts first (a common word in the first of 50 runs:
  10 s).

Revision ID: 0025_page_indexes
Revises: 0024_paired_moments
"""
from alembic import op


revision = "0025_page_indexes"
down_revision = "0024_paired_moments"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_search_doc_run_pk", "search_doc", ["run_id", "pk"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_search_doc_run_pk", table_name="search_doc")
