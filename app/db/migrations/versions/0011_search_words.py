"""search: Postgres indexes words written inside markup and paths, as SQLite's FTS5 does

`to_tsvector('simple', text)` gives `<script>` and `</b>` to its tag token type, which no
configuration indexes, and keeps `/usr/bin/x` whole: a tool output's `<script>` could not be
found by `script` on Postgres while SQLite's unicode61 tokenizer (which splits on every
non-word character) finds it. The stored column now reads the text with `<`, `>`, `/` and `&`
as spaces, so both databases index the same words.

Revision ID: 0011_search_words
Revises: 0010_rollup_checks
"""
from alembic import op


revision = "0011_search_words"
down_revision = "0010_rollup_checks"
branch_labels = None
depends_on = None

NEW = "to_tsvector('simple', translate(text, '<>/&', '    '))"
OLD = "to_tsvector('simple', text)"


def _recreate(expression: str) -> None:
    op.execute("DROP INDEX IF EXISTS ix_search_doc_tsv")
    op.execute("ALTER TABLE search_doc DROP COLUMN tsv")
    op.execute(f"ALTER TABLE search_doc ADD COLUMN tsv tsvector GENERATED ALWAYS AS ({expression}) STORED")
    op.execute("CREATE INDEX ix_search_doc_tsv ON search_doc USING gin (tsv)")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _recreate(NEW)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _recreate(OLD)
