"""quarantine: run, source, first and last seen; spool files: notices apart from errors

A quarantine entry keeps the record's run (when known or given), where it came from (a file's
path, or `http:<token name>` for HTTP ingest and the OTLP receiver), when it was first rejected
(`first_seen`, the former `created_at`) and when last (`last_seen`, moved on by each rejection of
the same record: a whole read of its file that does not touch it deletes it). A spool file keeps
what the worker noticed apart from its errors (`notice`: "read again from the start"), and when
its current read from byte 0 began (`read_from`). Existing entries get `last_seen = first_seen`.

Revision ID: 0016_quarantine_seen
Revises: 0015_tokenizer_source
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel


revision = "0016_quarantine_seen"
down_revision = "0015_tokenizer_source"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("quarantine") as batch:
        batch.alter_column("created_at", new_column_name="first_seen", existing_type=sa.DateTime(timezone=True),
                           existing_nullable=False)
        batch.add_column(sa.Column("last_seen", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        batch.add_column(sa.Column("source", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
    op.execute("UPDATE quarantine SET last_seen = first_seen")
    with op.batch_alter_table("quarantine") as batch:
        batch.alter_column("last_seen", existing_type=sa.DateTime(timezone=True), nullable=False)
    with op.batch_alter_table("spool_file") as batch:
        batch.add_column(sa.Column("notice", sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        batch.add_column(sa.Column("read_from", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("spool_file") as batch:
        batch.drop_column("read_from")
        batch.drop_column("notice")
    with op.batch_alter_table("quarantine") as batch:
        batch.drop_column("source")
        batch.drop_column("run_id")
        batch.drop_column("last_seen")
        batch.alter_column("first_seen", new_column_name="created_at", existing_type=sa.DateTime(timezone=True),
                           existing_nullable=False)
