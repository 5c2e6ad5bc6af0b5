"""`rollscope ingest` of a big native JSONL file with parser processes beside the writer.

On a machine with two cores or more, `ingest_paths` (app/worker/sync.py) reads such a file in
stretches of whole lines cut into pieces (app/worker/parse.py `cut`); parser processes read,
check and prepare pieces (`parse_items`) while this process writes the batches before them, and
parses a piece nobody has started rather than wait (`Parsers.parsed`). What reaches the store is
what the reader would have yielded, in line order: rejections, records the store holds with these
very bytes (`Known`: a parser process asks the database itself, except a forked one on SQLite,
which reads every record in full: the store finds the unchanged ones by content hash), and
rollouts, prepared. So the batches, the decisions and the quarantine are those of the inline
path (tests/worker/test_pooled.py compares them); only where the CPU work runs changes.

Not pooled (read inline, as before): files under POOL_MIN_BYTES (1 MB where the processes are
forked, ready in milliseconds; 64 MB where they must be spawned: a spawned process costs a second
or more of CPU to start, measured here ready after 6-7 s and a loss for a 31 MB file on a machine
at load 8), other formats, gzip, zip members, decoded UTF-16, a renamed spool file, a run
checked against a tokenizer (the check context stays in this process), a caller's own `known`
lookup, and an in-memory database.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path

from sqlalchemy.engine import Engine

from app.worker.parse import KnownRef, Parsers, Piece, Stretch, cut, parse_items
from ingest.errors import RecordError
from ingest.files import read_records
from ingest.formats.base import ReadContext
from ingest.known import Known
from ingest.source import READ_BUFFER, Source

# smaller files are read inline (see above): by how the processes start (app/worker/parse.py
# `start_method`): forked, ready in milliseconds; spawned, after a second or more of imports
POOL_MIN_BYTES = {"fork": 1 << 20, "spawn": 64 << 20}
STRETCH_LINES, STRETCH_BYTES = 200, 16 << 20  # read from the file at once, then cut into pieces


def database_url(engine: Engine) -> str | None:
    """The URL a parser process reaches `engine`'s database at (to look known records up), or
    None when it cannot (an in-memory SQLite database)."""
    url = engine.url
    if url.get_backend_name() == "sqlite" and (url.database in (None, "", ":memory:")
                                               or url.database.startswith("file::memory:")):
        return None
    return url.render_as_string(hide_password=False)


def poolable(reader, source: Source, *, renamed: bool, method: str) -> bool:
    """Whether the file is read with parser processes (see the module's docstring) that start by
    `method` (`Parsers.start_method`: how they were, or would now be, started)."""
    return (reader.NAME == "native" and source.kind == "jsonl" and source.member is None and source.data is None
            and not source.gzip and source.file is None and source.decoded_from is None and not renamed
            and source.line_base == 0 and source.size >= POOL_MIN_BYTES[method])


def pooled_items(pool: Parsers, source: Source, ctx: ReadContext, errors: list[RecordError],
                 known_url: str | None) -> Iterator:
    """The records of `source` (a native JSONL file, `poolable`) as `read_records` yields them,
    in line order, parsed and prepared by `pool` and this process: RecordError (also appended to
    `errors`), `Known`, and (identity, Prepared or RecordError) for each rollout (app/store/write.py
    `store`). `known_url`: the database the parser processes look known records up in (None: every
    record read in full). Holds at most `pool.n` + 2 stretches."""
    child_ctx = replace(ctx, known=None, notes={})
    stretches = _stretches(source.disk)
    ahead: deque[Stretch] = deque()
    while True:
        while len(ahead) < pool.n + 2:
            got = next(stretches, None)
            if got is None:
                break
            data, start, line, n_lines = got
            # in pieces for the processes once they run; whole until then (a file the store holds
            # already is read with one lookup of known records per stretch, as inline)
            k = 2 * (pool.n + 1) if pool.started else 1
            ahead.append(Stretch((data, start, line), [
                Piece((part, source.path, at, before, child_ctx, known_url), fn=parse_items)
                for part, at, before in cut(data, start, line, n_lines, k)]))
        if not ahead:
            return
        pool.top_up(ahead)
        head = ahead.popleft()
        parsed = pool.parsed(head, ahead)
        if ahead and _mostly_new(parsed.items):
            pool.warm()  # (once) more of the file to read, and it is not known already: worth a process
        for item in parsed.items:
            if isinstance(item, KnownRef):
                yield Known(item.identity, item.raw_hash, item.source,
                            partial(_full, head.chunk, item.source["line"], source.path, child_ctx, errors))
                continue
            if isinstance(item, RecordError):
                errors.append(item)
            yield item
        source.position = head.chunk[1] + len(head.chunk[0])  # for progress bars


def _mostly_new(items: list) -> bool:
    """Whether most records of a stretch are rollouts to prepare (not known to the store: a
    re-ingest of unchanged data needs no parser process)."""
    new = sum(1 for item in items if isinstance(item, tuple))
    return new * 2 > len(items)


def _stretches(path: Path) -> Iterator[tuple[bytes, int, int, int]]:
    """(bytes, start byte, lines before, complete lines) of `path`, STRETCH_LINES lines or
    STRETCH_BYTES at a time; a last line without its newline ends the last stretch."""
    start = line = 0
    with path.open("rb", buffering=READ_BUFFER) as f:
        while True:
            lines, size = [], 0
            while len(lines) < STRETCH_LINES and size < STRETCH_BYTES:
                got = f.readline()
                if not got:
                    break
                lines.append(got)
                size += len(got)
            if not lines:
                return
            data = b"".join(lines)
            yield data, start, line, len(lines) - (not data.endswith(b"\n"))
            start, line = start + len(data), line + len(lines)


def _full(chunk: tuple[bytes, int, int], line: int, path: Path, ctx: ReadContext, errors: list[RecordError]):
    """The record on line `line` of a stretch (`chunk`: bytes, start, lines before) read in full,
    as `Known.full` gives it (the store asks when the record's identity was met earlier in the
    same ingest)."""
    data, _start, before = chunk
    raw = data.split(b"\n")[line - before - 1] + b"\n"
    source = Source(path, "jsonl", None, size=len(raw), data=raw, line_base=line - 1)
    from ingest.formats import native

    return next(iter(read_records(native, source, ctx, errors)))
