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

S = models.SpoolFile.__table__
INGEST = "ingest"  # spool_file.spool of the worker's files
HEAD_BYTES = 256  # first bytes kept per file: a rewrite changes them
TAIL_BYTES = 64  # bytes kept before a plain file's offset: another file that begins alike differs there
SKIPPED_SUFFIXES = (".tmp", ".part", ".partial", ".swp")


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


def sync_files(engine: Engine, dirs: list[Path], *, log: Callable[[str], None]) -> set[int]:
    """Record new files, follow renames, notice truncation, rewrites and deletions. Returns the
    files (pk) to be read again from the start."""
    seen = scan(dirs)
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
            if key not in seen and row.status != "gone":
                unread = max(row.size - row.offset, 0) if row.status == "active" else 0
                msg = f"deleted with {unread} bytes unread" if unread else None
                conn.execute(S.update().where(S.c.pk == row.pk)
                             .values(status="gone", last_error=msg or row.last_error, updated_at=now))
                if msg:
                    log(f"{row.name}: {msg}")
    return reset


def _changes(row, s: Seen, now, taken: set[str], log: Callable[[str], None]) -> dict:
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
