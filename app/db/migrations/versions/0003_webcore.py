"""labels and notes on rollouts and steps, per token

Revision ID: 0003_webcore
Revises: 0004_checks
"""
from alembic import op
import sqlalchemy as sa


revision = '0003_webcore'
down_revision = '0004_checks'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'label',
        sa.Column('pk', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.String(length=200), nullable=False),
        sa.Column('rollout_id', sa.String(length=300), nullable=False),
        sa.Column('label', sa.String(length=100), nullable=False),
        sa.Column('author', sa.String(length=200), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('pk'),
        sa.UniqueConstraint('run_id', 'rollout_id', 'label', 'author', name='uq_label'),
    )
    op.create_index('ix_label_run_label', 'label', ['run_id', 'label'], unique=False)
    op.create_table(
        'note',
        sa.Column('pk', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.String(length=200), nullable=False),
        sa.Column('rollout_id', sa.String(length=300), nullable=False),
        sa.Column('step', sa.Integer(), nullable=False),
        sa.Column('author', sa.String(length=200), nullable=False),
        sa.Column('text', sa.String(), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('pk'),
        sa.UniqueConstraint('run_id', 'rollout_id', 'step', 'author', name='uq_note'),
    )
    op.create_index(op.f('ix_note_run_id'), 'note', ['run_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_note_run_id'), table_name='note')
    op.drop_table('note')
    op.drop_index('ix_label_run_label', table_name='label')
    op.drop_table('label')
