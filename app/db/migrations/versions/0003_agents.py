"""node.tool_name: the tool a result names, for pairing results that carry no call id

Revision ID: 0003_agents
Revises: 0003_webcore
Create Date: 2026-11-30 14:15:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0003_agents'
down_revision = '0003_webcore'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('node', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tool_name', sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('node', schema=None) as batch_op:
        batch_op.drop_column('tool_name')
