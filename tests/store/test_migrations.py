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
