"""search: on SQLite the FTS5 index is filled by the writer, not by a per-row trigger

The AFTER INSERT trigger of 0007_analytics cost about 16 µs per message (measured on the issue-6
workload: 0.17 s of FTS5 work per 12,300 messages through the trigger against 0.02 s for the same
rows inserted with one INSERT ... SELECT per batch). `app.store.search.add_docs` now inserts the
documents and their FTS5 entries together, in the same transaction. The delete trigger stays:
ON DELETE CASCADE from `rollout` removes documents without the writer seeing them.

Revision ID: 0009_search_insert
Revises: 0008_status_indexes
"""
from alembic import op


revision = "0009_search_insert"
down_revision = "0008_status_indexes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS search_doc_ai")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("CREATE TRIGGER search_doc_ai AFTER INSERT ON search_doc BEGIN "
                   "INSERT INTO search_fts(rowid, text) VALUES (new.pk, new.text); END")
