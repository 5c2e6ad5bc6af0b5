"""The spool: files that collectors write into a directory, ingested while they grow, exactly once.

A collector appends whole JSONL lines to files in a spool directory (`RolloutWriter` in
rollscope/client.py does this); the worker reads what has been appended since the last commit,
through the same readers as `rollscope ingest`, and commits the rows together with the file's
new byte offset (`spool_file.offset`), in one transaction. A worker killed at any moment leaves the rows and the
offset of its last commit, nothing in between; the next one resumes there. Re-reading a stretch
twice would change nothing anyway: a rollout is identified by (run, id, attempt) and its content
hash, and quarantined records by file, line and content.

Files are known by device and inode, so a rename (rotation: `a.jsonl` → `a.jsonl.1`, a new
`a.jsonl`) keeps its offset and its records keep the name they were first read under. A file
that shrinks below its offset, or whose first bytes or the 64 bytes before its offset change
(`tail`), was truncated or rewritten, or is another file on a deleted one's recycled inode: it is
read again from the start (unchanged records are recognised as such), and its counts of records
and rejections start again: they count what the file holds now, never a record twice. A deleted file is marked
`gone`; its rows stay. A last line without its newline waits for it; if the file stops growing
for `torn_after` seconds it is reported as a torn line, quarantined with its line and byte
offset, and skipped. `.gz` files are read as a stream (offsets count uncompressed bytes). Other
files (a JSON document, CSV) are read whole once they stop changing.

Several workers may share the spool on Postgres: each claims a file for a short lease with
`SELECT ... FOR UPDATE SKIP LOCKED`, and commits only when the file's offset is still the one it
read from (checked under the row lock), so no stretch is ever committed twice. A claim is also
tied to its worker's life: each worker holds a session-level advisory lock (`WORKER_LOCK_CLASS`,
a key of its own, named in its `worker_id` as `host:pid:s<key>`) on a connection it keeps open,
and a claim whose worker's lock is gone (the worker was killed, its connection died with it) is
taken over at once, not after the lease: no worker waits for a dead one. A claim whose holder
cannot be checked (written by an older version) lapses with its lease; the worker says in one
line which file waits on whose lease, and until when. On SQLite there is one worker
(app/worker/run.py holds a lock file) and it lets go of every claim when it starts.

The `/v1/traces` receiver keeps the spans it has answered 200 for in a spool of its own
(app/worker/trace_spool.py: one file per trace, `spool_file.spool = "otlp"`), on the same table
and the same rule: a file's offset moves in the transaction that writes its rows. This worker
never touches those rows.
"""
from __future__ import annotations

import os
import random
import re
import socket
import stat
import time
import zlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from app.db.engine import insert_for
from app.store.quarantine import IngestContext, clear_whole_file, quarantine_many
from app.store.write import StoreResult, store, write_in
from app.worker.gzstream import GzState, inflate, is_gzip
from app.worker.parse import Parsed, Parsers, parse_lines
from ingest.files import read_records
from ingest.formats.base import ReadContext
from ingest.formats.registry import detect, explain
from ingest.errors import RecordError
from ingest.jsonio import loads
from ingest.source import read_as

S = models.SpoolFile.__table__
HEAD_BYTES = 256  # first bytes kept per file: a rewrite changes them
TAIL_BYTES = 64  # bytes kept before a plain file's offset: another file that begins alike differs there
LEASE = timedelta(seconds=60)  # a claim lapses after this (a worker that died lets go)
MAX_LINE_BYTES = 1 << 30  # a line longer than this is refused, not buffered
SKIPPED_SUFFIXES = (".tmp", ".part", ".partial", ".swp")
INGEST = "ingest"  # spool_file.spool of the worker's files
WORKER_LOCK_CLASS = 0x726F6C6C  # pg_advisory_lock(class, key): "roll", the class of workers' session locks
_SESSION_KEY = re.compile(r":s(\d{1,10})$")
REJECTED_SHOWN = 5  # rejected records named on stderr per stretch read; the rest are counted in one line
REJECTED_CHARS = 300  # a rejection's line is cut here (its whole text is in the quarantine)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\s]+")


def rejected_lines(errors: list[RecordError], *, shown: int = REJECTED_SHOWN) -> list[str]:
    """What the worker says about a stretch's rejected records: one line each for the first
    `shown` (`rejected a.jsonl:7: field: why`, control characters and line breaks made spaces,
    cut to REJECTED_CHARS), then `… and 37 more rejected in this stretch`. [] for none."""
    out = []
    for e in errors[:shown]:
        text = _CONTROL.sub(" ", str(e)).strip()
        out.append("rejected " + (text if len(text) <= REJECTED_CHARS else text[:REJECTED_CHARS - 1] + "…"))
    if len(errors) > shown:
        out.append(f"… and {len(errors) - shown} more rejected in this stretch")
    return out


