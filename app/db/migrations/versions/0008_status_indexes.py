"""rollout: indexes on ingested_at and source_file, so the ingest status page (polled every 2 s)
finds the last minute's rollouts and those of the live sources without scanning the table

Revision ID: 0008_status_indexes
Revises: 0007_analytics
"""
from alembic import op


revision = "0008_status_indexes"
down_revision = "0007_analytics"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_rollout_ingested_at", "rollout", ["ingested_at"])
    op.create_index("ix_rollout_source_file", "rollout", ["source_file"])


def downgrade() -> None:
    op.drop_index("ix_rollout_source_file", table_name="rollout")
    op.drop_index("ix_rollout_ingested_at", table_name="rollout")
