"""spool files: which spool a file belongs to (the ingest worker's, or the OTLP receiver's)

Revision ID: 0005_otlp_spool
Revises: 0003_agents
"""
from alembic import op
import sqlalchemy as sa


revision = "0005_otlp_spool"
down_revision = "0003_agents"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("spool_file") as batch:
        batch.add_column(sa.Column("spool", sa.String(length=16), nullable=False, server_default="ingest"))


def downgrade() -> None:
    with op.batch_alter_table("spool_file") as batch:
        batch.drop_column("spool")
