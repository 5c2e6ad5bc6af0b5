"""raw hash: each rollout keeps the hash of the raw record it was read from, so that re-ingesting
the same bytes skips decoding, validation and checks (ingest/known.py, app/store/known.py)

`rollout.raw_hash`: sha256 cut to 32 hex digits of the record's bytes, salted with how it was read;
NULL for rollouts stored before this migration or not read from a hashed record (those are
decoded in full on re-ingest, as before). Indexed: a re-ingest looks up 200 hashes at a time.

Revision ID: 0023_raw_hash
Revises: 0022_failure_signatures
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = "0023_raw_hash"
down_revision = "0022_failure_signatures"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rollout") as batch:
        batch.add_column(sa.Column("raw_hash", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True))
    op.create_index("ix_rollout_raw_hash", "rollout", ["raw_hash"])


def downgrade() -> None:
    op.drop_index("ix_rollout_raw_hash", table_name="rollout")
    # ALTER TABLE … DROP COLUMN (SQLite >= 3.35 has it), not a batch copy of `rollout`: the copy's
    # DROP TABLE rollout failed on SQLite with "database table is locked" once 0021/0022 were below
    op.drop_column("rollout", "raw_hash")
