"""The quarantine: every rejected record, kept with its file, line, field, error and raw text."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from app.db.engine import insert_for
from ingest.errors import RecordError

Q = models.Quarantine.__table__


HTTP = "http"  # `source` of records sent over HTTP: `http:<token name>` (http_source)


def http_source(token_name: str | None) -> str:
    """The `source` of a record sent to `POST /api/v1/ingest` or `/v1/traces`: `http:<token
    name>` (the token's name, app.deps.token_label), or `http` when no token was given."""
    return f"{HTTP}:{token_name}" if token_name else HTTP


def with_source(context: dict | None, source: str | None, *, run: str | None = None) -> dict | None:
    """A quarantine context (`IngestContext` as a dict, or None) with where its records came from
    (`source`: a file's path, or `http_source(...)`) and, for input that has no IngestContext
    (HTTP), the run given: `quarantine_many` keeps both in their own columns."""
    if source is None and run is None:
        return context
    return {**(context or {}), "source": source, **({"run": run} if run is not None else {})}


def _split(context: dict | None) -> tuple[dict | None, str | None, str | None]:
    """(the IngestContext to keep, or None when there is none; source; run given)."""
    if not context:
        return None, None, None
    ctx = dict(context)
    source = ctx.pop("source", None)
    run = ctx.get("run")
    return (ctx if "cwd" in ctx else None), source, run


def _row(err: RecordError, context: dict | None, source: str | None, run: str | None, now) -> dict:
    raw = err.raw or ""
    key = getattr(err, "key", None)
    # a keyed record (an OTLP trace) is one entry whatever it is rejected for: known by its key
    sha = (hashlib.sha256(b"key\0" + key.encode("utf-8", "replace")).hexdigest() if key is not None else
           hashlib.sha256(raw.encode("utf-8", "replace") + str(err).encode()).hexdigest())
    return dict(source_file=err.file, line=err.line, field=err.field, error=err.message,
                raw=raw[:4096], raw_sha256=sha, first_seen=now, last_seen=now, context=context,
                run_id=(getattr(err, "run", None) or run),
                # `err.source`: one rejection's own (the OTLP receiver's traces, each sent by its token)
                source=getattr(err, "source", None) or source or err.file)


def quarantine_many(conn: sa.Connection, errors: list[RecordError], *, context: dict | None = None) -> int:
    """Record rejected records with `context` (how the input was read: `IngestContext` as a
    dict, or None; `with_source` adds where it came from and the run given). A record is known
    by its file and line (line None: the whole file): a new rejection of it replaces the entry
    an earlier read left (the latest error wins; a retry or a worker and a CLI reading the same
    file leave one entry, not one per message), and the same rejection again moves its
    `last_seen` on (and its `source`, where it came from this time). Several rejections of one
    line in one call (a line holding several records) are all kept. A record with a key
    (`RecordError.key`: an OTLP trace, `/v1/traces`) is known by its file and key instead
    (`_quarantine_keyed`). One query for what is there, one delete, one update, one insert.
    Returns how many entries were written new."""
    ctx, source, run = _split(context)
    now = models.utcnow()
    rows: dict[tuple, dict] = {}
    keyed: dict[tuple, dict] = {}
    for err in errors:
        row = _row(err, ctx, source, run, now)
        if getattr(err, "key", None) is not None:
            keyed[(row["source_file"], row["line"], row["raw_sha256"])] = row  # the latest rejection wins
        else:
            rows.setdefault((row["source_file"], row["line"], row["raw_sha256"]), row)
    written = _quarantine_keyed(conn, keyed) if keyed else 0
    if not rows:
        return written
    lines = sorted({(f, n) for f, n, _ in rows if n is not None})
    whole = sorted({f for f, n, _ in rows if n is None})
    where = []
    if lines:
        where.append(sa.tuple_(Q.c.source_file, Q.c.line).in_(lines))
    if whole:
        where.append(sa.and_(Q.c.source_file.in_(whole), Q.c.line.is_(None)))
    stale, again = [], []
    for pk, *key in conn.execute(sa.select(Q.c.pk, Q.c.source_file, Q.c.line, Q.c.raw_sha256).where(sa.or_(*where))):
        if rows.pop(tuple(key), None) is None:
            stale.append(pk)  # an earlier rejection of the same file and line: replaced
        else:
            again.append(pk)  # the same rejection again: seen now
    if stale:
        conn.execute(Q.delete().where(Q.c.pk.in_(stale)))
    if again:
        seen = dict(last_seen=now, **({"source": source} if source else {}), **({"run_id": run} if run else {}))
        conn.execute(Q.update().where(Q.c.pk.in_(again)).values(**seen))
    if rows:
        # ON CONFLICT: another writer may quarantine the same record at the same moment
        conn.execute(insert_for(conn, Q).on_conflict_do_nothing(), list(rows.values()))
    return len(rows) + written


def _quarantine_keyed(conn: sa.Connection, rows: dict[tuple, dict]) -> int:
    """Record keyed rejections (`RecordError.key`, an OTLP trace id: many records share a file and
    have no line): one entry per key, a new rejection of the same key replacing its error, field,
    raw text and run in place (`first_seen` kept); other entries of the file are left alone.
    Returns how many were written new."""
    found = {(f, h): pk for pk, f, h in conn.execute(sa.select(Q.c.pk, Q.c.source_file, Q.c.raw_sha256).where(
        sa.tuple_(Q.c.source_file, Q.c.raw_sha256).in_(sorted({(f, h) for f, _, h in rows}))))}
    cols = ("field", "error", "raw", "last_seen", "run_id", "source")
    again = [dict(b_pk=found[(f, h)], **{f"b_{k}": r[k] for k in cols})
             for (f, _, h), r in rows.items() if (f, h) in found]
    if again:
        conn.execute(Q.update().where(Q.c.pk == sa.bindparam("b_pk")).values(
            **{k: sa.bindparam(f"b_{k}") for k in cols}), again)
    new = [r for (f, _, h), r in rows.items() if (f, h) not in found]
    if new:
        conn.execute(insert_for(conn, Q).on_conflict_do_nothing(), new)
    return len(new)


def clear_landed(conn: sa.Connection, rows: list[dict[str, Any]]) -> int:
    """Delete the quarantine entries of records that now landed (`rows`: summary rows written,
    with `source_file` and `source_line`; same file and line: the record was fixed and
    re-ingested); returns how many."""
    keys = sorted({(r["source_file"], r["source_line"]) for r in rows
                   if r["source_file"] is not None and r["source_line"] is not None})
    if not keys:
        return 0
    return conn.execute(Q.delete().where(sa.tuple_(Q.c.source_file, Q.c.line).in_(keys))).rowcount or 0


def files_with_entries(conn: sa.Connection, prepared: list, errors: list[RecordError], checked: set[str],
                       found: set[str]) -> set[str]:
    """The source files of a batch's rollouts (`Prepared`) and rejections that have quarantine entries
    (from before this batch), looked up once per file per call (so a batch of an unquarantined
    file spends no statement on clearing)."""
    new = ({p.summary["source_file"] for p in prepared if p.summary["source_file"]}
           | {e.file for e in errors if e.file}) - checked
    if new:
        found |= set(conn.execute(sa.select(Q.c.source_file).where(Q.c.source_file.in_(sorted(new))).distinct())
                     .scalars())
        checked |= new
    return found


def clear_whole_file(conn: sa.Connection, name: str, *, before) -> int:
    """Delete the whole-file entries (line None) of the file `name` not seen since `before` (a
    UTC datetime taken when the file began to be read record by record): its records have each
    landed or been quarantined by line since, so such an entry says nothing more (one that read
    wrote stays). Returns how many."""
    return conn.execute(Q.delete().where(Q.c.source_file == name, Q.c.line.is_(None),
                                         Q.c.last_seen < before)).rowcount or 0


def clear_unseen(conn: sa.Connection, name: str, *, since) -> int:
    """After a read of the whole file `name` that began at `since` (UTC): delete its entries that
    read did not reject again (`last_seen` before `since`), whole-file and by line alike: the
    record is no longer in the file (its bad line deleted, a torn tail completed, the file
    rewritten). Call it only for a read that covered the whole file, from its first byte to its
    end: a read of a stretch says nothing of the lines before it. Returns how many."""
    return conn.execute(Q.delete().where(Q.c.source_file == name, Q.c.last_seen < since)).rowcount or 0


def has_entries(conn: sa.Connection, name: str) -> bool:
    """Whether the file `name` has quarantine entries (one index lookup)."""
    return conn.execute(sa.select(Q.c.pk).where(Q.c.source_file == name).limit(1)).first() is not None


def quarantine(conn: sa.Connection, err: RecordError) -> bool:
    """Record a rejected record once. Returns False when it was already quarantined."""
    return quarantine_many(conn, [err]) == 1


@dataclass(frozen=True)
class FileEntries:
    """One file's quarantine entries, summed up: `file` (its records' source file), `records`,
    `runs` and `sources` (distinct, sorted; a run None is left out), `first_seen` (the earliest
    first rejection) and `last_seen` (the latest rejection), UTC datetimes."""

    file: str
    records: int
    runs: tuple[str, ...]
    sources: tuple[str, ...]
    first_seen: object
    last_seen: object


def quarantine_files(engine: Engine, *, file: str | None = None) -> list[FileEntries]:
    """The quarantine per file (of one file when given), most records first: one grouped query."""
    stmt = (sa.select(Q.c.source_file, Q.c.run_id, Q.c.source, sa.func.count(), sa.func.min(Q.c.first_seen),
                      sa.func.max(Q.c.last_seen)).group_by(Q.c.source_file, Q.c.run_id, Q.c.source))
    if file is not None:
        stmt = stmt.where(Q.c.source_file == file)
    acc: dict[str, list] = {}
    with engine.connect() as conn:
        for name, run, source, n, first, last in conn.execute(stmt):
            a = acc.setdefault(name, [0, set(), set(), first, last])
            a[0] += n
            if run is not None:
                a[1].add(run)
            if source is not None:
                a[2].add(source)
            a[3], a[4] = min(a[3], first), max(a[4], last)
    out = [FileEntries(name, n, tuple(sorted(runs)), tuple(sorted(sources)), first, last)
           for name, (n, runs, sources, first, last) in acc.items()]
    return sorted(out, key=lambda f: (-f.records, f.file))


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


@dataclass(frozen=True)
class RetryFile:
    """A file with quarantined records, to read again: `name` (what its records are known by:
    its path when first ingested), `context` (how it was read; None for entries from before
    contexts were kept), `path` (where its bytes are now: `name`, or for a spool file renamed
    since, its current path; relative to `context.cwd`), `gone` (why it cannot be read, or None)."""

    name: str
    context: IngestContext | None
    path: str | None
    gone: str | None = None


def files_to_retry(engine: Engine) -> list[RetryFile]:
    """Each file with quarantined records, with the context it was last ingested with and where
    it is now. A spool file (the worker's `spool_file` row of that first name) is followed to
    its current path when it was renamed (rotated), and is gone when it was deleted or another
    file now stands at its path; any other file is read at its name."""
    S = models.SpoolFile.__table__
    with engine.connect() as conn:
        rows = conn.execute(sa.select(Q.c.source_file, Q.c.context).order_by(Q.c.source_file, Q.c.pk.desc())).all()
        contexts: dict[str, IngestContext | None] = {}
        for name, ctx in rows:
            if name not in contexts or (contexts[name] is None and ctx):
                contexts[name] = IngestContext(**ctx) if ctx else None
        spooled: dict[str, object] = {}
        names = sorted(contexts)
        for start in range(0, len(names), 500):
            for r in conn.execute(sa.select(S.c.name, S.c.path, S.c.device, S.c.inode, S.c.status)
                                  .where(S.c.name.in_(names[start:start + 500])).order_by(S.c.pk)):
                spooled.setdefault(r.name, r)  # (older databases may hold two files of one name: the first)
    out = []
    for name, ctx in contexts.items():
        cwd = Path(ctx.cwd) if ctx else Path.cwd()
        spool = spooled.get(name)
        if spool is None:
            out.append(RetryFile(name, ctx, name, None if (cwd / name).is_file() else f"{name}: no longer readable"))
            continue
        if spool.status == "gone":
            out.append(RetryFile(name, ctx, None, f"{name}: the spool file was deleted (last at {spool.path})"))
            continue
        try:
            st = (cwd / spool.path).stat()
            same = (st.st_dev, st.st_ino) == (spool.device, spool.inode)
        except OSError:
            same = False
        out.append(RetryFile(name, ctx, spool.path, None) if same else
                   RetryFile(name, ctx, None, f"{name}: the spool file is no longer at {spool.path}"))
    return out
