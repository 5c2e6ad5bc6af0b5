"""Parsing a stretch of a spool file into rows ready to write: in the worker's own process, or in
a pool of parser processes while the worker writes the stretch before it.

Reading, validating and preparing a rollout (endings normalised by the reader's output path,
ingest/files.py; then app.store.prepare: checks, hash, packed token arrays) is pure CPU work that
touches no database; writing it is mostly the database's own work. With `parsers` > 0 a stretch
is cut into pieces of whole lines (`Stretch`); the pool's processes parse pieces of the next
stretches while the worker writes the current one, and the worker, instead of waiting for a piece
the pool has, parses a piece nobody has started (`Parsers.parsed`): on two cores the wall time
tends to max(parse, write) rather than their sum, and no core idles while the pool warms up. The
offsets still move only in the transaction that writes a stretch's rows, in file order
(app/worker/spool.py), so exactly-once does not depend on the pool: a parsed stretch that is never
written is simply read again.
"""
from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import signal
import sys
import warnings
from collections.abc import Callable
from concurrent.futures import CancelledError, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from pathlib import Path

from app.forking import can_fork
from app.store import gc_relaxed
from app.store.prepare import Prepared, prepare_or_error
from app.worker.handoff import Handoff
from app.worker.handoff import run as handoff_run
from ingest.errors import RecordError
from ingest.files import read_records
from ingest.formats.base import ReadContext
from ingest.formats.registry import detect, explain, get
from ingest.source import Source


@dataclass
class Parsed:
    """A stretch parsed: `fmt` the reader that read it (None when nothing could be read),
    `prepared` its rollouts, `rejected` its records that cannot be ingested (line and byte named),
    `refused` why no reader knows these lines (the file is then refused whole); `items` what
    `parse_items` read (`rollscope ingest`), in line order."""

    fmt: str | None
    prepared: list[Prepared] = field(default_factory=list)
    rejected: list[RecordError] = field(default_factory=list)
    refused: str | None = None
    items: list = field(default_factory=list)  # `parse_items`: everything read, in line order


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


_FORKED = False  # this process is a parser process forked from its worker (`_child_init`)


def _child_init(worker_pid: int, method: str) -> None:
    """In each parser process: leave Ctrl-C and SIGTERM to the worker, which stops the pool
    (systemd sends SIGTERM to the whole group: a parser that died of it would be taken for a
    crash, and replaced, while the worker stops), and die with the worker (Linux
    PR_SET_PDEATHSIG), so a worker killed with SIGKILL leaves no parser behind; a worker that
    died before this ran is noticed by the parent pid."""
    global _FORKED
    _FORKED = method == "fork"
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    if os.getppid() != worker_pid:
        os._exit(0)
    if _FORKED:
        # what came with the fork (the worker's whole heap) goes to the collector's permanent
        # generation: its collections never walk it (each walk touched, and so copied, every page
        # shared with the worker: measured 7.3 s of a parser's CPU for 2,000 rollouts)
        gc.freeze()
    gc_relaxed.relax()  # a parser process prepares rollouts all its life (app/store/gc_relaxed.py)


def sniff_format(data: bytes, name: str, line: int) -> str | None:
    """The reader that `parse_lines` would detect for a stretch `data` of the file `name` (after
    `line` lines) by its first record, without parsing more; None when no reader claims that
    record (the stretch is then parsed whole, where detection, the refusal or the broken lines
    are decided and reported)."""
    source = Source(Path(name), "jsonl", None, size=len(data), data=data, line_base=line)
    source.first = next((v for _, v in source.lines() if isinstance(v, dict)), None)
    source.position, source.last_line, source.last_raw = 0, None, None
    first = source.first
    reader = detect(source) if first is not None else None
    # told by a later record (an unknown header first): parsed whole, where detection decides
    return reader.NAME if reader is not None and source.first is first else None


MIN_PIECE_LINES = 8  # a stretch is cut into pieces of at least this many lines


@dataclass
class Piece:
    """Whole lines of a stretch to parse: `fn(*args)` (`parse_lines` for the worker,
    `parse_items` for `rollscope ingest`), and `job`: None (nobody has started it), a Future (the
    pool has it) or its Parsed (done here)."""

    args: tuple
    job: Future | Parsed | None = None
    fn: Callable[..., Parsed] = parse_lines