def new_worker_id() -> str:
    """`host:pid:s<key>`: who the worker is (for a person) and the key of its session lock."""
    return f"{socket.gethostname()}:{os.getpid()}:s{random.randint(1, 2**31 - 1)}"


def session_key(worker_id: str | None) -> int | None:
    """The advisory lock key named in a worker id (None for an id without one)."""
    m = _SESSION_KEY.search(worker_id or "")
    return int(m.group(1)) if m else None


@dataclass
class Seen:
    """A file found in a spool directory."""

    path: Path
    device: int
    inode: int
    size: int
    mtime: float


def scan(dirs: list[Path]) -> dict[tuple[int, int], Seen]:
    """Regular files under `dirs` (recursively), by (device, inode). Hidden files and folders
    and temporary names (`.tmp`, `.part`, ...) are left alone: writers finish them first."""
    out: dict[tuple[int, int], Seen] = {}
    for root in dirs:
        for folder, subdirs, files in os.walk(root):
            subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
            for name in sorted(files):
                if name.startswith(".") or name.endswith(SKIPPED_SUFFIXES):
                    continue
                path = Path(folder) / name
                try:
                    st = path.stat()
                except OSError:
                    continue  # vanished between listing and stat
                if stat.S_ISREG(st.st_mode):
                    out.setdefault((st.st_dev, st.st_ino), Seen(path, st.st_dev, st.st_ino, st.st_size, st.st_mtime))
    return out


def unique_name(path: str, taken: set[str]) -> str:
    """The name a file newly seen at `path` is known by: `path`, or `path~2`, `path~3`, ...
    when another file was first seen there (the new file of a rotation, at the rotated one's
    old path), so that a name is one file's and its records, ids and quarantine entries are never
    another file's. Adds the name to `taken`."""
    name, n = path, 1
    while name in taken:
        n += 1
        name = f"{path}~{n}"
    taken.add(name)
    return name


def _head(path: Path) -> bytes:
    return _bytes_at(path, 0, HEAD_BYTES) or b""


