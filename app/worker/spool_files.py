"""Which file is which in a spool folder: files are known by device and inode (a rename keeps
its offset and its name), and by their first bytes and the bytes before their offset (a rewrite,
a truncation or another file on a recycled inode changes them, and the file is read again from
the start). `sync_files` records what a look at the folders found; app/worker/spool.py explains
the rules as a whole. The `/v1/traces` receiver's spool (app/worker/trace_spool.py) uses `scan`
and the same table."""
from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from app.db import models
from app.db.engine import insert_for
from ingest.gzstream import is_gzip
from ingest.source import SQLITE_MAGIC

S = models.SpoolFile.__table__
INGEST = "ingest"  # spool_file.spool of the worker's files
HEAD_BYTES = 256  # first bytes kept per file: a rewrite changes them
TAIL_BYTES = 64  # bytes kept before a plain file's offset: another file that begins alike differs there
SKIPPED_SUFFIXES = (".tmp", ".part", ".partial", ".swp")
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")  # beside a SQLite database, while it is written
LOCK_SUFFIX = ".worker.lock"  # beside a SQLite database: the worker's lock (app/worker/run.py `sqlite_lock`)
SQLITE_REFUSED = ("a SQLite database file: not tailed (it changes in place, and the worker's own database may be "
                  "one); ingest a finished one with `rollscope ingest`")


def roots_of(dirs: list[Path], cwd: str | None = None) -> list[Path]:
    """The spool folders `dirs`, resolved (links followed, relative ones against `cwd`, by default
    the working folder): what `within` compares paths with."""
    return [Path(os.path.realpath(Path(cwd or os.getcwd()) / d)) for d in dirs]


def within(path: str, roots: list[Path]) -> bool:
    """Whether the file at `path` (it may be gone) is in one of the resolved spool folders `roots`,
    compared by path components (`/tmp/AB/x` is not in `/tmp/A`)."""
    real = Path(os.path.realpath(path))
    return any(real.is_relative_to(r) for r in roots)


def own_files(engine: Engine, *extra: Path | None) -> list[Path]:
    """The files a worker on `engine` writes itself and never reads as traces: a SQLite database,
    its `-wal`, `-shm` and `-journal` files and its worker lock (by the database's path as given
    and resolved), and `extra` (the `--heartbeat` file)."""
    out = [p for p in extra if p is not None]
    db = engine.url.database or "" if engine.dialect.name == "sqlite" else ""
    if db not in ("", ":memory:"):
        for base in {Path(db), Path(db).resolve()}:
            out += [base, base.with_name(base.name + LOCK_SUFFIX),
                    *(base.with_name(base.name + side) for side in SQLITE_SIDE_FILES)]
    return out


def _identities(paths: list[Path]) -> set[tuple[int, int]]:
    """(device, inode) of those of `paths` that exist now (a -wal file comes and goes)."""
    out = set()
    for p in paths:
        try:
            st = p.stat()
        except OSError:
            continue
        out.add((st.st_dev, st.st_ino))
    return out


def _beside_sqlite(path: Path) -> bool:
    """A SQLite database's side file (`x.db-wal`, `-shm`, `-journal`) or a worker's lock file, of
    any database: never a trace file."""
    name = path.name
    if name.endswith(LOCK_SUFFIX):
        return True
    for side in SQLITE_SIDE_FILES:
        if name.endswith(side) and len(name) > len(side):
            return _bytes_at(path.with_name(name[:-len(side)]), 0, len(SQLITE_MAGIC)) == SQLITE_MAGIC
    return False


def is_sqlite(head: bytes) -> bool:
    """Whether a file's first bytes are a SQLite database's header (`SQLite format 3\\0`)."""
    return head.startswith(SQLITE_MAGIC)


@dataclass
class Seen:
    """A file found in a spool directory."""

    path: Path
    device: int
    inode: int
    size: int
    mtime: float


def scan(dirs: list[Path], own: list[Path] = ()) -> dict[tuple[int, int], Seen]:
    """Regular files under `dirs` (recursively), by (device, inode). Hidden files and folders
    and temporary names (`.tmp`, `.part`, ...) are left alone: writers finish them first; so are
    the files of `own` (`own_files`: the worker's database and lock, even inside a spool folder)
    and any SQLite database's side files (`_beside_sqlite`)."""
    out: dict[tuple[int, int], Seen] = {}
    mine = _identities(list(own))
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
                if (st.st_dev, st.st_ino) in mine or _beside_sqlite(path):
                    continue
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