@dataclass
class Stretch:
    """A stretch read from a file (`chunk`: app/worker/stretches.py Chunk, or whatever its
    reader keeps) and the pieces it is parsed in, in line order."""

    chunk: object
    pieces: list[Piece]


def cut(data: bytes, start: int, line: int, n_lines: int, k: int) -> list[tuple[bytes, int, int]]:
    """`data` (`n_lines` complete lines from byte `start`, after `line` lines; anything after the
    last newline goes with the last piece) cut at line ends into at most `k` pieces of about as
    many lines each, none under MIN_PIECE_LINES: (bytes, start byte, lines before it) each."""
    k = max(1, min(k, n_lines // MIN_PIECE_LINES))
    out: list[tuple[bytes, int, int]] = []
    pos, at = 0, line
    for j in range(k):
        take = n_lines * (j + 1) // k - (at - line)
        end = pos
        for _ in range(take):
            end = data.index(b"\n", end) + 1
        if j == k - 1:
            end = len(data)
        out.append((data[pos:end], start + pos, at))
        pos, at = end, at + take
    return out


def pieces(data: bytes, name: str, start: int, line: int, n_lines: int, fmt: str | None, root: Path | None,
           k: int) -> list[Piece]:
    """The worker's pieces of a stretch (`cut`), each parsed by `parse_lines`."""
    return [Piece((part, name, at, before, fmt, root)) for part, at, before in cut(data, start, line, n_lines, k)]


@dataclass(frozen=True)
class KnownRef:
    """A record the store holds with these very bytes (ingest/known.py `Known`), as a parser
    process hands it over: without the means to read it in full, which the caller rebuilds from
    the line's bytes (`line`: its number in the file)."""

    identity: tuple[str, str, int]
    raw_hash: str
    source: dict


# (pid, database URL) → the known-records lookup of that process: a forked parser process makes
# its own, with connections of its own (it never uses, nor closes, those it inherited)
_KNOWN: dict[tuple[int, str], object] = {}


def _known_for(url: str):
    """This process's lookup of known records in the database at `url` (app/store/known.py),
    made once: a parser process asks the database itself, as the worker's own reader would."""
    key = (os.getpid(), url)
    if key not in _KNOWN:
        from app.db.engine import make_engine
        from app.store.known import known_lookup

        _KNOWN[key] = known_lookup(make_engine(url))
    return _KNOWN[key]


def parse_items(data: bytes, path: Path, start: int, line: int, ctx: ReadContext, known_url: str | None) -> Parsed:
    """Complete JSONL lines `data` of the native file `path`, from byte `start` after `line`
    lines, read as `rollscope ingest` reads them (`ctx`; with `known_url`, records the database
    there holds with these very bytes come as `KnownRef`s) and prepared: `Parsed.items` holds, in
    line order, the reader's rejections (RecordError), `KnownRef`s, and for each rollout a
    (identity, Prepared or the RecordError preparing it gave)."""
    from ingest.formats import native
    from ingest.known import Known

    source = Source(path, "jsonl", None, size=len(data), data=data, line_base=line)
    source.first = next((v for _, v in source.lines() if isinstance(v, dict)), None)
    source.position, source.last_line, source.last_raw = 0, None, None
    if known_url is not None and not (_FORKED and known_url.startswith("sqlite")):
        # (a forked process opens no SQLite file: SQLite's own bookkeeping of the worker's open
        # files and locks came with the fork, and a new connection would share it. Its records
        # are read in full, and the store finds the unchanged ones by their content hash)
        ctx = replace(ctx, known=_known_for(known_url))
    items: list = []
    for item in read_records(native, source, ctx, []):
        if isinstance(item, Known):
            items.append(KnownRef(item.identity, item.raw_hash, item.source))
        elif isinstance(item, RecordError):
            items.append(item)
        else:
            p = prepare_or_error(item)
            items.append(((item.run.id, item.id, item.attempt), p if isinstance(p, RecordError) else p.detached()))
    return Parsed(native.NAME, items=items)


def auto_parsers() -> int:
    """Parser processes `rollscope ingest` and `rollscope worker` use by default: one when this
    process may run on two cores or more, else none."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return 1 if cores >= 2 else 0


WAIT_CHECK = 1.0  # seconds between looks at the pool while the worker waits for a piece


def start_method() -> str:
    """How parser processes start: "fork" where this process may fork now (app/forking.py; the
    first submit starts every process of a pool at once), else "spawn"."""
    return "fork" if can_fork() and "fork" in multiprocessing.get_all_start_methods() else "spawn"


def _ready() -> None:
    """Nothing: sent to a new parser process so it imports the parsing code before work comes."""


class Parsers:
    """Where pieces of stretches are parsed besides the worker itself: `n` parser processes,
    started on first use (`forked` where app/forking.py allows it: ready in milliseconds with the
    parsing code imported; else `spawn`ed, which imports it for a second or more), or, with
    `n` = 0, one thread of the worker's own. The thread shares the interpreter lock, but a
    write spends much of its time where the lock is let go (the database's own work: SQLite's
    B-trees, waiting on Postgres), and parsing fills that time."""

    def __init__(self, n: int, log: Callable[[str], None] = lambda _msg: None):
        self.n = n
        self.log = log
        self._pool: Executor | None = None
        self.method: str | None = None  # how the running processes were started ("fork", "spawn")
        self._handoff: Handoff | None = None  # the files pieces and results pass through (processes)
        self._inputs: dict[Future, str] = {}  # a queued job → its piece's file
        self._warming: list[Future] = []  # `warm`'s probes, until the processes are up
        self._alone = False  # no process could be started: the worker parses alone

    @property
    def capacity(self) -> int:
        """Unfinished pieces the pool holds at most: with processes, every piece read ahead (the
        worker takes back the last ones still queued when it has nothing else to do, `parsed`);
        one for the thread."""
        return 1 << 30 if self.n else 1

    def warm(self) -> None:
        """Start the processes now (a process imports the parsing code for about a second, far
        longer on a busy machine): until they are up the worker parses everything itself
        (`top_up` hands out nothing), so it never waits for a process still starting."""
        if self.n and self._pool is None and not self._alone:
            try:
                self._warming = [self._submit(_ready) for _ in range(self.n)]
            except OSError as exc:  # no folder for the handoff (app/worker/handoff.py): the worker parses
                self.log(f"cannot start parser processes ({exc}); parsing in the worker")
                self.close()
                self._alone = True  # for good: the worker parses every piece itself

    @property
    def start_method(self) -> str:
        """How the processes were started ("fork", "spawn"), or would be now (`start_method()`)."""
        return self.method if self._pool is not None and self.method else start_method()

    @property
    def started(self) -> bool:
        """Whether `warm` (or a first piece) started the processes (or the thread)."""
        return self._pool is not None

    @property
    def ready(self) -> bool:
        """Whether the pool takes pieces: the thread always; processes once `warm` started them
        and they are up."""
        if not self.n:
            return True
        if self._pool is None or self._alone:
            return False
        if self._warming and all(f.done() for f in self._warming):
            for f in self._warming:
                try:
                    self._result(f)
                except Exception:  # noqa: BLE001 - a probe lost with its process: the next piece tells
                    pass
            self._warming = []
        return not self._warming

    def _submit(self, fn, *args) -> Future:
        """`fn(*args)` in the pool (processes: through a file, app/worker/handoff.py). A pool that
        broke (a parser was killed) is replaced."""
        if self._pool is None:
            if self.n:
                self.method = start_method()
                self._handoff = Handoff()
                self._pool = ProcessPoolExecutor(self.n, mp_context=multiprocessing.get_context(self.method),
                                                 initializer=_child_init, initargs=(os.getpid(), self.method))
            else:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="rollscope-parser")
        try:
            if not self.n:
                return self._pool.submit(fn, *args)
            path = self._handoff.put(fn, args)
            with warnings.catch_warnings():  # Python 3.12+ warns of any fork beside threads; ours are quiet
                warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
                job = self._pool.submit(handoff_run, path)
            self._inputs[job] = path
            return job
        except BrokenProcessPool:
            self.close()
            return self._submit(fn, *args)

    def _result(self, job: Future):
        """What `job` returned (waiting for it); raises what it raised, BrokenProcessPool when its
        process died or the pool's thread ended (checked every WAIT_CHECK seconds: a wait never
        outlives the pool)."""
        self._inputs.pop(job, None)
        if not self.n:
            return job.result()
        while True:
            try:
                out = job.result(timeout=WAIT_CHECK)
                break
            except TimeoutError:
                thread = getattr(self._pool, "_executor_manager_thread", None)
                if self._pool is None or (thread is not None and not thread.is_alive()):
                    raise BrokenProcessPool("the parser pool stopped (its thread ended)") from None
        if out is None:
            raise CancelledError("taken back")  # (never waited on: `_take_back` hands it to the worker)
        return self._handoff.take(out)

    def _take_back(self, stretches) -> Piece | None:
        """The last piece of `stretches` that no process has begun: one nobody started, or one
        still queued in the pool, claimed back (app/worker/handoff.py `take_back`; a piece a
        process already runs is left to it). None when every piece is begun."""
        for s in reversed(stretches):
            for piece in reversed(s.pieces):
                if piece.job is None:
                    return piece
                job = piece.job
                if isinstance(job, Future) and job in self._inputs and not job.done() \
                        and self._handoff.take_back(self._inputs[job]):
                    del self._inputs[job]  # its process will find nothing to do (`run` gives None)
                    piece.job = None
                    return piece
        return None

    def _orphaned(self, job) -> bool:
        """Whether `job` is a job of a pool closed since (a process died): nobody will answer it."""
        return isinstance(job, Future) and self.n > 0 and job not in self._inputs

    def top_up(self, stretches) -> None:
        """Give the pool the first pieces nobody has started, in file order, until it holds
        `capacity` unfinished ones. The first piece of the first stretch is left to the worker,
        which needs it at once."""
        if not self.ready:
            return
        busy = sum(1 for s in stretches for p in s.pieces if isinstance(p.job, Future) and not p.job.done())
        first = stretches[0].pieces[0] if stretches else None
        for s in stretches:
            for piece in s.pieces:
                if busy >= self.capacity:
                    return
                if piece.job is None and piece is not first:
                    try:
                        piece.job = self._submit(piece.fn, *piece.args)
                    except OSError as exc:  # the piece's file cannot be written (a full disk): the worker parses
                        self.log(f"{piece.args[1]}: cannot hand a piece to a parser process ({exc}); "
                                 "parsing in the worker")
                        return
                    busy += 1

    def parsed(self, stretch: Stretch, later) -> Parsed:
        """The whole of `stretch` parsed: its pieces nobody started are parsed here; while a piece
        the pool has is not done, the worker parses (with parser processes) the last piece of the
        `later` stretches that no process has begun (taken back from the pool's queue), rather
        than wait: the processes work from the front, the worker from the back, and neither idles
        while pieces are left. A piece whose process died (the OOM killer, a signal) is parsed
        here; the pool is replaced."""
        out: list[Parsed] = []
        for piece in stretch.pieces:
            if piece.job is None or self._orphaned(piece.job):
                piece.job = piece.fn(*piece.args)
            while self.n and isinstance(piece.job, Future) and not piece.job.done():
                self.top_up(later)
                spare = self._take_back(later)
                if spare is None:
                    break
                spare.job = spare.fn(*spare.args)
            if isinstance(piece.job, Future):
                try:
                    piece.job = self._result(piece.job)
                except (BrokenProcessPool, CancelledError) as exc:
                    self.log(f"{piece.args[1]}: a parser process died ({exc!r}); parsing in the worker")
                    self.close()
                    self.warm()  # a new pool, taking pieces once it is up
                    piece.job = piece.fn(*piece.args)
                except Exception as exc:  # noqa: BLE001 - the handoff failed (a full disk): parse it here
                    self.log(f"{piece.args[1]}: a parser process could not parse a piece ({exc!r}); "
                             "parsing it in the worker")
                    piece.job = piece.fn(*piece.args)
            out.append(piece.job)
        return _joined(out)

    def close(self) -> None:
        """Stop the processes (what they were parsing is dropped). Processes still starting are
        killed rather than waited for (an import can take seconds on a busy machine)."""
        if self._pool is not None:
            if not self.ready:
                for proc in list(getattr(self._pool, "_processes", {}).values()):
                    proc.kill()
            for path in self._inputs.values():  # queued pieces: their processes skip them
                self._handoff.take_back(path)
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._handoff is not None:
            self._handoff.close()
            self._handoff = None
        self._inputs.clear()
        self._warming = []


def _joined(parts: list[Parsed]) -> Parsed:
    """The pieces of a stretch as one Parsed: the first refusal, else their rollouts and
    rejections in line order."""
    if len(parts) == 1:
        return parts[0]
    refused = next((p for p in parts if p.refused is not None), None)
    if refused is not None:
        return refused
    return Parsed(next((p.fmt for p in parts if p.fmt), None), [r for p in parts for r in p.prepared],
                  [e for p in parts for e in p.rejected], items=[i for p in parts for i in p.items])