def _bytes_at(path: Path, offset: int, n: int) -> bytes | None:
    """Up to `n` bytes of `path` from `offset` (None when it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(max(offset, 0))
            return f.read(n)
    except OSError:
        return None


def _still_for(row, now, seconds: float, *, unknown: bool) -> bool:
    """Whether a file has not grown for `seconds` (`unknown` when it was never seen growing)."""
    grew = row.grew_at
    if grew is None:
        return unknown
    if grew.tzinfo is None:
        grew = grew.replace(tzinfo=now.tzinfo)
    return (now - grew).total_seconds() >= seconds


@dataclass
class Left:
    """A file a pass left with bytes unread: `name`, `why` (for a person), and `due`: seconds
    until waiting may change that (a document settles, a last line counts as torn), or None."""

    name: str
    why: str
    due: float | None = None


@dataclass
class Chunk:
    """Complete lines read from a file: `data` starts at byte `start` (line `line` + 1) and ends
    at `end`; `torn` is a last line given up on (no newline, the file stopped growing)."""

    data: bytes
    start: int
    end: int
    line: int
    n_lines: int
    torn: bytes | None = None


@dataclass
class Spool:
    """One worker's view of the spool directories. `work()` does one pass: find files, claim
    one with something to read, read and commit it chunk by chunk."""

    engine: Engine
    dirs: list[Path]
    batch_lines: int = 200
    batch_bytes: int = 16 << 20
    torn_after: float = 30.0  # seconds without growth before a last line without newline is torn
    settle: float = 2.0  # seconds a non-JSONL file must stay unchanged before it is read
    worker_id: str = field(default_factory=new_worker_id)
    log: Callable[[str], None] = lambda _msg: None
    parsers: int = 0  # processes parsing the next stretches of a file while one is written (app/worker/parse.py)
    _gz: dict[int, GzState] = field(default_factory=dict)
    _idle: dict[int, tuple[int, int]] = field(default_factory=dict)  # pk → (size, offset) when nothing was readable
    # pk → stretches read ahead of the file's offset, in order, each with its parse under way (a
    # future) or None (not sent: parsed here when its turn comes)
    _ahead: dict[int, deque[tuple[Chunk, Future | None]]] = field(default_factory=dict)
    _pool: Parsers = field(init=False)
    _parse_ahead: bool = field(init=False, default=False)
    _session: sa.Connection | None = None  # Postgres: the connection holding this worker's advisory lock
    _said: dict[int, str] = field(default_factory=dict)  # pk → the last wait or takeover said of it

    def __post_init__(self) -> None:
        self._pool = Parsers(self.parsers)
        # without parser processes, a thread parses ahead only where the database works in its
        # own process (Postgres): the worker waits on it meanwhile. On SQLite the write is the
        # worker's own CPU, and a second thread only contends for Python's lock (measured: no gain)
        self._parse_ahead = self.parsers > 0 or self.engine.dialect.name != "sqlite"

    def release_claims(self) -> None:
        """Let go of every file claim (the worker's own and a dead one's). For SQLite, where one
        worker at a time holds the database (app/worker/run.py's lock file): a worker killed with
        SIGKILL leaves 60 s leases that would otherwise stall its successor."""
        with self.engine.begin() as conn:
            conn.execute(S.update().where(S.c.spool == INGEST, S.c.claimed_by.is_not(None))
                         .values(claimed_by=None, claimed_until=None))

    def close(self) -> None:
        """Stop the parser processes (stretches parsed but not written are read again next time)
        and let go of the session lock."""
        self._ahead.clear()
        self._pool.close()
        self._drop_session()

    # --- the worker's session lock (Postgres) -----------------------------------------------

    def hold_session(self) -> None:
        """Postgres: make sure this worker holds its advisory lock on a live connection (taken
        on the first pass, taken again after the connection was lost). Other workers take over
        the claims of a worker whose lock is gone. Raises the driver's error when the database
        is unreachable (the caller's backoff). If the key is still held by a connection of ours
        the server has not seen die yet, the worker takes a new key (and id)."""
        if self.engine.dialect.name != "postgresql":
            return
        if self._session is not None:
            try:
                self._session.exec_driver_sql("SELECT 1")
                return
            except sa.exc.DBAPIError:
                self._drop_session()
        if session_key(self.worker_id) is None:
            self.worker_id = new_worker_id()
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            while not conn.execute(sa.text("SELECT pg_try_advisory_lock(:c, :k)"),
                                   {"c": WORKER_LOCK_CLASS, "k": session_key(self.worker_id)}).scalar_one():
                self.worker_id = new_worker_id()
        except BaseException:
            conn.close()
            raise
        self._session = conn

    def _drop_session(self) -> None:
        if self._session is None:
            return
        try:
            self._session.close()  # its lock goes with it
        except Exception:  # noqa: BLE001 - a connection already gone
            pass
        self._session = None

    def _gone_holders(self, conn: sa.Connection, now) -> set[str]:
        """Postgres: the workers holding unexpired claims whose session lock is gone (killed,
        or their connection died): their claims are free. A holder whose id names no key
        (an older version) waits for its lease; that is said once per file and holder."""
        if conn.dialect.name != "postgresql":
            return set()
        held = conn.execute(sa.select(S.c.pk, S.c.name, S.c.claimed_by, S.c.claimed_until).where(
            S.c.spool == INGEST, S.c.status == "active", S.c.claimed_by.is_not(None),
            S.c.claimed_by != self.worker_id, S.c.claimed_until >= now)).all()
        if not held:
            return set()
        live = {int(k) for k in conn.execute(sa.text(
            "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND classid = :c AND objsubid = 2 AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"),
            {"c": WORKER_LOCK_CLASS}).scalars()}
        gone = set()
        for row in held:
            key = session_key(row.claimed_by)
            if key is None:
                self._say(row.pk, f"{row.name}: waits for worker {row.claimed_by}'s lease until "
                                  f"{row.claimed_until:%Y-%m-%d %H:%M:%S} UTC (its worker names no session to check)")
            elif key not in live:
                gone.add(row.claimed_by)
        return gone

    def _say(self, pk: int, msg: str) -> None:
        """Log `msg` about a file once (until something else is said about it)."""
        if self._said.get(pk) != msg:
            self._said[pk] = msg
            self.log(msg)

    def left_unread(self) -> list[Left]:
        """The files with bytes this worker has not read, and why (`rollscope worker --once`
        waits for those `due` soon and names the rest): a JSON document or CSV still changing
        (read once it has not changed for `settle` seconds), a last line without its newline
        (read when it ends, or torn after `torn_after` seconds without growth), a gzip stream
        that has not ended, a file another worker holds."""
        now = models.utcnow()
        wall = time.time()
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(S).where(S.c.spool == INGEST, S.c.status == "active")
                                .order_by(S.c.name)).all()
        out: list[Left] = []
        for row in rows:
            try:
                st = Path(row.path).stat()
            except OSError:
                continue  # gone since: the next pass marks it
            grew = self._since_growth(row, now)
            if row.claimed_by not in (None, self.worker_id) and row.claimed_until is not None \
                    and row.claimed_until >= now:
                out.append(Left(row.name, f"held by worker {row.claimed_by} until "
                                          f"{row.claimed_until:%Y-%m-%d %H:%M:%S} UTC"))
            elif is_gzip(row.head):
                out.append(Left(row.name, "its gzip stream has not ended: read on when more of it arrives, or its "
                                          f"last line reported as torn once the file has not grown for "
                                          f"{self.torn_after:g} s", max(self.torn_after - grew, 0.0)))
            elif st.st_size <= row.offset:
                continue
            elif row.offset == 0 and not row.format:
                age = min(wall - st.st_mtime, grew)
                out.append(Left(row.name, f"still changing: a JSON document or CSV is read once it has not "
                                          f"changed for {self.settle:g} s", max(self.settle - age, 0.0)))
            else:
                out.append(Left(row.name, f"its last line has no newline yet ({st.st_size - row.offset} bytes): "
                                          "it is read when the line ends, or reported as torn once the file has "
                                          f"not grown for {self.torn_after:g} s", max(self.torn_after - grew, 0.0)))
        return out

    @staticmethod
    def _since_growth(row, now) -> float:
        """Seconds since the file last grew (0 when unknown)."""
        grew = row.grew_at
        if grew is None:
            return 0.0
        if grew.tzinfo is None:
            grew = grew.replace(tzinfo=now.tzinfo)
        return max((now - grew).total_seconds(), 0.0)

    # --- discovering files -------------------------------------------------------------------

    def sync_files(self) -> None:
        """Record new files, follow renames, notice truncation, rewrites and deletions."""
        seen = scan(self.dirs)
        now = models.utcnow()
        with self.engine.begin() as conn:
            rows = {(r.device, r.inode): r for r in conn.execute(sa.select(S).where(S.c.spool == INGEST))}
            taken = {r.name for r in rows.values()}
            new = []
            for key, s in seen.items():
                row = rows.get(key)
                if row is None:
                    head = _head(s.path)
                    new.append(dict(spool=INGEST, name=unique_name(str(s.path), taken), path=str(s.path), device=s.device, inode=s.inode, head=head,
                                    offset=0, line=0, size=s.size, status="active", records=0, rejected=0,
                                    grew_at=now, updated_at=now))
                    continue
                changes = self._changes(row, s, now, taken)
                if changes:
                    conn.execute(S.update().where(S.c.pk == row.pk).values(**changes, updated_at=now))
            if new:
                conn.execute(insert_for(conn, S).on_conflict_do_nothing(index_elements=["device", "inode"]), new)
            for key, row in rows.items():
                if key not in seen and row.status != "gone":
                    unread = max(row.size - row.offset, 0) if row.status == "active" else 0
                    msg = f"deleted with {unread} bytes unread" if unread else None
                    conn.execute(S.update().where(S.c.pk == row.pk)
                                 .values(status="gone", last_error=msg or row.last_error, updated_at=now))
                    if msg:
                        self.log(f"{row.name}: {msg}")

    def _changes(self, row, s: Seen, now, taken: set[str]) -> dict:
        """What to update for a known file seen again (`taken`: the names in use, `unique_name`)."""
        changes: dict = {}
        if str(s.path) != row.path:
            changes["path"] = str(s.path)  # renamed (rotated): same file, same offset, same name
        head = _head(s.path) if (s.size != row.size or len(row.head) < HEAD_BYTES) else row.head
        same_start = head[:len(row.head)] == row.head[:len(head)]
        gz = is_gzip(row.head)
        moved = s.size != row.size or str(s.path) != row.path
        before = None if gz or not moved or not row.tail or s.size < row.offset else \
            _bytes_at(s.path, row.offset - len(row.tail), len(row.tail))
        same_end = before is None or before == row.tail  # None: nothing to compare, or unreadable now
        if not same_start or not same_end or (not gz and s.size < row.offset):
            # rewritten, truncated, or another file on a recycled inode that begins alike: read it
            # again from the start (what is unchanged stays so)
            why = ("its first bytes changed" if not same_start else
                   "the bytes before its read offset changed (rewritten, or a new file on a deleted one's inode)"
                   if not same_end else f"it shrank to {s.size} bytes")
            self.log(f"{row.name}: {why}; reading it again from the start")
            # its counts restart with it: they are the records of what the file holds now
            changes.update(offset=0, line=0, records=0, rejected=0, head=head, tail=None, status="active", format=None,
                           last_error=f"{why}; read again from the start", grew_at=now, size=s.size)
            if str(s.path) != row.name and (row.status == "gone" or str(s.path) != row.path):
                changes["name"] = unique_name(str(s.path), taken)  # another file: never the old one's name
            self._gz.pop(row.pk, None)
            return changes
        if len(head) > len(row.head):
            changes["head"] = head
        if s.size != row.size:
            changes.update(size=s.size, grew_at=now)
            if row.status in ("done", "gone"):
                changes["status"] = "active"
        elif row.status == "gone":
            changes["status"] = "active"
        return changes

    # --- claiming and reading -----------------------------------------------------------------

    def work(self, stop: Callable[[], bool] = lambda: False, *, budget: float = 2.0) -> int:
        """Claim files with something to read and read them, for about `budget` seconds.
        Returns the number of chunks committed."""
        done = 0
        started = time.monotonic()
        tried: set[int] = set()
        self.hold_session()
        while not stop() and time.monotonic() - started < budget:
            row = self._claim(tried)
            if row is None:
                break
            tried.add(row.pk)
            try:
                while not stop():
                    n = self._step(row, read_ahead=time.monotonic() - started < budget)
                    if n == 0:
                        break
                    done += n
                    row = self._reload(row.pk)
                    if row is None or row.claimed_by != self.worker_id or row.status != "active":
                        break  # lost, or finished (read whole, refused, a gzip stream at its end)
                    if time.monotonic() - started >= budget and not self._ahead.get(row.pk):
                        break  # past the budget once what was read ahead is written: a file let go holds nothing
            finally:
                self._release(row.pk if row is not None else None)
        return done

    def _claim(self, tried: set[int]):
        """Take a lease on one active file no other worker holds (row lock, SKIP LOCKED)."""
        now = models.utcnow()
        with self.engine.begin() as conn:
            gone = self._gone_holders(conn, now)
            free = sa.or_(S.c.claimed_by.is_(None), S.c.claimed_until < now, S.c.claimed_by == self.worker_id,
                          *([S.c.claimed_by.in_(sorted(gone))] if gone else []))
            wanted = sa.and_(S.c.spool == INGEST, S.c.status == "active", free)
            if tried:
                wanted = sa.and_(wanted, S.c.pk.notin_(tried))
            for row in conn.execute(sa.select(S).where(wanted).order_by(S.c.updated_at, S.c.pk).limit(50)
                                    .with_for_update(skip_locked=True)):
                if self._idle.get(row.pk) == (row.size, row.offset) and not self._due(row, now):
                    continue  # nothing new since the last look
                if row.claimed_by not in (None, self.worker_id):
                    why = ("its database session is gone (the worker died)" if row.claimed_by in gone
                           else "its lease lapsed")
                    self._say(row.pk, f"{row.name}: taking over from worker {row.claimed_by}: {why}; its lease ran "
                                      f"to {row.claimed_until:%Y-%m-%d %H:%M:%S} UTC")
                conn.execute(S.update().where(S.c.pk == row.pk)
                             .values(claimed_by=self.worker_id, claimed_until=now + LEASE))
                return row
        return None

    def _due(self, row, now) -> bool:
        """A file with nothing new is looked at again once waiting may have changed the answer:
        a file not yet read (a JSON document or CSV, read whole once it settles) after `settle`
        seconds, a last line without its newline after `torn_after`."""
        if row.offset == 0 and not row.format and _still_for(row, now, self.settle, unknown=True):
            return True
        return self._torn_due(row, now)

    def _torn_due(self, row, now) -> bool:
        return _still_for(row, now, self.torn_after, unknown=False)

    def _reload(self, pk: int):
        with self.engine.connect() as conn:
            return conn.execute(sa.select(S).where(S.c.pk == pk)).first()

    def _release(self, pk: int | None) -> None:
        if pk is None:
            return
        for _chunk, parsing in self._ahead.pop(pk, ()):  # stale once let go: another worker may move on
            if parsing is not None:
                parsing.cancel()
        with self.engine.begin() as conn:
            conn.execute(S.update().where(S.c.pk == pk, S.c.claimed_by == self.worker_id)
                         .values(claimed_by=None, claimed_until=None))

    def _step(self, row, *, read_ahead: bool = True) -> int:
        """Read and commit one chunk of a claimed file; 0 when nothing could be read.
        `read_ahead`: whether the next stretches may be read and parsed while this one is written."""
        path = Path(row.path)
        mode = self._mode(row, path)
        if mode is None:
            self._idle[row.pk] = (row.size, row.offset)
            return 0
        if mode == "whole":
            return self._whole_file(row, path)
        chunk, parsing = self._next_chunk(row, path, read_ahead=read_ahead)
        if chunk is None:
            state = self._gz.get(row.pk)
            if state is not None and state.broken is not None:  # every whole line before it is in
                return self._corrupt(row, state)
            self._idle[row.pk] = (row.size, row.offset)
            return 0
        self._idle.pop(row.pk, None)
        parsed = self._parsed(row, chunk, parsing)
        if parsed.refused is not None:
            self._ahead.pop(row.pk, None)
            return self._refuse(row, parsed.refused)
        prepared, rejected, fmt = parsed.prepared, parsed.rejected, parsed.fmt or row.format
        if chunk.torn is not None:
            errors_line = chunk.line + chunk.n_lines + 1
            raw = chunk.torn[:4096].decode("utf-8", "replace")
            rejected.append(RecordError(row.name, errors_line, None,
                                        f"torn last line (starts at byte {chunk.end - len(chunk.torn)}): no newline and the file "
                                        f"stopped growing for {self.torn_after:g} s (a writer stopped mid-record); skipped",
                                        raw))
        with self.engine.begin() as conn:
            cur = conn.execute(sa.select(S.c.offset, S.c.claimed_by).where(S.c.pk == row.pk).with_for_update()).first()
            if cur is None or cur.offset != chunk.start or cur.claimed_by != self.worker_id:
                self._ahead.pop(row.pk, None)
                return 0  # another worker moved it on, or it was reset: this stretch is not ours
            if chunk.start == 0:  # read line by line from its start: a whole-file rejection says nothing more
                clear_whole_file(conn, row.name, before=models.utcnow())
            res = write_in(conn, prepared, rejected, quarantine_context=self._context(row.name, fmt))
            # a torn line has not ended: what its writer appends later (the rest of it, or a next
            # record after a restart) is on the same line, and keeps its number
            n_lines = chunk.n_lines
            # a stretch from byte 0 starts the counts again, whatever reset the offset (a rewrite,
            # a truncation, an inode reused): a record read twice is never counted twice
            before = (0, 0) if chunk.start == 0 else (S.c.records, S.c.rejected)
            conn.execute(S.update().where(S.c.pk == row.pk).values(
                offset=chunk.end, line=chunk.line + n_lines, format=fmt, tail=self._tail(row, chunk),
                records=before[0] + res.inserted + res.replaced + res.unchanged,
                rejected=before[1] + res.rejected, claimed_until=models.utcnow() + LEASE,
                last_error=(str(rejected[-1]) if rejected else row.last_error), updated_at=models.utcnow(),
                status="done" if self._finished(row, chunk) else "active"))
        self._after_commit(row, chunk)
        self._say_rejected(rejected, res)
        return 1

    def _say_rejected(self, rejected: list[RecordError], res: StoreResult) -> None:
        """Name a committed stretch's rejected records on the log (stderr): those read as bad and
        those the database refused, at most REJECTED_SHOWN of them (rejected_lines)."""
        refused = [e for e in res.errors if not any(e is r for r in rejected)]
        for msg in rejected_lines(rejected + refused):
            self.log(msg)

    def _next_chunk(self, row, path: Path, *, read_ahead: bool = True) -> tuple[Chunk | None, Future | None]:
        """The stretch at the file's stored offset, with its parse when it is under way.

        A plain JSONL file whose format is known is read ahead, up to `parsers` + 1 stretches
        (2 without parser processes, on Postgres; none on SQLite), and they are parsed in the pool
        (`Parsers`: processes, or one thread) while the worker writes. A lone stretch (nothing
        more to read yet) is parsed here, at once."""
        ahead = self._ahead.get(row.pk)
        if ahead and ahead[0][0].start != row.offset:
            ahead = None  # the offset moved (another worker, a truncation): what was read ahead is stale
        if not ahead:
            self._ahead.pop(row.pk, None)
            chunk = self._read_chunk(row, path)
            if chunk is None:
                return None, None
            ahead = self._ahead[row.pk] = deque([(chunk, None)])
        if read_ahead and self._parse_ahead and row.format and not is_gzip(row.head):
            while len(ahead) <= max(self.parsers, 1) and ahead[-1][0].torn is None:
                last = ahead[-1][0]
                nxt = self._read_chunk(row, path, at=(last.end, last.line + last.n_lines))
                if nxt is None:
                    break
                ahead.append((nxt, None))
            if len(ahead) > 1:
                for k, (chunk, parsing) in enumerate(ahead):
                    if parsing is None and chunk.data:
                        ahead[k] = (chunk, self._pool.submit(*self._parse_args(row, chunk)))
        return ahead.popleft()

    def _parse_args(self, row, chunk: Chunk) -> tuple:
        return (chunk.data, row.name, chunk.start, chunk.line, row.format, self._root_of(row.name))

    def _parsed(self, row, chunk: Chunk, parsing: Future | None) -> Parsed:
        """The stretch's parse: waited for when a parser process has it, else done here."""
        if not chunk.data:
            return Parsed(row.format)
        if parsing is not None:
            try:
                return parsing.result()
            except BrokenProcessPool as exc:  # a parser died (the OOM killer, a signal): parse here
                self.log(f"{row.name}: a parser process died ({exc}); parsing in the worker")
                self._pool.close()
                self._ahead.clear()
        return parse_lines(*self._parse_args(row, chunk))

    def _mode(self, row, path: Path) -> str | None:
        """"lines" (JSONL, gzip: tailed), "whole" (a JSON document, CSV: read once settled), or
        None (too early to tell: the first line is not complete yet)."""
        if is_gzip(row.head) or row.offset > 0 or row.format:
            return "lines"
        try:
            with path.open("rb") as f:
                first = f.readline(MAX_LINE_BYTES)
                settled = time.time() - os.fstat(f.fileno()).st_mtime >= self.settle
        except OSError:
            return None
        if not first.endswith(b"\n"):
            return "whole" if settled and first.strip() else None
        try:
            return "lines" if isinstance(loads(first.removeprefix(b"\xef\xbb\xbf")), dict) else "whole"
        except (ValueError, UnicodeDecodeError):
            return "whole"  # "{" alone: pretty-printed JSON; or a broken first line (read whole, probed)

    def _finished(self, row, chunk: Chunk) -> bool:
        """A gzip stream read to its end (appending to a .gz is not a thing writers do); a
        corrupt one is finished by `_corrupt`, once what came before the damage is in."""
        state = self._gz.get(row.pk)
        return state is not None and state.eof and state.broken is None and chunk.end >= state.out_pos

    def _tail(self, row, chunk: Chunk) -> bytes | None:
        """The up to TAIL_BYTES bytes before the offset once `chunk` is committed (None for gzip:
        its offsets count uncompressed bytes)."""
        if is_gzip(row.head):
            return None
        read = chunk.data or chunk.torn or b""
        return read[-TAIL_BYTES:] if len(read) >= TAIL_BYTES else ((row.tail or b"") + read)[-TAIL_BYTES:]

    def _after_commit(self, row, chunk: Chunk) -> None:
        state = self._gz.get(row.pk)
        if state is not None:
            state.buffer = state.buffer[chunk.end - (state.out_pos - len(state.buffer)):]

    def _read_chunk(self, row, path: Path, at: tuple[int, int] | None = None) -> Chunk | None:
        """Complete lines from `row.offset` (or from `at`, (byte, lines before it), of a plain
        file): up to `batch_lines` lines or `batch_bytes` bytes. None when nothing complete is
        there yet."""
        if is_gzip(row.head):
            return self._read_gz(row, path)
        offset, line = at or (row.offset, row.line)
        try:
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read(self.batch_bytes)
                while data and b"\n" not in data and len(data) < MAX_LINE_BYTES:
                    more = f.read(self.batch_bytes)
                    if not more:
                        break
                    data += more
        except OSError as exc:
            self._say(row.pk, f"{row.name}: cannot read: {exc}")
            return None
        return self._cut(row, data, at_eof=len(data) < self.batch_bytes or b"\n" not in data, at=(offset, line))

    def _cut(self, row, data: bytes, *, at_eof: bool, at: tuple[int, int] | None = None) -> Chunk | None:
        """The complete lines at the start of `data` (read from `row.offset`, or from `at`)."""
        offset, line = at or (row.offset, row.line)
        lines, pos = 0, 0
        while lines < self.batch_lines:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break
            pos, lines = nl + 1, lines + 1
        if pos:
            return Chunk(data[:pos], offset, offset + pos, line, lines)
        if data and at_eof and self._torn_due(row, models.utcnow()):
            return Chunk(b"", offset, offset + len(data), line, 0, torn=data)
        return None

    def _read_gz(self, row, path: Path) -> Chunk | None:
        """Complete lines of a gzip stream from uncompressed offset `row.offset`. A file of
        several gzip members (`gzip >> file`, also appended later) is read member after member,
        as `gzip -d` does; a stream whose writer died mid-member ends as a torn last line."""
        state = self._gz.get(row.pk)
        if state is not None and state.broken is not None and state.out_pos - len(state.buffer) == row.offset:
            return self._cut(row, state.buffer, at_eof=False)  # the whole lines before the damage
        if state is None or state.out_pos - len(state.buffer) != row.offset:
            state = GzState(zlib.decompressobj(wbits=47), 0, 0)
            self._gz[row.pk] = state
            skip = row.offset
        else:
            skip = 0
        try:
            with path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                if state.eof and size > state.compressed_pos:  # another member was appended
                    state.zobj, state.eof = zlib.decompressobj(wbits=47), False
                f.seek(state.compressed_pos)
                while not state.eof and (skip or b"\n" not in state.buffer[-self.batch_bytes:]
                                         or len(state.buffer) < self.batch_bytes):
                    block_at = state.compressed_pos
                    raw = f.read(1 << 20)
                    if not raw:
                        break
                    state.compressed_pos += len(raw)
                    out = inflate(state, raw, block_at, size)
                    state.out_pos += len(out)
                    state.buffer += out
                    if skip:
                        cut = min(skip, len(state.buffer))
                        state.buffer, skip = state.buffer[cut:], skip - cut
                at_end = state.eof or state.compressed_pos >= size
        except OSError as exc:
            self._gz.pop(row.pk, None)
            self._say(row.pk, f"{row.name}: cannot read: {exc}")
            return None
        if state.broken is not None:
            return self._cut(row, state.buffer, at_eof=False)  # whole lines first; then `_corrupt`
        return self._cut(row, state.buffer, at_eof=at_end)

    def _corrupt(self, row, state: GzState) -> int:
        """A gzip file whose data is damaged, read up to the damage: rejected once (one
        quarantine entry at the first line not read, counted once in its `rejected` and last
        error) and finished; looked at again only when the file changes."""
        self._gz.pop(row.pk, None)
        tail = f"; an unfinished line of {len(state.buffer)} bytes before it is lost" if state.buffer else ""
        why = f"{state.broken}; the rest of the file cannot be read{tail}"
        err = RecordError(row.name, row.line + 1, None, why)
        with self.engine.begin() as conn:
            cur = conn.execute(sa.select(S.c.offset, S.c.claimed_by).where(S.c.pk == row.pk).with_for_update()).first()
            if cur is None or cur.offset != row.offset or cur.claimed_by != self.worker_id:
                return 0  # moved on meanwhile: not ours to finish
            quarantine_many(conn, [err], context=self._context(row.name, row.format))
            again = row.last_error == str(err)  # the same damage seen again: its one entry, counted once
            conn.execute(S.update().where(S.c.pk == row.pk).values(
                status="done", last_error=str(err), rejected=S.c.rejected + (0 if again else 1),
                updated_at=models.utcnow()))
        self.log(f"{row.name}: {why}")  # once: the file is finished until it changes
        return 1

    def _whole_file(self, row, path: Path) -> int:
        """A JSON document or CSV: read whole once it has stopped changing, then marked done."""
        try:
            st = path.stat()
        except OSError:
            return 0
        if st.st_size != row.size or time.time() - st.st_mtime < self.settle:
            self._idle[row.pk] = (row.size, row.offset)
            return 0
        try:
            source = read_as(path, Path(row.name))  # its records keep the name it was first seen under
            reader = detect(source)
            if reader is None:
                return self._refuse(row, explain(source))
        except RecordError as exc:
            return self._refuse(row, exc.message)
        errors: list[RecordError] = []
        res: StoreResult = store(self.engine, read_records(reader, source, ReadContext(root=self._root_of(row.name)), errors),
                                 quarantine_context=self._context(row.name, reader.NAME),
                                 whole_file=(row.name, models.utcnow()))
        with self.engine.begin() as conn:
            conn.execute(S.update().where(S.c.pk == row.pk).values(
                offset=st.st_size, size=st.st_size, format=reader.NAME, status="done",
                records=res.inserted + res.replaced + res.unchanged, rejected=res.rejected,
                last_error=str(errors[-1]) if errors else None, updated_at=models.utcnow()))
        self._say_rejected(errors, res)
        return 1

    def _root_of(self, name: str) -> Path | None:
        """The spool directory a file was first seen in: missing rollout ids are derived from the
        file's path relative to it (ReadContext.source_key)."""
        path = Path(name)
        for d in self.dirs:
            if path.is_relative_to(d):
                return d
        return None

    def _context(self, name: str, fmt: str | None) -> dict:
        """How the worker read the file first seen as `name` (its working folder, the format,
        the spool folder ids are derived from), kept with its quarantined records so that
        `rollscope ingest --retry-quarantined` reads it the same way."""
        root = self._root_of(name)
        return asdict(IngestContext(cwd=os.getcwd(), format=fmt, root=str(root.resolve()) if root else None))

    def _refuse(self, row, why: str) -> int:
        err = RecordError(row.name, None, None, why)
        with self.engine.begin() as conn:
            quarantine_many(conn, [err], context=self._context(row.name, None))
            # one quarantine entry, counted once: the same refusal again (the file grew) adds nothing
            again = row.last_error == why
            conn.execute(S.update().where(S.c.pk == row.pk).values(
                status="done", last_error=why, rejected=S.c.rejected + (0 if again else 1), updated_at=models.utcnow()))
        self.log(f"{row.name}: {why}")
        return 1
