"""Reading a spool file's next stretch of complete lines from its committed offset (app/worker/
spool.py writes them): plain files by bytes, gzip files as a stream (offsets count uncompressed
bytes: ingest/gzstream.py), and deciding how a file is read at all (tailed line by line, or
whole once it has stopped changing: `StretchReader.mode`). A last line without its newline waits
for it, until the file has not grown for `torn_after` seconds: then it is handed over as torn; so
does the first line of a file named as JSONL."""
from __future__ import annotations

import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.db import models
from app.worker.spool_files import still_for
from ingest import gzstream
from ingest.gzstream import GzState, inflate, is_gzip, new_state
from ingest.jsonio import loads
from ingest.source import later_line_is_object, text_encoding

MAX_LINE_BYTES = 1 << 30  # a line longer than this is refused, not buffered
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
PROBE_BYTES = 1 << 16  # read after a broken first line, for a complete later line that is a JSONL record
ENCODING_HEAD = 4096  # decompressed bytes of a gzip file looked at for its text's encoding (`text_encoding`)


def named_jsonl(row) -> bool:
    """Whether the file is named as JSONL (`.jsonl`, `.ndjson`, also rotated: `a.jsonl.1`), by
    the name it was first seen under."""
    return not JSONL_SUFFIXES.isdisjoint(Path(row.name).suffixes)


