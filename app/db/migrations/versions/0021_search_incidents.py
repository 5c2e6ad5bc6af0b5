"""search: index incidents (rollout errors, endings, tool errors and output), head and tail

`search_doc` is made again with what a search filters on and says: `kind` (message,
tool_output, tool_error, rollout_error, ending), the message's `role`, `truncated` (a long text
is indexed by its head and its tail, app.store.search.HEAD_TAIL_CHARS characters each), and a
nullable `node_idx` (a rollout error or an ending belongs to no message). The SQLite FTS5 index
and the Postgres stored tsvector column with its GIN index are made as before (0007, 0009,
0011), then every stored rollout is indexed again from its node rows and its envelope
(app.store.search.rebuild, as `rollscope rebuild-analytics` does).

Revision ID: 0021_search_incidents
Revises: 0020_reward_components
"""
from alembic import op
import sqlalchemy as sa
import sqlmodel

from app.db import derived


revision = "0021_search_incidents"
down_revision = "0020_reward_components"
branch_labels = None
depends_on = None

TSV = "to_tsvector('simple', translate(text, '<>/&', '    '))"
SQLITE_FTS = [
    "CREATE VIRTUAL TABLE search_fts USING fts5(text, content='search_doc', content_rowid='pk', "
    "tokenize='unicode61 remove_diacritics 2')",
    "CREATE TRIGGER search_doc_ad AFTER DELETE ON search_doc BEGIN "
    "INSERT INTO search_fts(search_fts, rowid, text) VALUES ('delete', old.pk, old.text); END",
]


def _drop() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER IF EXISTS search_doc_ad")
        op.execute("DROP TABLE IF EXISTS search_fts")
    else:
        op.execute("DROP INDEX IF EXISTS ix_search_doc_tsv")
    op.drop_index("ix_search_doc_rollout_pk", table_name="search_doc")
    op.drop_table("search_doc")


def _create(*columns: sa.Column) -> None:
    op.create_table("search_doc",
        sa.Column("pk", sa.Integer(), nullable=False),
        sa.Column("rollout_pk", sa.Integer(), nullable=False),
        sa.Column("run_id", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        *columns,
        sa.Column("text", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["rollout_pk"], ["rollout.pk"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("pk"))
    op.create_index("ix_search_doc_rollout_pk", "search_doc", ["rollout_pk"], unique=False)
    if op.get_bind().dialect.name == "sqlite":
        for stmt in SQLITE_FTS:
            op.execute(stmt)
    else:
        op.execute(f"ALTER TABLE search_doc ADD COLUMN tsv tsvector GENERATED ALWAYS AS ({TSV}) STORED")
        op.execute("CREATE INDEX ix_search_doc_tsv ON search_doc USING gin (tsv)")


def upgrade() -> None:
    _drop()
    _create(sa.Column("node_idx", sa.Integer(), nullable=True),
            sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
            sa.Column("role", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=True),
            sa.Column("truncated", sa.Boolean(), nullable=False))
    derived.stale("search")  # indexes what is stored, at the head, as `rollscope rebuild-analytics` does


def downgrade() -> None:
    """Back to one document per message with text, its first 100,000 characters."""
    _drop()
    _create(sa.Column("node_idx", sa.Integer(), nullable=False))
    bind = op.get_bind()
    node = sa.table("node", sa.column("rollout_pk", sa.Integer), sa.column("idx", sa.Integer),
                    sa.column("message", sa.JSON))
    rollout = sa.table("rollout", sa.column("pk", sa.Integer), sa.column("run_id", sa.String))
    from app.store.search import message_text

    rows = []
    for pk, run_id, idx, message in bind.execute(sa.select(node.c.rollout_pk, rollout.c.run_id, node.c.idx,
                                                           node.c.message).join(rollout, rollout.c.pk == node.c.rollout_pk)):
        text = message_text(message if isinstance(message, dict) else None)[:100_000].replace("\x00", " ")
        if text.strip():
            rows.append({"rollout_pk": pk, "run_id": run_id, "node_idx": idx, "text": text})
    doc = sa.table("search_doc", sa.column("rollout_pk", sa.Integer), sa.column("run_id", sa.String),
                   sa.column("node_idx", sa.Integer), sa.column("text", sa.Text))
    if rows:
        bind.execute(doc.insert(), rows)
        if bind.dialect.name == "sqlite":
            bind.exec_driver_sql("INSERT INTO search_fts(rowid, text) SELECT pk, text FROM search_doc")
