"""training-step analytics: rollout metrics, step and task rollups, full-text search

Revision ID: 0007_analytics
Revises: 0006_quarantine_context

- `rollout` gains the per-rollout numbers of ingest/metrics.py and indexes for the list's sort
  columns and prefix filters;
- `step_rollup` and `task_rollup` hold per-step aggregates (app/store/rollups.py);
- `search_doc` holds each message's searchable text; SQLite indexes it with an FTS5 table kept by
  triggers (the external-content recipe of https://sqlite.org/fts5.html §4.4.3), Postgres with a
  stored generated column `tsv` = to_tsvector('simple', text) and a GIN index on it.

Existing rollouts get their rollups computed by 0010_rollup_checks; their new metric columns stay at their
defaults and their messages unsearchable until `rollscope rebuild-analytics` re-indexes
them (it recomputes rollups and the search index from what is stored).
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel
from sqlalchemy.dialects import postgresql


revision = '0007_analytics'
down_revision = '0006_quarantine_context'
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    with op.batch_alter_table('rollout', schema=None) as b:
        b.add_column(sa.Column('n_response_tokens', sa.Integer(), nullable=False, server_default='0'))
        b.add_column(sa.Column('n_tool_errors', sa.Integer(), nullable=False, server_default='0'))
        b.add_column(sa.Column('model_latency', sa.Float(), nullable=True))
        b.add_column(sa.Column('tool_latency', sa.Float(), nullable=True))
        b.add_column(sa.Column('staleness', sa.Integer(), nullable=True))
        b.add_column(sa.Column('mismatch_tokens', sa.Integer(), nullable=False, server_default='0'))
        b.add_column(sa.Column('mismatch_abs_sum', sa.Float(), nullable=True))
        b.add_column(sa.Column('mismatch_abs_max', sa.Float(), nullable=True))
        b.add_column(sa.Column('mismatch_out_of_range', sa.Integer(), nullable=False, server_default='0'))
        b.add_column(sa.Column('trainer_filtered', sqlmodel.sql.sqltypes.AutoString(), nullable=True))
        b.create_index('ix_rollout_run_task', ['run_id', 'task_key', 'ending'], unique=False)
        b.create_index('ix_rollout_run_reward', ['run_id', 'reward'], unique=False)
        b.create_index('ix_rollout_run_tokens', ['run_id', 'n_tokens'], unique=False)
        b.create_index('ix_rollout_run_turns', ['run_id', 'n_turns'], unique=False)

    op.create_table('step_rollup',
        sa.Column('pk', sa.Integer(), nullable=False),
        sa.Column('run_id', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column('step', sa.Integer(), nullable=True),
        sa.Column('rollouts', sa.Integer(), nullable=False),
        sa.Column('mean_reward', sa.Float(), nullable=True),
        sa.Column('mean_reward_no_errors', sa.Float(), nullable=True),
        sa.Column('scored', sa.Integer(), nullable=False),
        sa.Column('excluded', sa.Integer(), nullable=False),
        sa.Column('stats', JSON, nullable=True),
        sa.ForeignKeyConstraint(['run_id'], ['run.id'], ),
        sa.PrimaryKeyConstraint('pk'))
    op.create_index('ix_step_rollup_run_step', 'step_rollup', ['run_id', 'step'], unique=False)
    op.create_index('uq_step_rollup_key', 'step_rollup', ['run_id', sa.text('coalesce(step, -2147483648)')], unique=True)

    op.create_table('task_rollup',
        sa.Column('pk', sa.Integer(), nullable=False),
        sa.Column('run_id', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column('step', sa.Integer(), nullable=True),
        sa.Column('task_key', sqlmodel.sql.sqltypes.AutoString(length=500), nullable=False),
        sa.Column('rollouts', sa.Integer(), nullable=False),
        sa.Column('mean_reward', sa.Float(), nullable=True),
        sa.Column('mean_reward_no_errors', sa.Float(), nullable=True),
        sa.Column('scored', sa.Integer(), nullable=False),
        sa.Column('scored_no_errors', sa.Integer(), nullable=False),
        sa.Column('errors', sa.Integer(), nullable=False),
        sa.Column('endings', JSON, nullable=True),
        sa.ForeignKeyConstraint(['run_id'], ['run.id'], ),
        sa.PrimaryKeyConstraint('pk'))
    op.create_index('ix_task_rollup_run_step', 'task_rollup', ['run_id', 'step'], unique=False)
    op.create_index('ix_task_rollup_run_task', 'task_rollup', ['run_id', 'task_key', 'step', 'rollouts'], unique=False)
    op.create_index('uq_task_rollup_key', 'task_rollup', ['run_id', sa.text('coalesce(step, -2147483648)'), 'task_key'],
                    unique=True)

    op.create_table('search_doc',
        sa.Column('pk', sa.Integer(), nullable=False),
        sa.Column('rollout_pk', sa.Integer(), nullable=False),
        sa.Column('run_id', sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column('node_idx', sa.Integer(), nullable=False),
        sa.Column('text', sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(['rollout_pk'], ['rollout.pk'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('pk'))
    op.create_index(op.f('ix_search_doc_rollout_pk'), 'search_doc', ['rollout_pk'], unique=False)

    bind = op.get_bind()
    if bind.dialect.name == 'sqlite':
        for stmt in SQLITE_FTS:
            op.execute(stmt)
    else:
        # stored, so a query never recomputes it (a backwards scan for a rare word would, per row)
        op.execute("ALTER TABLE search_doc ADD COLUMN tsv tsvector "
                   "GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED")
        op.execute("CREATE INDEX ix_search_doc_tsv ON search_doc USING gin (tsv)")

    # Existing rollouts get their rollups at the head (0010 and later mark them stale,
    # app/db/derived.py: rollups.rebuild writes the tables of the newest schema).


SQLITE_FTS = [
    "CREATE VIRTUAL TABLE search_fts USING fts5(text, content='search_doc', content_rowid='pk', "
    "tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER search_doc_ai AFTER INSERT ON search_doc BEGIN "
    "INSERT INTO search_fts(rowid, text) VALUES (new.pk, new.text); END",
    "CREATE TRIGGER search_doc_ad AFTER DELETE ON search_doc BEGIN "
    "INSERT INTO search_fts(search_fts, rowid, text) VALUES ('delete', old.pk, old.text); END",
]


def downgrade() -> None:
    if op.get_bind().dialect.name == 'sqlite':
        op.execute("DROP TRIGGER IF EXISTS search_doc_ai")
        op.execute("DROP TRIGGER IF EXISTS search_doc_ad")
        op.execute("DROP TABLE IF EXISTS search_fts")
    op.drop_index(op.f('ix_search_doc_rollout_pk'), table_name='search_doc')
    op.drop_table('search_doc')
    op.drop_index('uq_task_rollup_key', table_name='task_rollup')
    op.drop_index('uq_step_rollup_key', table_name='step_rollup')
    op.drop_index('ix_task_rollup_run_task', table_name='task_rollup')
    op.drop_index('ix_task_rollup_run_step', table_name='task_rollup')
    op.drop_table('task_rollup')
    op.drop_index('ix_step_rollup_run_step', table_name='step_rollup')
    op.drop_table('step_rollup')
    with op.batch_alter_table('rollout', schema=None) as b:
        for ix in ('ix_rollout_run_turns', 'ix_rollout_run_tokens', 'ix_rollout_run_reward', 'ix_rollout_run_task'):
            b.drop_index(ix)
        for col in ('trainer_filtered', 'mismatch_out_of_range', 'mismatch_abs_max', 'mismatch_abs_sum',
                    'mismatch_tokens', 'staleness', 'tool_latency', 'model_latency', 'n_tool_errors',
                    'n_response_tokens'):
            b.drop_column(col)
