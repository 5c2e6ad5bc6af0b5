"""spool files: the last bytes read before the offset, so a new file on a recycled inode is known

A spool file is known by device and inode, and a rewrite by its first bytes. A file deleted and
replaced by another that the filesystem gives the same inode, and that begins like it (chat logs
with one system prompt), looked like the old file grown: the worker resumed at the old offset and
the new file's first records were never read. `tail` keeps the up to 64 bytes before `offset`
(the end of the last line committed); bytes there that differ mean another file, read from the
start. NULL for rows written before this revision (checked from their next commit on).

Revision ID: 0013_spool_tail
Revises: 0012_group_flags
"""
from alembic import op
import sqlalchemy as sa


revision = "0013_spool_tail"
down_revision = "0012_group_flags"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("spool_file") as batch:
        batch.add_column(sa.Column("tail", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("spool_file") as batch:
        batch.drop_column("tail")