def read_whole_before(row) -> bool:
    """Whether the file was read whole (a JSON document, CSV, UTF-16 text: app/worker/spool.py
    `_whole_file` leaves its offset at the size read, no line count and no tail bytes) and so is
    read whole again when it changes: a JSON array completed after it was read torn, a CSV that
    grew. Tailing it from the offset would read the rest of a document as lines."""
    return row.offset > 0 and row.line == 0 and row.tail is None and row.format is not None \
        and not is_gzip(row.head)


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
class StretchReader:
    """Reads stretches of up to `batch_lines` lines or `batch_bytes` bytes, keeping one gzip
    stream state per file it tails. `say(pk, msg)` logs something about a file once."""

    say: Callable[[int, str], None]
    batch_lines: int = 200
    batch_bytes: int = 16 << 20
    torn_after: float = 30.0  # seconds without growth before a last line without newline is torn
    settle: float = 2.0  # seconds a non-JSONL file must stay unchanged before it is read
    gz: dict[int, GzState] = field(default_factory=dict)
    _wide: dict[tuple[int, bytes], bool] = field(default_factory=dict)  # (pk, head) → its gzip holds UTF-16/32

    def torn_due(self, row, now) -> bool:
        """Whether a last line without its newline now counts as torn."""
        return still_for(row, now, self.torn_after, unknown=False)

    def forget(self, pk: int) -> None:
        """Drop a file's gzip state (it is read again from the start)."""
        self.gz.pop(pk, None)
        self._wide = {k: v for k, v in self._wide.items() if k[0] != pk}

    def wide_gzip(self, row, path: Path) -> bool:
        """Whether a gzip file holds text that is not UTF-8 (UTF-16, UTF-32: `text_encoding`, as
        the CLI tells it), asked once per file and first bytes: it is read whole, decoded or
        refused naming the encoding, never tailed line by line as UTF-8."""
        key = (row.pk, bytes(row.head))
        if key not in self._wide:
            try:
                with path.open("rb") as f:
                    head = gzstream.head(f, ENCODING_HEAD)
            except (OSError, EOFError, zlib.error):
                return False  # the stream reader says what is wrong with it
            self._wide[key] = text_encoding(head) is not None
        return self._wide[key]

    def mode(self, row, path: Path) -> str | None:
        """"lines" (JSONL, gzip: tailed), "whole" (a JSON document, CSV, UTF-16/32 text, also
        gzipped: read once
        settled; again, whole, when it changes after), or None (too early to tell: the first line
        is not complete yet).

        A file named as JSONL (`named_jsonl`) whose first line has no newline yet waits for it as
        any last line does: until it ends, or until the file has not grown for `torn_after`
        seconds; then a line that is one JSON value is read (whole: one record), and one cut
        short is handed over as torn. It is never taken for a JSON document because its writer
        was slower than `settle`."""
        if is_gzip(row.head):
            return "whole" if self.wide_gzip(row, path) else "lines"
        if read_whole_before(row):
            return "whole"
        if row.offset > 0 or row.format:
            return "lines"
        if text_encoding(row.head) is not None:
            return "whole"  # UTF-16/32: decoded, or refused naming the encoding, by ingest/source.py
        try:
            with path.open("rb") as f:
                first = f.readline(MAX_LINE_BYTES)
                settled = time.time() - os.fstat(f.fileno()).st_mtime >= self.settle
                later = f.read(PROBE_BYTES)
        except OSError:
            return None
        if not first.endswith(b"\n"):
            if named_jsonl(row) and first.strip():
                if not self.torn_due(row, models.utcnow()):
                    return None
                try:
                    loads(first.removeprefix(b"\xef\xbb\xbf"))
                    return "whole"  # one record without its newline
                except (ValueError, UnicodeDecodeError):
                    return "lines"  # torn: quarantined as a torn first line by `read`
            return "whole" if settled and first.strip() else None
        try:
            if isinstance(loads(first.removeprefix(b"\xef\xbb\xbf")), dict):
                return "lines"
        except (ValueError, UnicodeDecodeError, RecursionError):
            pass
        # "{" alone: pretty-printed JSON, read whole once settled. But in a file named as JSONL a
        # broken first line followed by JSONL records (a writer that died mid-line and was
        # restarted: rollscope/client.py ends the torn line first) is JSONL, tailed at once: it
        # would never settle while records are appended. (Not by content alone: a document
        # `{"rollouts": [` with one element per line has such lines too; the CLI parses it whole
        # first, which a growing file cannot be.)
        opening = first.strip().removeprefix(b"\xef\xbb\xbf")
        if named_jsonl(row) and opening != b"{" and opening[:1] != b"[" and later_line_is_object(first + later):
            return "lines"
        return "whole"

    def finished(self, row, chunk: Chunk) -> bool:
        """A gzip stream read to its end (appending to a .gz is not a thing writers do); a
        corrupt one is finished by the spool's `_corrupt`, once what came before the damage is in."""
        state = self.gz.get(row.pk)
        return state is not None and state.eof and state.broken is None and chunk.end >= state.out_pos

    def after_commit(self, row, chunk: Chunk) -> None:
        """Drop what a committed stretch took from the file's gzip buffer."""
        state = self.gz.get(row.pk)
        if state is not None:
            state.buffer = state.buffer[chunk.end - (state.out_pos - len(state.buffer)):]

    def read(self, row, path: Path, at: tuple[int, int] | None = None) -> Chunk | None:
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
            self.say(row.pk, f"{row.name}: cannot read: {exc}")
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
        if data and at_eof and self.torn_due(row, models.utcnow()):
            return Chunk(b"", offset, offset + len(data), line, 0, torn=data)
        return None

    def _read_gz(self, row, path: Path) -> Chunk | None:
        """Complete lines of a gzip stream from uncompressed offset `row.offset`. A file of
        several gzip members (`gzip >> file`, also appended later) is read member after member,
        as `gzip -d` does; a stream whose writer died mid-member ends as a torn last line."""
        state = self.gz.get(row.pk)
        if state is not None and state.broken is not None and state.out_pos - len(state.buffer) == row.offset:
            return self._cut(row, state.buffer, at_eof=False)  # the whole lines before the damage
        if state is None or state.out_pos - len(state.buffer) != row.offset:
            state = new_state()
            self.gz[row.pk] = state
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
            self.gz.pop(row.pk, None)
            self.say(row.pk, f"{row.name}: cannot read: {exc}")
            return None
        if state.broken is not None:
            return self._cut(row, state.buffer, at_eof=False)  # whole lines first; then `_corrupt`
        return self._cut(row, state.buffer, at_eof=at_end)
