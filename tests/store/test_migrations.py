"""Alembic is the one way the schema is made: after `upgrade head` the database matches the
models exactly (no drift), on SQLite and on Postgres, and upgrading twice is harmless."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

import app.db.models  # noqa: F401
from app.db.engine import make_engine
from app.db.migrate import include_name, upgrade


def test_migrations_match_models(empty_db_url):
    engine = make_engine(empty_db_url, writer=True)
    upgrade(engine)
    upgrade(engine)  # again: idempotent
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"include_name": include_name}),
                                SQLModel.metadata)
    assert diff == []
    engine.dispose()


def test_0016_keeps_quarantine_entries_and_their_time(empty_db_url):
    """Entries from before 0016 keep their time as first and last seen; spool files gain no notice."""
    import sqlalchemy as sa
    from alembic import command

    from app.db.migrate import alembic_config

    engine = make_engine(empty_db_url, writer=True)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0015_tokenizer_source")
        conn.execute(sa.text("INSERT INTO quarantine (source_file, line, error, raw_sha256, created_at) "
                             "VALUES ('old.jsonl', 3, 'bad', 'x', '2026-01-02 03:04:05')"))
    upgrade(engine)
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT first_seen, last_seen, run_id, source FROM quarantine")).one()
    assert row.first_seen == row.last_seen and str(row.first_seen).startswith("2026-01-02 03:04:05")
    assert (row.run_id, row.source) == (None, None)
    engine.dispose()
