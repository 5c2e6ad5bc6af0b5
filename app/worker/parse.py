"""Parsing a stretch of a spool file into rows ready to write: in the worker's own process, or in
a pool of parser processes while the worker writes the stretch before it.

Reading, validating and preparing a rollout (endings normalised by the reader's output path,
ingest/files.py; then app.store.prepare: checks, hash, packed token arrays) is pure CPU work that
touches no database; writing it is mostly the database's own work. With `parsers` > 0 the worker
keeps that many processes parsing the next stretches of a file while it commits the current one,
so on a machine with two cores or more the two overlap. The offsets still move only in the
transaction that writes a stretch's rows, in file order (app/worker/spool.py), so exactly-once does
not depend on the pool: a parsed stretch that is never written is simply read again.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from app.store import gc_relaxed
from app.store.prepare import Prepared, prepare_or_error
from ingest.errors import RecordError
from ingest.files import read_records
from ingest.formats.base import ReadContext
from ingest.formats.registry import detect, explain, get
from ingest.source import Source


@dataclass
class Parsed:
    """A stretch parsed: `fmt` the reader that read it (None when nothing could be read),
    `prepared` its rollouts, `rejected` its records that cannot be ingested (line and byte named),
    `refused` why no reader knows these lines (the file is then refused whole)."""

    fmt: str | None
    prepared: list[Prepared] = field(default_factory=list)
    rejected: list[RecordError] = field(default_factory=list)
    refused: str | None = None


def parse_lines(data: bytes, name: str, start: int, line: int, fmt: str | None, root: Path | None) -> Parsed:
    """Complete JSONL lines `data` of the file `name`, beginning at byte `start` after `line`
    lines, read with the reader `fmt` (detected from the first line when None) and prepared
    (`Prepared.detached`: only rows and what a quarantine entry needs are kept, so a stretch is
    small to hold and to send from a parser process)."""
    source = Source(Path(name), "jsonl", None, size=len(data), data=data, line_base=line)
    source.first = next((v for _, v in source.lines() if isinstance(v, dict)), None)
    source.position, source.last_line, source.last_raw = 0, None, None
    reader = get(fmt) if fmt else (detect(source) if source.first is not None else None)
    if reader is None:
        if source.first is not None:  # lines of JSON, but no reader knows them
            return Parsed(None, refused=explain(source))
        # every line broken: each is reported by the native reader's line parser (the file's
        # format stays undecided)
        from ingest.formats import native as reader  # noqa: PLW0127
    else:
        fmt = reader.NAME
    errors: list[RecordError] = []
    prepared: list[Prepared] = []
    rejected: list[RecordError] = []
    for item in read_records(reader, source, ReadContext(root=root), errors):
        p = item if isinstance(item, RecordError) else prepare_or_error(item)
        if isinstance(p, RecordError):
            rejected.append(p)
        else:  # the rollout itself is let go here: a stretch of rows weighs a tenth of its models
            prepared.append(p.detached())
    _name_bytes(errors, data, start, line)
    return Parsed(fmt, prepared, rejected)


def _name_bytes(errors: list[RecordError], data: bytes, start: int, line: int) -> None:
    """Add the byte offset of its line to each rejection (in a growing file the line number
    alone is slow to find)."""
    if not errors:
        return
    starts = [start]
    pos = 0
    while True:
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        pos = nl + 1
        starts.append(start + pos)
    for err in errors:
        k = (err.line or 0) - line - 1
        if 0 <= k < len(starts) and "(byte " not in err.message:
            err.message += f" (line starts at byte {starts[k]})"


def _child_init(worker_pid: int) -> None:
    """In each parser process: leave Ctrl-C to the worker (it stops the pool), and die with the
    worker (Linux PR_SET_PDEATHSIG), so a worker killed with SIGKILL leaves no parser behind;
    a worker that died before this ran is noticed by the parent pid."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    if os.getppid() != worker_pid:
        os._exit(0)
    gc_relaxed.relax()  # a parser process prepares rollouts all its life (app/store/gc_relaxed.py)


class Parsers:
    """Where the next stretches are parsed while the worker writes: `n` parser processes
    (`spawn`ed on first use: no database connection or thread of the worker is inherited), or,
    with `n` = 0, one thread of the worker's own. The thread shares the interpreter lock, but a
    write spends much of its time where the lock is let go (the database's own work: SQLite's
    B-trees, waiting on Postgres), and parsing fills that time."""

    def __init__(self, n: int):
        self.n = n
        self._pool: Executor | None = None

    def submit(self, *args) -> Future:
        """`parse_lines(*args)` in a parser process (or the parser thread). A pool that broke
        (a parser was killed) is replaced."""
        if self._pool is None:
            self._pool = (ProcessPoolExecutor(self.n, mp_context=multiprocessing.get_context("spawn"),
                                              initializer=_child_init, initargs=(os.getpid(),))
                          if self.n else ThreadPoolExecutor(1, thread_name_prefix="rollscope-parser"))
        try:
            return self._pool.submit(parse_lines, *args)
        except BrokenProcessPool:
            self.close()
            return self.submit(*args)

    def close(self) -> None:
        """Stop the processes (what they were parsing is dropped)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
