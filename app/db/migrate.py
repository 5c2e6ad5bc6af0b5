"""Bring a database to the latest schema with Alembic (the one way the schema is created).

Several processes may start at once (workers, the dashboard, an ingest): the upgrade holds a
lock for its whole transaction, a Postgres advisory lock or SQLite's write lock, so exactly one
of them migrates and the others then find the schema current.

A database already at the head is recognised without Alembic (`at_head`: one SELECT of
`alembic_version` against the heads read from the versions files' `revision` / `down_revision`
lines), so a command's start-up does not import Alembic or build its environment (about 0.3 s
here) when there is nothing to migrate.
"""
from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Engine

if TYPE_CHECKING:
    from alembic.config import Config

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


_ASSIGNED = re.compile(r"^(revision|down_revision)\s*(?::[^=]*)?=\s*(.+?)\s*$", re.M)


@lru_cache(maxsize=1)
def heads() -> frozenset[str]:
    """The head revisions of the migrations (normally one): the revisions no other revision names
    as its `down_revision`, read from the `revision = "..."` / `down_revision = ...` lines of
    migrations/versions/*.py (literals: a string, None, or a tuple of strings for a merge)."""
    revisions, parents = set(), set()
    for path in (MIGRATIONS / "versions").glob("*.py"):
        found = dict(_ASSIGNED.findall(path.read_text(encoding="utf-8")))
        if "revision" not in found:
            continue
        revisions.add(ast.literal_eval(found["revision"]))
        down = ast.literal_eval(found.get("down_revision", "None"))
        parents.update(down if isinstance(down, tuple | list) else [down] if down else [])
    return frozenset(revisions - parents)


def at_head(engine: Engine) -> bool:
    """True when the database's `alembic_version` holds exactly the migrations' heads (`heads`):
    nothing to upgrade. False when it holds anything else, or has no such table yet."""
    try:
        with engine.connect() as conn:
            stored = set(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())
    except sa.exc.OperationalError:
        return False  # no alembic_version (a new database)
    except sa.exc.ProgrammingError:
        return False  # the same on Postgres (the failed transaction ends with the connection)
    return stored == heads()


def alembic_config() -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def upgrade(engine: Engine) -> None:
    """`alembic upgrade head` on `engine`, serialized across processes. Idempotent; a database at
    the head already costs one SELECT (`at_head`)."""
    if at_head(engine):
        return
    from alembic import command

    from app.db.engine import make_engine

    cfg = alembic_config()
    own = engine.dialect.name == "sqlite"
    if own:
        engine = make_engine(engine.url.render_as_string(hide_password=False), writer=True)
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": LOCK_KEY})
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
    finally:
        if own:  # its connections closed and its WAL checkpoint thread ended (app/db/checkpoint.py)
            engine.dispose()
