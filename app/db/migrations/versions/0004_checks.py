"""rollout: recorded advantage and declared estimator (for the group-scope advantage checks);
tokenizer: the chat template kept with the run (for the template checks)

Revision ID: 0004_checks
Revises: 0003_checks
"""
from alembic import op
import sqlalchemy as sa


revision = "0004_checks"
down_revision = "0004_worker"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rollout", schema=None) as batch_op:
        batch_op.add_column(sa.Column("advantage", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("advantage_estimator", sa.String(length=40), nullable=True))
    with op.batch_alter_table("tokenizer", schema=None) as batch_op:
        batch_op.add_column(sa.Column("chat_template", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tokenizer", schema=None) as batch_op:
        batch_op.drop_column("chat_template")
    with op.batch_alter_table("rollout", schema=None) as batch_op:
        batch_op.drop_column("advantage_estimator")
        batch_op.drop_column("advantage")
