"""Bring a database to the latest schema with Alembic (the one way the schema is created).

Several processes may start at once (workers, the dashboard, an ingest): the upgrade holds a
lock for its whole transaction, a Postgres advisory lock or SQLite's write lock, so exactly one
of them migrates and the others then find the schema current.
"""
from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
LOCK_KEY = 0x526F6C6C73636F70  # "Rollscop": the advisory lock id for migrations


def include_name(name, type_, parent_names) -> bool:
    """Objects the models do not describe: SQLite's FTS5 index `search_fts` and its shadow
    tables, and Postgres's stored tsvector column `search_doc.tsv` with its GIN index
    `ix_search_doc_tsv` (migration 0007_analytics makes them; the models cannot describe a
    virtual table or a Postgres-only generated column portably)."""
    if type_ == "table" and name and name.startswith("search_fts"):
        return False
    if type_ == "column" and name == "tsv" and parent_names.get("table_name") == "search_doc":
        return False
    return not (type_ == "index" and name == "ix_search_doc_tsv")


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def upgrade(engine: Engine) -> None:
    """`alembic upgrade head` on `engine`, serialized across processes. Idempotent."""
    from app.db.engine import make_engine

    cfg = alembic_config()
    if engine.dialect.name == "sqlite":
        engine = make_engine(engine.url.render_as_string(hide_password=False), writer=True)
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK_KEY})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
