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
files (a JSON document, CSV, UTF-16 text) are read whole once they stop changing, and whole again
when they change after (a JSON array completed after it was read torn); a file named as JSONL
whose first line has not ended waits for it like any last line (app/worker/stretches.py `mode`).

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

The parts: which file is which (app/worker/spool_files.py), who reads which file
(app/worker/claims.py), reading a file's next stretch (app/worker/stretches.py), parsing
stretches ahead in parser processes (app/worker/parse.py), and here the drain loop that reads,
writes and commits them.

The `/v1/traces` receiver keeps the spans it has answered 200 for in a spool of its own
(app/worker/trace_spool.py: one file per trace, `spool_file.spool = "otlp"`), on the same table
and the same rule: a file's offset moves in the transaction that writes its rows. This worker
never touches those rows.
"""
from __future__ import annotations

import os
import re
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from app.store.quarantine import IngestContext, clear_unseen, clear_whole_file, quarantine_many, with_source
from app.store.write import StoreResult, store, write_in
from app.worker.claims import LEASE, Claims
from app.worker.parse import Parsed, Parsers, Stretch, pieces, sniff_format
from app.worker.spool_files import (
    INGEST,
    SQLITE_REFUSED,
    TAIL_BYTES,
    S,
    is_sqlite,
    own_files,
    roots_of,
    since_growth,
    still_for,
    sync_files,
    tail_after,
    within,
)
from app.worker.stretches import Chunk, StretchReader, named_jsonl, read_whole_before
from ingest.errors import RecordError
from ingest.files import read_records
from ingest.formats.base import ReadContext
from ingest.formats.registry import detect, explain
from ingest.gzstream import GzState, is_gzip
from ingest.source import read_as

REJECTED_SHOWN = 5  # rejected records named on stderr per stretch read; the rest are counted in one line
REJECTED_CHARS = 300  # a rejection's line is cut here (its whole text is in the quarantine)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\s]+")


@dataclass
class Left:
    """A file a pass left with bytes unread: `name`, `why` (for a person), and `due`: seconds
    until waiting may change that (a document settles, a last line counts as torn), or None."""

    name: str
    why: str
    due: float | None = None



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
    log: Callable[[str], None] = lambda _msg: None
    parsers: int = 0  # processes parsing the next stretches of a file while one is written (app/worker/parse.py)
    own: list[Path] = field(default_factory=list)  # files of the worker's own, never read (`own_files`: + the db)
    _idle: dict[int, tuple[int, int]] = field(default_factory=dict)  # pk → (size, offset) when nothing was readable
    # pk → stretches read ahead of the file's offset, in order, each in pieces parsed here or in
    # the pool (app/worker/parse.py `Stretch`)
    _ahead: dict[int, deque[Stretch]] = field(default_factory=dict)
    _pool: Parsers = field(init=False)
    _parse_ahead: bool = field(init=False, default=False)
    _said: dict[int, str] = field(default_factory=dict)  # pk → the last wait or takeover said of it
    _notes: dict[int, tuple[str, bool]] = field(default_factory=dict)  # pk → (said, is an error), to store
    claims: Claims = field(init=False)
    roots: list[Path] = field(init=False)  # `dirs` resolved (spool_files `roots_of`)
    reader: StretchReader = field(init=False)

    def __post_init__(self) -> None:
        self.own = own_files(self.engine, *self.own)
        self.roots = roots_of(self.dirs)
        # waits and takeovers: notices; only files in our folders are claimed
        self.claims = Claims(self.engine, self._say, mine=lambda path: within(path, self.roots))
        # what the reader says is that a file cannot be read: an error
        self.reader = StretchReader(self._say_error, self.batch_lines, self.batch_bytes, self.torn_after, self.settle)
        self._pool = Parsers(self.parsers, log=self.log)
        self._pool.warm()
        # without parser processes, a thread parses ahead only where the database works in its
        # own process (Postgres): the worker waits on it meanwhile. On SQLite the write is the
        # worker's own CPU, and a second thread only contends for Python's lock (measured: no gain)
        self._parse_ahead = self.parsers > 0 or self.engine.dialect.name != "sqlite"

    @property
    def worker_id(self) -> str:
        """`host:pid:s<key>` (app/worker/claims.py): it changes when its session key is taken."""
        return self.claims.worker_id

    def release_claims(self) -> None:
        """Let go of every file claim (SQLite, at start: `Claims.release_all`)."""
        self.claims.release_all()

    def hold_session(self) -> None:
        """Postgres: hold this worker's session lock (`Claims.hold_session`)."""
        self.claims.hold_session()

    def close(self) -> None:
        """Stop the parser processes (stretches parsed but not written are read again next time)
        and let go of the session lock."""
        self._ahead.clear()
        self._pool.close()
        self.claims.drop_session()

    def _say(self, pk: int, msg: str, *, error: bool = False) -> None:
        """Log `msg` about a file once (until something else is said about it), and keep it for
        the status page: a notice (a wait for another worker's lease, a takeover), or with
        `error` the file's last error (it cannot be read). Stored by `_store_notes` once no
        transaction of this worker holds the file's row (`say` is called inside claims)."""
        if self._said.get(pk) != msg:
            self._said[pk] = msg
            self.log(msg)
            self._notes[pk] = (msg, error)

    def _say_error(self, pk: int, msg: str) -> None:
        self._say(pk, msg, error=True)

    def _store_notes(self) -> None:
        """Store what was said of files since the last call (`notice`, or `last_error`), each
        without the file's name it starts with (the status row names the file)."""
        if not self._notes:
            return
        notes, self._notes = self._notes, {}
        with self.engine.begin() as conn:
            names = dict(conn.execute(sa.select(S.c.pk, S.c.name).where(S.c.pk.in_(sorted(notes)))).all())
            for pk, (msg, error) in notes.items():
                if pk in names:
                    msg = msg.removeprefix(f"{names[pk]}: ")
                    conn.execute(S.update().where(S.c.pk == pk).values({"last_error" if error else "notice": msg}))

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
            if not within(row.path, self.roots):
                continue  # another worker's spool folder
            try:
                st = Path(row.path).stat()
            except OSError:
                continue  # gone since: the next pass marks it
            grew = since_growth(row, now)
            if row.claimed_by not in (None, self.worker_id) and row.claimed_until is not None \
                    and row.claimed_until >= now:
                out.append(Left(row.name, f"held by worker {row.claimed_by} until "
                                          f"{row.claimed_until:%Y-%m-%d %H:%M:%S} UTC"))
            elif is_gzip(row.head) and not self.reader.wide_gzip(row, Path(row.path)):
                out.append(Left(row.name, "its gzip stream has not ended: read on when more of it arrives, or its "
                                          f"last line reported as torn once the file has not grown for "
                                          f"{self.torn_after:g} s", max(self.torn_after - grew, 0.0)))
            elif st.st_size <= row.offset:
                continue
            elif row.offset == 0 and not row.format and (not named_jsonl(row) or is_gzip(row.head)) \
                    or read_whole_before(row):  # a gzip file here holds UTF-16/32 text: read whole
                age = min(wall - st.st_mtime, grew)
                out.append(Left(row.name, f"still changing: a JSON document or CSV is read once it has not "
                                          f"changed for {self.settle:g} s", max(self.settle - age, 0.0)))
            else:
                which = "first" if row.offset == 0 else "last"
                out.append(Left(row.name, f"its {which} line has no newline yet ({st.st_size - row.offset} bytes): "
                                          "it is read when the line ends, or reported as torn once the file has "
                                          f"not grown for {self.torn_after:g} s", max(self.torn_after - grew, 0.0)))
        return out

    # --- discovering files -------------------------------------------------------------------

    def sync_files(self) -> None:
        """Record new files, follow renames, notice truncation, rewrites and deletions
        (app/worker/spool_files.py); a file read again from the start loses its gzip state."""
        self.claims.foreign.clear()  # a file renamed into our folders is ours now
        for pk in sync_files(self.engine, self.dirs, log=self.log, own=self.own):
            self.reader.forget(pk)

    # --- claiming and reading -----------------------------------------------------------------

    def work(self, stop: Callable[[], bool] = lambda: False, *, budget: float = 2.0) -> int:
        """Claim files with something to read and read them, for about `budget` seconds.
        Returns the number of chunks committed."""
        done = 0
        started = time.monotonic()
        tried: set[int] = set()
        self.hold_session()
        while not stop() and time.monotonic() - started < budget:
            row = self.claims.claim(tried, nothing_new=self._nothing_new)
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
                self._store_notes()
        self._store_notes()  # what was said of files no claim was taken of (a wait for a lease)
        return done

    def _nothing_new(self, row, now) -> bool:
        """Nothing was readable at the last look, the file is the same size at the same offset,
        and waiting has not changed that yet (`_due`)."""
        return self._idle.get(row.pk) == (row.size, row.offset) and not self._due(row, now)

    def _due(self, row, now) -> bool:
        """A file with nothing new is looked at again once waiting may have changed the answer:
        a file not yet read (a JSON document or CSV, read whole once it settles) after `settle`
        seconds, a last line without its newline after `torn_after`."""
        if (row.offset == 0 and not row.format or read_whole_before(row)) \
                and still_for(row, now, self.settle, unknown=True):
            return True
        return self.reader.torn_due(row, now)

    def _reload(self, pk: int):
        with self.engine.connect() as conn:
            return conn.execute(sa.select(S).where(S.c.pk == pk)).first()

    def _release(self, pk: int | None) -> None:
        if pk is None:
            return
        for stretch in self._ahead.pop(pk, ()):  # stale once let go: another worker may move on
            for piece in stretch.pieces:
                if isinstance(piece.job, Future):
                    piece.job.cancel()
        self.claims.release(pk)

    def _step(self, row, *, read_ahead: bool = True) -> int:
        """Read and commit one chunk of a claimed file; 0 when nothing could be read.
        `read_ahead`: whether the next stretches may be read and parsed while this one is written."""
        path = Path(row.path)
        if is_sqlite(row.head):  # refused once: while it changes it stays refused (spool_files `_changes`)
            return self._refuse(row, SQLITE_REFUSED)
        mode = self.reader.mode(row, path)
        if mode is None:
            self._idle[row.pk] = (row.size, row.offset)
            return 0
        if mode == "whole":
            return self._whole_file(row, path)
        chunk, stretch = self._next_chunk(row, path, read_ahead=read_ahead)
        if chunk is None:
            state = self.reader.gz.get(row.pk)
            if state is not None and state.broken is not None:  # every whole line before it is in
                return self._corrupt(row, state)
            self._idle[row.pk] = (row.size, row.offset)
            return 0
        self._idle.pop(row.pk, None)
        parsed = self._parsed(row, chunk, stretch)
        if parsed.refused is not None:
            self._ahead.pop(row.pk, None)
            return self._refuse(row, parsed.refused)
        prepared, rejected, fmt = parsed.prepared, parsed.rejected, parsed.fmt or row.format
        if chunk.torn is not None:
            errors_line = chunk.line + chunk.n_lines + 1
            raw = chunk.torn[:4096].decode("utf-8", "replace")
            rejected.append(RecordError(row.name, errors_line, None,
                                        f"torn last line (starts at byte {chunk.end - len(chunk.torn)}): "
                                        "no newline and the file "
                                        f"stopped growing for {self.torn_after:g} s "
                                        "(a writer stopped mid-record); skipped",
                                        raw))
        with self.engine.begin() as conn:
            cur = conn.execute(sa.select(S.c.offset, S.c.claimed_by, S.c.read_from).where(S.c.pk == row.pk)
                               .with_for_update()).first()
            if cur is None or cur.offset != chunk.start or cur.claimed_by != self.worker_id:
                self._ahead.pop(row.pk, None)
                return 0  # another worker moved it on, or it was reset: this stretch is not ours
            read_from = models.utcnow() if chunk.start == 0 else cur.read_from
            if chunk.start == 0:  # read line by line from its start: a whole-file rejection says nothing more
                clear_whole_file(conn, row.name, before=read_from)
            res = write_in(conn, prepared, rejected, quarantine_context=self._context(row, fmt))
            if read_from is not None and self._at_end(row, path, chunk):
                # read from its first byte to its end: what it no longer rejects leaves the quarantine
                res.unseen += clear_unseen(conn, row.name, since=read_from)
                read_from = None
            # a torn line has not ended: what its writer appends later (the rest of it, or a next
            # record after a restart) is on the same line, and keeps its number
            n_lines = chunk.n_lines
            # a stretch from byte 0 starts the counts again, whatever reset the offset (a rewrite,
            # a truncation, an inode reused): a record read twice is never counted twice
            before = (0, 0) if chunk.start == 0 else (S.c.records, S.c.rejected)
            conn.execute(S.update().where(S.c.pk == row.pk).values(
                offset=chunk.end, line=chunk.line + n_lines, format=fmt,
                tail=tail_after(row, chunk.data or chunk.torn or b""),
                records=before[0] + res.inserted + res.replaced + res.unchanged,
                rejected=before[1] + res.rejected, claimed_until=models.utcnow() + LEASE,
                records_total=S.c.records_total + res.inserted + res.replaced + res.unchanged,
                rejected_total=S.c.rejected_total + res.rejected,
                last_error=(str(rejected[-1]) if rejected else row.last_error), updated_at=models.utcnow(),
                read_from=read_from,
                status="done" if self.reader.finished(row, chunk) else "active"))
        self.reader.after_commit(row, chunk)
        self._say_rejected(rejected, res)
        return 1

    def _at_end(self, row, path: Path, chunk: Chunk) -> bool:
        """Whether `chunk` ends where the file ends now (a gzip stream: at its end)."""
        if is_gzip(row.head):
            return self.reader.finished(row, chunk)
        try:
            return path.stat().st_size <= chunk.end
        except OSError:
            return False

    def _say_rejected(self, rejected: list[RecordError], res: StoreResult) -> None:
        """Name a committed stretch's rejected records on the log (stderr): those read as bad and
        those the database refused, at most REJECTED_SHOWN of them (rejected_lines)."""
        refused = [e for e in res.errors if not any(e is r for r in rejected)]
        for msg in rejected_lines(rejected + refused):
            self.log(msg)

    def _next_chunk(self, row, path: Path, *, read_ahead: bool = True) -> tuple[Chunk | None, Stretch | None]:
        """The stretch at the file's stored offset, with the pieces it is parsed in.

        A plain JSONL file whose format is known (or told by its first records, `sniff_format`)
        is read ahead, up to `parsers` + 2 stretches (2 without parser processes, on Postgres;
        none on SQLite), and their pieces are parsed in the pool (`Parsers`: processes, or one
        thread) while the worker writes. A lone stretch (nothing more to read yet) is parsed
        here, in pieces shared with the pool when there are parser processes."""
        ahead = self._ahead.get(row.pk)
        if ahead and ahead[0].chunk.start != row.offset:
            ahead = None  # the offset moved (another worker, a truncation): what was read ahead is stale
        if not ahead:
            self._ahead.pop(row.pk, None)
            chunk = self.reader.read(row, path)
            if chunk is None:
                return None, None
            ahead = self._ahead[row.pk] = deque([self._stretch(row, chunk, row.format)])
        fmt = ahead[0].pieces[0].args[4] if ahead[0].pieces else None
        if read_ahead and self._parse_ahead and fmt and not is_gzip(row.head):
            while len(ahead) <= (self.parsers + 1 if self.parsers else 1) and ahead[-1].chunk.torn is None:
                last = ahead[-1].chunk
                nxt = self.reader.read(row, path, at=(last.end, last.line + last.n_lines))
                if nxt is None:
                    break
                ahead.append(self._stretch(row, nxt, fmt))
            if len(ahead) > 1 or self.parsers:
                self._pool.top_up(ahead)
        head = ahead.popleft()
        return head.chunk, head

    def _stretch(self, row, chunk: Chunk, fmt: str | None) -> Stretch:
        """`chunk` and its pieces: one without parser processes, else up to two per parser and
        one for the worker. A file of no known format yet is told by the stretch at its start
        (`sniff_format`); when that fails the stretch is parsed whole, as one piece."""
        if not chunk.data:
            return Stretch(chunk, [])
        if fmt is None and self.parsers and chunk.start == 0 and not is_gzip(row.head):
            fmt = sniff_format(chunk.data, row.name, chunk.line)
        k = 2 * (self.parsers + 1) if self.parsers and fmt else 1
        return Stretch(chunk, pieces(chunk.data, row.name, chunk.start, chunk.line, chunk.n_lines, fmt,
                                     self._root_of(row.name), k))

    def _parsed(self, row, chunk: Chunk, stretch: Stretch | None) -> Parsed:
        """The stretch's parse, shared between the worker and the pool (`Parsers.parsed`)."""
        if not chunk.data or stretch is None or not stretch.pieces:
            return Parsed(row.format)
        return self._pool.parsed(stretch, self._ahead.get(row.pk) or ())

    def _corrupt(self, row, state: GzState) -> int:
        """A gzip file whose data is damaged, read up to the damage: rejected once (one
        quarantine entry at the first line not read, counted once in its `rejected` and last
        error) and finished; looked at again only when the file changes."""
        self.reader.forget(row.pk)
        tail = f"; an unfinished line of {len(state.buffer)} bytes before it is lost" if state.buffer else ""
        why = f"{state.broken}; the rest of the file cannot be read{tail}"
        err = RecordError(row.name, row.line + 1, None, why)
        with self.engine.begin() as conn:
            cur = conn.execute(sa.select(S.c.offset, S.c.claimed_by).where(S.c.pk == row.pk).with_for_update()).first()
            if cur is None or cur.offset != row.offset or cur.claimed_by != self.worker_id:
                return 0  # moved on meanwhile: not ours to finish
            quarantine_many(conn, [err], context=self._context(row, row.format))
            again = row.last_error == str(err)  # the same damage seen again: its one entry, counted once
            conn.execute(S.update().where(S.c.pk == row.pk).values(
                status="done", last_error=str(err), rejected=S.c.rejected + (0 if again else 1),
                rejected_total=S.c.rejected_total + (0 if again else 1), updated_at=models.utcnow()))
        self.log(f"{row.name}: {why}")  # once: the file is finished until it changes
        return 1

    def _whole_file(self, row, path: Path) -> int:
        """A JSON document or CSV: read whole once it has stopped changing, then marked done; read
        whole again, from the start, when it changes after (`read_whole_before`): a JSON array
        read torn keeps its complete elements, and the rest lands when the file is completed (its
        torn tail's entry then leaves the quarantine: `store(whole_file=...)`). A file that turned
        out to be JSONL (its first line broken) is tailed from there on."""
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
            why = explain(source) if reader is None else None
        except RecordError as exc:
            why = exc.message
        if why is not None:
            if _changed_since(path, st):  # rewritten while it was read (truncated, then written): not its verdict
                self._idle[row.pk] = (row.size, row.offset)
                return 0
            return self._refuse(row, why)
        errors: list[RecordError] = []
        res: StoreResult = store(self.engine,
                                 read_records(reader, source, ReadContext(root=self._root_of(row.name)), errors),
                                 quarantine_context=self._context(row, reader.NAME),
                                 whole_file=(row.name, models.utcnow()))
        line, tail = _tailable(source, path, st.st_size)
        with self.engine.begin() as conn:
            conn.execute(S.update().where(S.c.pk == row.pk).values(
                offset=st.st_size, size=st.st_size, format=reader.NAME, status="done", line=line, tail=tail,
                records=res.inserted + res.replaced + res.unchanged, rejected=res.rejected,
                records_total=S.c.records_total + res.inserted + res.replaced + res.unchanged,
                rejected_total=S.c.rejected_total + res.rejected,
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

    def _context(self, row, fmt: str | None) -> dict:
        """How the worker read the file first seen as `row.name` (its working folder, the format,
        the spool folder ids are derived from), kept with its quarantined records so that
        `rollscope ingest --retry-quarantined` reads it the same way; and where it is now
        (`row.path`, the quarantine's `source`)."""
        root = self._root_of(row.name)
        ctx = IngestContext(cwd=os.getcwd(), format=fmt, root=str(root.resolve()) if root else None)
        return with_source(asdict(ctx), row.path)

    def _refuse(self, row, why: str) -> int:
        err = RecordError(row.name, None, None, why)
        with self.engine.begin() as conn:
            quarantine_many(conn, [err], context=self._context(row, None))
            # one quarantine entry, counted once: the same refusal again (the file grew) adds nothing
            again = row.last_error == why
            conn.execute(S.update().where(S.c.pk == row.pk).values(
                status="done", last_error=why, rejected=S.c.rejected + (0 if again else 1),
                rejected_total=S.c.rejected_total + (0 if again else 1), updated_at=models.utcnow()))
        self.log(f"{row.name}: {why}")
        return 1


def _changed_since(path: Path, st: os.stat_result) -> bool:
    """Whether `path` is no longer the file `st` described (another size or modification time, or gone)."""
    try:
        now = path.stat()
    except OSError:
        return True
    return (now.st_size, now.st_mtime_ns) != (st.st_size, st.st_mtime_ns)


def _tailable(source, path: Path, size: int) -> tuple[int, bytes | None]:
    """(line count, the bytes before `size`) to commit after reading `path` whole, so that it is
    tailed from there when it grows: for a plain JSONL file ending with its newline. (0, None) for
    anything else (a document, CSV, decoded UTF-16, a file cut mid-line): `read_whole_before`
    then reads it whole again when it changes."""
    if source.kind != "jsonl" or source.data is not None or source.gzip:
        return 0, None
    lines, before = 0, b""
    try:
        with path.open("rb") as f:
            while f.tell() < size:
                block = f.read(min(1 << 20, size - f.tell()))
                if not block:
                    break
                lines += block.count(b"\n")
                before = (before + block)[-TAIL_BYTES:]
    except OSError:
        return 0, None
    return (lines, before) if before.endswith(b"\n") and lines else (0, None)
