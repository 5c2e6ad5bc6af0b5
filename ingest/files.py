"""Files → readers, with no database: walk paths, detect each file's reader, stream its records.

The service (`app/worker/sync.py`) stores what this yields; a notebook can use it directly.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ingest.endings import normalise
from ingest.errors import RecordError
from ingest.formats.base import ReadContext, Reader
from ingest.schema import Rollout
from ingest.source import Source

TRACE_SUFFIXES = {".json", ".jsonl", ".csv", ".ndjson", ".gz", ".parquet"}


def walk(paths: list[Path]) -> list[tuple[Path, bool]]:
    """(file, given explicitly) for each path; folders are walked recursively in sorted order,
    skipping hidden files."""
    out = []
    for p in paths:
        if p.is_dir():
            out += [(f, False) for f in sorted(p.rglob("*")) if f.is_file() and not any(
                part.startswith(".") for part in f.relative_to(p).parts)]
        else:
            out.append((p, True))
    return out


def read_records(reader: Reader, source: Source, ctx: ReadContext,
                 errors: list[RecordError]) -> Iterator[Rollout | RecordError]:
    """The reader's records, final: each rollout with the context's step filled in and its ending
    normalised (ingest/endings.py `normalise`), each rejection given its raw line; rejections (and
    a rollout whose ending cannot be normalised) are also appended to `errors`."""
    for item in reader.read(source, ctx):
        if isinstance(item, RecordError):
            if item.raw is None and item.line is not None and item.line == source.last_line:
                item.raw = source.last_raw
            errors.append(item)
        else:
            if ctx.step is not None and item.step is None:
                item.step = ctx.step
            try:
                normalise(item)
            except Exception as exc:  # noqa: BLE001 - one rollout must not cost its neighbours
                item = RecordError(str(item.source.get("file") or source.name), item.source.get("line"), None,
                                   f"cannot normalise the ending of rollout {item.id!r}: {type(exc).__name__}: {exc}")
                errors.append(item)
        yield item
