"""The quarantine: every rejected record, kept with its file, line, field, error and raw text."""
from __future__ import annotations

import hashlib

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from ingest.source import RecordError


def quarantine(conn: sa.Connection, err: RecordError) -> bool:
    """Record a rejected record once. Returns False when it was already quarantined."""
    q = models.Quarantine.__table__
    raw = err.raw or ""
    sha = hashlib.sha256(raw.encode("utf-8", "replace") + str(err).encode()).hexdigest()
    hit = conn.execute(sa.select(q.c.pk).where(q.c.source_file == err.file, q.c.line == err.line,
                                               q.c.raw_sha256 == sha)).first()
    if hit is not None:
        return False
    conn.execute(q.insert().values(source_file=err.file, line=err.line, field=err.field, error=err.message,
                                   raw=raw[:4096], raw_sha256=sha, created_at=models.utcnow()))
    return True


def quarantine_counts(engine: Engine, *, file: str | None = None) -> list[tuple[str, int]]:
    """(file, number of quarantined records) per file, most first."""
    q = models.Quarantine.__table__
    stmt = sa.select(q.c.source_file, sa.func.count()).group_by(q.c.source_file)
    if file is not None:
        stmt = stmt.where(q.c.source_file == file)
    with engine.connect() as conn:
        return sorted(((f, n) for f, n in conn.execute(stmt)), key=lambda x: (-x[1], x[0]))


def clear_quarantine(engine: Engine, *, file: str | None = None) -> int:
    """Delete quarantined records (of one file, or all); returns how many."""
    q = models.Quarantine.__table__
    stmt = q.delete()
    if file is not None:
        stmt = stmt.where(q.c.source_file == file)
    with engine.begin() as conn:
        return conn.execute(stmt).rowcount
