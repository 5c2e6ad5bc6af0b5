"""The quarantine: every rejected record, kept with its file, line, field, error and raw text."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from app.db.engine import insert_for
from ingest.source import RecordError

Q = models.Quarantine.__table__


def _row(err: RecordError, context: dict | None = None) -> dict:
    raw = err.raw or ""
    sha = hashlib.sha256(raw.encode("utf-8", "replace") + str(err).encode()).hexdigest()
    return dict(source_file=err.file, line=err.line, field=err.field, error=err.message,
                raw=raw[:4096], raw_sha256=sha, created_at=models.utcnow(), context=context)


def quarantine_many(conn: sa.Connection, errors: list[RecordError], *, context: dict | None = None) -> int:
    """Record rejected records, each once (by file, line and content), with `context` (how the
    input was read: `IngestContext` as a dict, or None): one query for what is already there,
    one insert for the rest. Returns how many were new."""
    rows: dict[tuple, dict] = {}
    for err in errors:
        row = _row(err, context)
        rows.setdefault((row["source_file"], row["line"], row["raw_sha256"]), row)
    if not rows:
        return 0
    have = conn.execute(sa.select(Q.c.source_file, Q.c.line, Q.c.raw_sha256)
                        .where(Q.c.raw_sha256.in_(sorted({k[2] for k in rows}))))
    for key in have:
        rows.pop(tuple(key), None)
    if rows:
        # ON CONFLICT: another writer may quarantine the same record at the same moment
        conn.execute(insert_for(conn, Q).on_conflict_do_nothing(), list(rows.values()))
    return len(rows)


def quarantine(conn: sa.Connection, err: RecordError) -> bool:
    """Record a rejected record once. Returns False when it was already quarantined."""
    return quarantine_many(conn, [err]) == 1


def quarantine_counts(engine: Engine, *, file: str | None = None) -> list[tuple[str, int]]:
    """(file, number of quarantined records) per file, most first."""
    stmt = sa.select(Q.c.source_file, sa.func.count()).group_by(Q.c.source_file)
    if file is not None:
        stmt = stmt.where(Q.c.source_file == file)
    with engine.connect() as conn:
        return sorted(((f, n) for f, n in conn.execute(stmt)), key=lambda x: (-x[1], x[0]))


def clear_quarantine(engine: Engine, *, file: str | None = None) -> int:
    """Delete quarantined records (of one file, or all); returns how many."""
    stmt = Q.delete()
    if file is not None:
        stmt = stmt.where(Q.c.source_file == file)
    with engine.begin() as conn:
        return conn.execute(stmt).rowcount


@dataclass(frozen=True)
class IngestContext:
    """How a file was ingested, kept with its quarantined records so that `--retry-quarantined`
    reads it again the same way from any folder: `cwd` (the working folder its path is relative
    to), `run`/`step`/`format` (the options given, None when not), `root` (the folder its missing
    rollout ids were derived from, absolute)."""

    cwd: str
    run: str | None = None
    step: int | None = None
    format: str | None = None
    root: str | None = None


def files_to_retry(engine: Engine) -> list[tuple[str, IngestContext | None]]:
    """Each file with quarantined records, as it was named, with the context it was last
    ingested with (None for records quarantined before contexts were kept)."""
    with engine.connect() as conn:
        rows = conn.execute(sa.select(Q.c.source_file, Q.c.context).order_by(Q.c.source_file, Q.c.pk.desc())).all()
    out: dict[str, IngestContext | None] = {}
    for name, ctx in rows:
        if name not in out or (out[name] is None and ctx):
            out[name] = IngestContext(**ctx) if ctx else None
    return list(out.items())