def tail_after(row, read: bytes) -> bytes | None:
    """The up to TAIL_BYTES bytes before the offset once `read` (the bytes read from the file's
    offset) is committed (None for gzip: its offsets count uncompressed bytes)."""
    if is_gzip(row.head):
        return None
    return read[-TAIL_BYTES:] if len(read) >= TAIL_BYTES else ((row.tail or b"") + read)[-TAIL_BYTES:]


def still_for(row, now, seconds: float, *, unknown: bool) -> bool:
    """Whether a file has not grown for `seconds` (`unknown` when it was never seen growing)."""
    grew = row.grew_at
    if grew is None:
        return unknown
    if grew.tzinfo is None:
        grew = grew.replace(tzinfo=now.tzinfo)
    return (now - grew).total_seconds() >= seconds


def since_growth(row, now) -> float:
    """Seconds since the file last grew (0 when unknown)."""
    grew = row.grew_at
    if grew is None:
        return 0.0
    if grew.tzinfo is None:
        grew = grew.replace(tzinfo=now.tzinfo)
    return max((now - grew).total_seconds(), 0.0)


def sync_files(engine: Engine, dirs: list[Path], *, log: Callable[[str], None], own: list[Path] = ()) -> set[int]:
    """Record new files, follow renames, notice truncation, rewrites and deletions. Returns the
    files (pk) to be read again from the start. Only files in `dirs` (resolved: `within`) are
    marked gone when they are not found: another worker's spool folder is not this one's to
    judge. `own`: files never read (`own_files`)."""
    seen = scan(dirs, own)
    roots = roots_of(dirs)
    now = models.utcnow()
    reset: set[int] = set()
    with engine.begin() as conn:
        rows = {(r.device, r.inode): r for r in conn.execute(sa.select(S).where(S.c.spool == INGEST))}
        taken = {r.name for r in rows.values()}
        new = []
        for key, s in seen.items():
            row = rows.get(key)
            if row is None:
                head = _head(s.path)
                new.append(dict(spool=INGEST, name=unique_name(str(s.path), taken), path=str(s.path),
                                device=s.device, inode=s.inode, head=head,
                                offset=0, line=0, size=s.size, status="active", records=0, rejected=0,
                                grew_at=now, updated_at=now))
                continue
            changes = _changes(row, s, now, taken, log)
            if changes.get("offset") == 0:
                reset.add(row.pk)
            if changes:
                conn.execute(S.update().where(S.c.pk == row.pk).values(**changes, updated_at=now))
        if new:
            conn.execute(insert_for(conn, S).on_conflict_do_nothing(index_elements=["device", "inode"]), new)
        for key, row in rows.items():
            if key not in seen and row.status != "gone" and within(row.path, roots):
                unread = max(row.size - row.offset, 0) if row.status == "active" else 0
                msg = f"deleted with {unread} bytes unread" if unread else None
                conn.execute(S.update().where(S.c.pk == row.pk)
                             .values(status="gone", last_error=msg or row.last_error, updated_at=now))
                if msg:
                    log(f"{row.name}: {msg}")
    return reset


def _changes(row, s: Seen, now, taken: set[str], log: Callable[[str], None]) -> dict:
    """What to update for a known file seen again (`taken`: the names in use, `unique_name`). A
    SQLite database refused once stays refused while it changes (its header changes with it)."""
    changes: dict = {}
    if str(s.path) != row.path:
        changes["path"] = str(s.path)  # renamed (rotated): same file, same offset, same name
    head = _head(s.path) if (s.size != row.size or len(row.head) < HEAD_BYTES) else row.head
    if is_sqlite(row.head) and is_sqlite(head):
        return changes | ({"size": s.size} if s.size != row.size else {})
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
        log(f"{row.name}: {why}; reading it again from the start")
        # its counts restart with it: they are the records of what the file holds now
        # said as a notice, not an error: nothing was lost; the errors of what it held before go with them
        changes.update(offset=0, line=0, records=0, rejected=0, head=head, tail=None, status="active", format=None,
                       last_error=None, notice=f"{why}; read again from the start", read_from=None, grew_at=now,
                       size=s.size)
        if str(s.path) != row.name and (row.status == "gone" or str(s.path) != row.path):
            changes["name"] = unique_name(str(s.path), taken)  # another file: never the old one's name
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
