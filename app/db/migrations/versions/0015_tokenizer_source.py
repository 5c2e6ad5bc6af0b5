"""tokenizer: what the checks need beside the vocabulary (the tokenizer.json encoder, the config's
special tokens, the --added-token entries), so `rollscope recheck` builds the same check context
as ingest did (`app.store.tokenizers.run_context`). Tokenizers stored before have none: their
runs are re-checked with the vocabulary and chat template alone.

Revision ID: 0015_tokenizer_source
Revises: 0014_unparsed_tool_call
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql


revision = "0015_tokenizer_source"
down_revision = "0014_unparsed_tool_call"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokenizer", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source", sa.LargeBinary().with_variant(postgresql.BYTEA(), "postgresql"),
                                      nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tokenizer", schema=None) as batch_op:
        batch_op.drop_column("source")
