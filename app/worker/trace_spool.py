"""The `/v1/traces` receiver's spool: spans answered 200 survive a SIGKILL of the server.

The same mechanism as the ingest worker's spool (app/worker/spool.py, the `spool_file` table):
spans are appended to a file before the request is answered, and the file's byte offset moves
in the transaction that writes the rows they became. Here a file holds one trace
(`<trace id>.jsonl`, one line per request that carried spans of it: an OTLP/JSON
`ExportTraceServiceRequest`, `ingest/otel/wire.py`), because traces finish in any order; its row has
`spool = "otlp"`.

- `append` writes and fsyncs the lines; the receiver answers 200 after it returns.
- `pending` gives, at start-up, every trace whose file holds bytes past its committed offset:
  the assembler (ingest/otel/assembler.py) is rebuilt from them. A last line cut short by a
  crash was never answered 200: it is skipped when read, and the next append starts a new line.
- `read` gives all the spans of a trace's file: a finished trace is assembled from it, so spans
  that other server processes (`serve --workers N`) took for the same trace are in the rollout.
- `commit` writes a finished trace's rollout (or its quarantine record) and moves the offset to
  the end of the bytes it was assembled from, in one transaction, and only if the offset is still
  below that end (a compare-and-set on the row): each range is stored exactly once, across
  restarts and across server processes.
- `prune` removes files stored more than `keep` seconds ago (row first, then file, so an inode
  the filesystem reuses never meets a stale row).
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from app.db.engine import insert_for
from app.store.prepare import prepare_all
from app.store.write import StoreResult, write_in
from app.worker.spool_files import HEAD_BYTES, S, scan
from ingest.endings import normalise
from ingest.errors import RecordError
from ingest.otel.wire import OtlpError, SpanRecord, decode_json, encode_json
from ingest.schema import Rollout

OTLP = "otlp"  # spool_file.spool of the receiver's files


@dataclass
class Appended:
    """Where one request's spans of one trace landed: bytes [start, end) of its file."""

    trace_id: str
    start: int
    end: int


@dataclass
class Pending:
    """A trace to assemble again: all its spans, the end of the bytes read, and the file's mtime."""

    trace_id: str
    spans: list[SpanRecord]
    end: int
    mtime: float


class TraceSpool:
    """One folder of trace files and their `spool_file` rows."""

    def __init__(self, engine: Engine, folder: Path):
        self.engine, self.folder = engine, Path(folder)

    def path(self, trace_id: str) -> Path:
        return self.folder / f"{trace_id}.jsonl"

    def append(self, spans: list[SpanRecord]) -> list[Appended]:
        """Append the spans, one line per trace, and fsync before returning. Raises OSError."""
        by_trace: dict[str, list[SpanRecord]] = {}
        for s in spans:
            by_trace.setdefault(s.trace_id, []).append(s)
        if not by_trace:
            return []
        self.folder.mkdir(parents=True, exist_ok=True)
        out, created = [], False
        for tid, ss in by_trace.items():
            line = (json.dumps(encode_json(ss), separators=(",", ":")) + "\n").encode()
            fd = os.open(self.path(tid), os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                start = os.fstat(fd).st_size
                created |= start == 0
                if start and os.pread(fd, 1, start - 1) != b"\n":
                    line = b"\n" + line  # after a line torn by a crash: start a new one
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            out.append(Appended(tid, start, start + len(line)))
        if created:  # the new names must survive a crash too
            dfd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        return out

    def read(self, trace_id: str, end: int | None = None) -> tuple[list[SpanRecord], int]:
        """The spans in a trace's file (up to byte `end`), a resent span replacing its earlier
        copy, and the end of the last whole line read."""
        try:
            with self.path(trace_id).open("rb") as f:
                data = f.read() if end is None else f.read(end)
        except FileNotFoundError:
            return [], 0
        whole = data.rfind(b"\n") + 1
        spans: dict[str, SpanRecord] = {}
        for line in data[:whole].splitlines():
            if not line.strip():
                continue
            try:
                spans.update((s.span_id, s) for s in decode_json(line))
            except (OtlpError, ValueError):
                continue  # a line torn by a crash: it was never answered 200
        return list(spans.values()), whole

    def pending(self) -> Iterator[Pending]:
        """Every trace with bytes past its committed offset (or no row yet)."""
        if not self.folder.is_dir():
            return
        with self.engine.connect() as conn:
            rows = {(r.device, r.inode): r for r in conn.execute(sa.select(S).where(S.c.spool == OTLP))}
        for key, seen in scan([self.folder]).items():
            if seen.path.suffix != ".jsonl":
                continue
            row = rows.get(key)
            if row is not None and row.name == str(seen.path) and row.offset >= seen.size:
                continue
            spans, end = self.read(seen.path.stem)
            if spans:
                yield Pending(seen.path.stem, spans, end, seen.mtime)

    def commit(self, traces: list[tuple[str, Rollout | RecordError, int | None]]) -> StoreResult:
        """Store finished traces: (trace id, its rollout or rejection, end of the bytes it was
        assembled from, None when it never went through the spool). One transaction; a trace
        whose range is already committed is skipped. Raises the database's errors."""
        # final, as a reader's
        todo = [(tid, prepare_all([normalise(item) if isinstance(item, Rollout) else item]), end)
                for tid, item, end in traces]
        with self.engine.begin() as conn:
            prepared, rejected = [], []
            for tid, (p, r), end in todo:
                if end is None or self._advance(conn, tid, end):
                    prepared += p
                    rejected += r
            return write_in(conn, prepared, rejected)

    def _advance(self, conn: sa.Connection, trace_id: str, end: int) -> bool:
        """Move the trace file's offset to `end` unless it is there already (compare-and-set)."""
        path = self.path(trace_id)
        try:
            st = path.stat()
        except FileNotFoundError:
            return True  # pruned by another process after it stored: storing again changes nothing
        now = models.utcnow()
        with path.open("rb") as f:
            head = f.read(HEAD_BYTES)
        conn.execute(insert_for(conn, S).on_conflict_do_nothing(index_elements=["device", "inode"]),
                     dict(spool=OTLP, name=str(path), path=str(path), device=st.st_dev, inode=st.st_ino, head=head,
                          format=OTLP, offset=0, line=0, size=st.st_size, status="active", records=0, rejected=0,
                          grew_at=now, updated_at=now))
        moved = conn.execute(S.update().where(S.c.device == st.st_dev, S.c.inode == st.st_ino, S.c.spool == OTLP,
                                              S.c.offset < end)
                             # one trace per file: a late span stores it again, still one record
                             .values(offset=end, size=st.st_size, status="done", records=1,
                                     updated_at=now))
        return moved.rowcount == 1

    def prune(self, keep: float) -> int:
        """Delete the files of traces stored (offset at the end) more than `keep` seconds ago."""
        if not self.folder.is_dir():
            return 0
        cutoff = time.time() - keep
        with self.engine.connect() as conn:
            rows = {(r.device, r.inode): r for r in conn.execute(sa.select(S).where(S.c.spool == OTLP))}
        n = 0
        for key, seen in scan([self.folder]).items():
            row = rows.get(key)
            if row is None or row.offset < seen.size or seen.mtime > cutoff:
                continue
            with self.engine.begin() as conn:
                gone = conn.execute(S.delete().where(S.c.pk == row.pk, S.c.offset >= seen.size)).rowcount
            if gone:
                seen.path.unlink(missing_ok=True)
                n += 1
        return n
