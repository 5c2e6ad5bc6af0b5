"""quarantine: the context a record was ingested with (working folder, --run, --step, --format,
root), so `--retry-quarantined` reads the file again exactly as the first ingest did

Revision ID: 0006_quarantine_context
Revises: 0005_otlp_spool
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql


revision = "0006_quarantine_context"
down_revision = "0005_otlp_spool"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("quarantine") as batch:
        batch.add_column(sa.Column("context", sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()),
                                                                     "postgresql"), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("quarantine") as batch:
        batch.drop_column("context")
