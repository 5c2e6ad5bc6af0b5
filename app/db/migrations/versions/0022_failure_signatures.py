"""failure signatures: recurring failure templates per run, and the rollouts that carry them

`failure_signature` holds a run's templates mined at ingest with Drain3 (ingest/signatures.py,
app/store/signatures.py: number, template); `rollout_signature` one row per (rollout, signature),
written with the rollout and deleted with it. Rollouts stored before this migration get none
(docs/failures.md: re-ingest or `rollscope recheck` mines them).

Revision ID: 0022_failure_signatures
Revises: 0021_search_incidents
"""
from alembic import op
import sqlalchemy as sa

import sqlmodel


revision = "0022_failure_signatures"
down_revision = "0021_search_incidents"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("failure_signature",
        sa.Column("pk", sa.Integer(), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("template", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"]),
        sa.PrimaryKeyConstraint("pk"))
    op.create_index("uq_failure_signature_number", "failure_signature", ["run_id", "number"], unique=True)
    op.create_table("rollout_signature",
        sa.Column("rollout_pk", sa.Integer(), nullable=False),
        sa.Column("signature_pk", sa.Integer(), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("step", sa.Integer(), nullable=True),
        sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(length=20), nullable=False),
        sa.ForeignKeyConstraint(["rollout_pk"], ["rollout.pk"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["signature_pk"], ["failure_signature.pk"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("rollout_pk", "signature_pk"))
    op.create_index("ix_rollout_signature_signature", "rollout_signature", ["signature_pk", "step"])
    op.create_index("ix_rollout_signature_run_step", "rollout_signature", ["run_id", "step"])


def downgrade() -> None:
    op.drop_index("ix_rollout_signature_run_step", table_name="rollout_signature")
    op.drop_index("ix_rollout_signature_signature", table_name="rollout_signature")
    op.drop_table("rollout_signature")
    op.drop_index("uq_failure_signature_number", table_name="failure_signature")
    op.drop_table("failure_signature")
