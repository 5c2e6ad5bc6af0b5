"""Alembic environment: target = the SQLModel tables in app/db/models.py."""
from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import app.db.models  # noqa: F401  (registers the tables)
from app.config import get_settings
from app.db import derived
from app.db.engine import make_engine
from app.db.migrate import include_name

target_metadata = SQLModel.metadata


def _migrate() -> None:
    """The migrations, then the derived tables they marked stale (app/db/derived.py), at the head."""
    context.run_migrations()
    migration = context.get_context()
    at_head = set(migration.get_current_heads()) == set(context.script.get_heads())
    derived.rebuild_stale(migration.connection, context.config.attributes, at_head)


def run() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True,
                          include_name=include_name)
        with context.begin_transaction():
            _migrate()
        return
    url = context.config.get_main_option("sqlalchemy.url") or get_settings().db.url
    engine = make_engine(url)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True,
                          include_name=include_name)
        with context.begin_transaction():
            _migrate()


run()
