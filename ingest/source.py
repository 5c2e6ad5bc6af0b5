"""Opening a trace file: JSON document, JSONL, or CSV, read leniently and with positions.

- Only regular files are read (a FIFO or a link to /dev/zero would never end).
- JSONL and CSV are streamed line by line, so memory stays bounded by the longest record;
  a JSON document is read whole (it is one value), except a top-level array larger than
  `STREAM_BYTES`: its elements are cut out of the file one at a time (`elements()`), so memory
  stays bounded by the largest element whatever the file's size (a 124 MB array took 630 MB
  parsed whole), each byte searched and each element parsed once (time linear in the file,
  however long one element). Readers iterate a document's records with `records()`, which
  serves both; an array that is one record, not a list of them, is read whole after all
  (`load_whole`, decided by ingest/formats/registry.py `detect`).
- The format is decided by content: a first line that is a JSON value followed by more lines is
  JSONL. A JSONL file whose first line is broken (a torn JSON value, or not JSON at all) is still
  JSONL when a later line parses as an object, so one bad first line costs one record, not the file.
- JSON is parsed with orjson; when orjson refuses (bare NaN/Infinity, which Python's json.dumps
  writes; lone surrogates), the standard library parser takes over, so such files load: the
  non-finite values reach the reader as float('nan') / float('inf'), and lone surrogates (which
  UTF-8 cannot carry) become U+FFFD. Nesting deeper than the parser allows is a RecordError.
- A UTF-8 byte-order mark is ignored. A UTF-16 file (LE or BE) with its byte-order mark is
  decoded to UTF-8 (in memory, up to `MAX_WIDE_BYTES`) and read like any other; UTF-32 (with a
  mark or without: told by its NUL pattern), and UTF-16 without a mark, are refused naming the
  encoding (never called binary). `text_encoding` decides; the worker asks it too.
- A top-level JSON array cut short (`[{...}, {...}, {"a": `: a writer stopped mid-array) keeps
  its complete elements; the torn tail is one RecordError naming the element, its line and byte
  and what is missing (`Source.torn`, yielded after the records by ingest/files.py).
- A Parquet file (magic `PAR1`) opens as kind 'parquet': `parquet_rows()` streams its rows as
  dicts, one record batch at a time (pyarrow); the training samples `rollscope export --format
  parquet` writes are read back this way (by the verl reader).
- A gzip file (magic bytes 1f 8b, whatever its name) is read through the decompressor, streamed
  like the file it holds: every reader sees the uncompressed JSON, JSONL or CSV, and `size` is
  the uncompressed size the gzip trailer records (an estimate for progress past 4 GiB).
- Zip archives (Inspect's `.eval` logs, zipped run folders) open as kind 'zip': `members()`
  lists the files inside and `open_member(name)` opens one as its own Source (JSON, JSONL or CSV by
  the same rules), named `<archive>!<member>` in errors. Members are read into memory one at a
  time and refused past `MAX_MEMBER_BYTES` uncompressed (a zip bomb is refused, not unpacked).
"""
from __future__ import annotations

import csv
import gzip
import io
import itertools
import re
import stat
import sys
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard

from ingest import gzstream
from ingest.errors import RecordError
from ingest.jsonio import cut_short, loads
from ingest.ziparchive import UnsupportedCompression, read_member

HEAD_BYTES = 1 << 16  # what is read to decide the format of a file
PROBE_LINES = 50  # lines tried for a first good record when the first line is broken
BOM = b"\xef\xbb\xbf"
CUT_STREAM = b"<the compressed stream ends here>"  # yielded (by identity) where a gzip file is cut short
ZIP_MAGIC = b"PK\x03\x04"
PARQUET_MAGIC = b"PAR1"
SQLITE_MAGIC = b"SQLite format 3\x00"  # a SQLite database (Trackio's `<project>.db`): kind 'sqlite'
EMPTY_ZIP_MAGIC = b"PK\x05\x06"
MAX_MEMBER_BYTES = 1 << 30  # 1 GiB uncompressed per zip member
STREAM_BYTES = 32 << 20  # a top-level JSON array larger than this is streamed, element by element
MAX_WIDE_BYTES = 1 << 30  # a UTF-16 file is decoded to UTF-8 in memory, up to this size
# byte-order marks of text that is not UTF-8 (UTF-32 LE first: it begins as UTF-16 LE's)
WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32LE"), (b"\x00\x00\xfe\xff", "UTF-32BE"), (b"\xff\xfe", "UTF-16LE"),
             (b"\xfe\xff", "UTF-16BE"))
READ_CHUNK = 1 << 20  # bytes read at a time while streaming an array
READ_BUFFER = 1 << 20  # the buffer of a file read line by line


@dataclass
class Source:
    """One input file, opened. `kind` is 'json' (one document), 'jsonl', 'csv', 'zip' or 'parquet'.

    `first` is the first good record (the whole document for 'json'; the sorted member names
    for 'zip'), which readers sniff. `member`: for a file inside a zip archive, its name there
    (its bytes are held in `data`).
    `position` is the number of bytes consumed so far (for progress bars); `last_raw` the text
    of the line most recently read (for quarantining a record a reader rejects).
    """

    path: Path
    kind: str
    first: Any
    document: Any = None
    size: int = 0
    position: int = 0
    last_line: int | None = None
    last_raw: str | None = field(default=None, repr=False)
    member: str | None = None
    data: bytes | None = field(default=None, repr=False)
    line_base: int = 0  # lines before `data` in the file (a worker reading a stretch of a file)
    streamed: bool = False  # a top-level array too big to load: `document` is None, `first` its first element in a list
    gzip: bool = False  # the file on disk is gzip; everything read from it is decompressed
    # where the bytes are when not at `path`: a spool file renamed since it was first seen keeps
    # its first name as `path` (what its records are known by) and is read from here (`read_as`)
    file: Path | None = None
    stream_error: str | None = None  # why a gzip stream ended early (its cut is one rejected line)
    # a JSON array cut short (a writer stopped mid-array): `document` holds its complete elements
    # and this names the torn tail; `ingest.files.read_records` yields it after the records
    torn: RecordError | None = None
    decoded_from: str | None = None  # `UTF-16LE` / `UTF-16BE`: the file's text, decoded to UTF-8 in `data`
    # a streamed array's elements from its first good one on, cut out and parsed once while opening
    # (for `first`): the next `elements()` continues from there instead of reading them again
    pending: Iterator[tuple[int, Any]] | None = field(default=None, repr=False)

    @property
    def disk(self) -> Path:
        """The file the bytes are read from (`file`, else `path`)."""
        return self.file or self.path

    @property
    def name(self) -> str:
        return str(self.path) if self.member is None else f"{self.path}!{self.member}"

    def open(self):
        """The file's content as a binary stream (a zip member's bytes; a gzip file decompressed)."""
        if self.data is not None:
            return io.BytesIO(self.data)
        # a 1 MB buffer: a 100 KB line is read in one refill, not a dozen (measured: the lines of a
        # 31 MB file iterated in 7-14 ms instead of 25)
        return gzip.open(self.disk, "rb") if self.gzip else self.disk.open("rb", buffering=READ_BUFFER)

    _open = open

    def read_bytes(self) -> bytes:
        """The whole file (or zip member) as bytes, decompressed when the file is gzip."""
        if self.data is not None:
            return self.data
        if self.gzip:
            with self.open() as f:
                return f.read()
        return self.disk.read_bytes()

    def members(self) -> list[str]:
        """The file names inside a zip archive (directories left out), sorted; [] otherwise."""
        if self.kind != "zip":
            return []
        with zipfile.ZipFile(self.disk) as z:
            return sorted(i.filename for i in z.infolist() if not i.is_dir())

    def open_member(self, name: str) -> "Source":
        """One file inside this zip archive, opened as its own Source (JSON, JSONL or CSV by
        content). Raises RecordError naming `<archive>!<member>` when it is missing, too large
        or not a trace file."""
        label = f"{self.path}!{name}"
        try:
            with zipfile.ZipFile(self.disk) as z:
                info = z.getinfo(name)
                if info.file_size > MAX_MEMBER_BYTES:
                    raise RecordError(label, None, None, f"zip member of {info.file_size} bytes is larger than "
                                                         f"{MAX_MEMBER_BYTES} bytes: refused")
                data = read_member(z, info)
        except KeyError:
            raise RecordError(label, None, None, "no such member in the zip archive") from None
        except (zipfile.BadZipFile, OSError, RuntimeError, UnsupportedCompression, zstandard.ZstdError) as exc:
            raise RecordError(label, None, None, f"cannot read zip member: {exc}") from None
        return _open_bytes(self.path, data, member=name)

    def _binary_lines(self) -> Iterator[tuple[int, bytes]]:
        lineno = self.line_base
        with self._open() as f:
            try:
                for lineno, raw in enumerate(f, start=1 + self.line_base):
                    if lineno == 1 and raw.startswith(BOM):
                        raw = raw[len(BOM):]
                    self.position += len(raw)
                    yield lineno, raw
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                # A gzip file cut short (a writer stopped mid-stream): the lines before the cut are
                # records like any other; the cut is one rejected line, never the whole file.
                self.stream_error = (f"the gzip stream ends early after line {lineno} ({type(exc).__name__}: "
                                     f"{exc}): what followed is lost")
                yield lineno + 1, CUT_STREAM

    def lines(self) -> Iterator[tuple[int, Any]]:
        """JSONL: (line number, parsed value or RecordError) for each non-empty line."""
        for lineno, raw in self.raw_lines():
            yield lineno, self.parse_line(lineno, raw)

    def raw_lines(self) -> Iterator[tuple[int, bytes]]:
        """JSONL: (line number, bytes) for each non-empty line, not parsed (for a reader that
        validates bytes directly, and `parse_line` when it cannot)."""
        for lineno, raw in self._binary_lines():
            if raw[:1].isspace() and not raw.strip():  # (a record's line starts with `{`: no copy of it)
                continue
            self.last_line = lineno
            self.last_raw = raw[:4096].decode("utf-8", "replace")
            yield lineno, raw

    def parse_line(self, lineno: int, raw: bytes) -> Any:
        """One JSONL line parsed, or a RecordError naming the line (torn or invalid JSON, or where a
        gzip stream was cut short)."""
        if raw is CUT_STREAM:
            return RecordError(self.name, lineno, None, self.stream_error or "the gzip stream ends early")
        try:
            return loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            return RecordError(self.name, lineno, None, _unparsed_line(raw, exc), self.last_raw)

    def records(self) -> Iterator[tuple[int | None, Any]]:
        """A JSON document's records: (i, element) for each element of a top-level array, else
        (None, the document). A streamed array's elements are read from the file one at a time;
        an element that is not valid JSON is a RecordError at `[i]` (with its raw text), and the
        elements after it are still read."""
        if self.streamed:
            yield from self.elements()
        elif isinstance(self.document, list):
            yield from enumerate(self.document)
        else:
            yield None, self.document

    def entries(self) -> Iterator[tuple[int | None, str, int, Any]]:
        """Every record of the file, whatever its kind, as (line, field prefix, index, value):
        a JSONL line is (its 1-based line, "", line - 1, value); an element of a JSON array is
        (None, "[i]", i, value); a single JSON document is (None, "", 0, value). The prefix
        starts the field name of a RecordError; the index numbers records for missing ids. A
        value may be a RecordError (a line or element that is not JSON)."""
        if self.kind == "jsonl":
            for line, value in self.lines():
                yield line, "", line - 1, value
            return
        for i, value in self.records():
            yield None, "" if i is None else f"[{i}]", i or 0, value

    def load_whole(self) -> bool:
        """A streamed array (`streamed`) read whole after all, as a smaller file is: for a reader
        that takes the whole array as one record (a Tunix Steps or Conversation list, an OpenHands
        event list), whose size is then the file's. True when `document` (and `first`) now hold
        the array; False, still streamed, when it is not valid JSON (its elements then say where)."""
        if not self.streamed:
            return self.document is not None
        try:
            doc = loads(self.read_bytes().removeprefix(BOM))
        except (ValueError, UnicodeDecodeError):
            return False
        self.streamed, self.pending, self.document, self.first = False, None, doc, doc
        self.position, self.last_line, self.last_raw = 0, None, None
        return True

    def elements(self) -> Iterator[tuple[int, Any]]:
        """(i, parsed element or RecordError) for each element of the top-level JSON array in
        this file, read `READ_CHUNK` bytes at a time (memory bounded by the largest element).
        The first call after opening continues what opening read (`pending`): no element is cut
        out or parsed twice."""
        pending, self.pending = self.pending, None
        if pending is not None:
            yield from pending
            return
        with self._open() as f:
            for i, offset, raw, problem in _array_elements(f):
                self.position = offset + len(raw)
                self.last_line, self.last_raw = None, raw[:4096].decode("utf-8", "replace")
                if problem is not None:
                    yield i, RecordError(self.name, None, f"[{i}]", problem, self.last_raw)
                    continue
                try:
                    yield i, loads(raw)
                except (ValueError, UnicodeDecodeError) as exc:
                    yield i, RecordError(self.name, None, f"[{i}]",
                                         f"invalid JSON (element starts at byte {offset}): {exc}", self.last_raw)
        self.position = self.size

    def parquet_rows(self) -> Iterator[tuple[int, Any]]:
        """Parquet: (row number from 1, row dict or RecordError), one record batch in memory at
        a time. A file pyarrow cannot read is one RecordError."""
        import pyarrow.parquet as pq

        row = self.line_base
        try:
            pf = pq.ParquetFile(self.disk)
            for batch in pf.iter_batches(batch_size=1024):
                for value in batch.to_pylist():
                    row += 1
                    self.last_line, self.last_raw = row, None
                    yield row, value
                self.position = min(self.size, self.position + batch.nbytes)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds for a broken file
            yield row + 1, RecordError(self.name, row + 1, None, f"cannot read Parquet: {exc}")
        self.position = self.size

    def csv_rows(self) -> Iterator[tuple[int, dict[str, str]]]:
        """CSV: (line number of the row's first line, row dict), streamed."""
        csv.field_size_limit(sys.maxsize)
        with self._open() as fb:
            text = io.TextIOWrapper(fb, encoding="utf-8-sig", errors="replace", newline="")
            reader = csv.DictReader(text)
            _ = reader.fieldnames  # read the header first, so line_num counts from it
            while True:
                line = reader.line_num + 1
                try:
                    row = next(reader)
                except StopIteration:
                    return
                self.position = fb.tell()
                self.last_line, self.last_raw = line, None
                yield line, row


# Cutting a top-level array into elements without parsing them: outside strings only brackets,
# braces, quotes (and, at the array's own level, commas) matter, and `re` skips everything else.
_STRUCT_TOP = re.compile(rb'[\[\]{}",]')
_STRUCT_IN = re.compile(rb'[\[\]{}"]')
NL = b"\n"


# The inside of a JSON string: runs of plain bytes and escapes (a backslash and the byte after it),
# possessive (`*+`, Python 3.11): the engine keeps no backtracking state per character. The regex
# this replaces, `(?:[^"\\]|\\.)*"`, kept state for every character and was tried again from the
# string's start at each chunk read: a list holding one 40 MB record took 290 s and 4.7 GB to
# read, where the same record as an object took 0.4 s.
_STRING_BODY = re.compile(rb'[^"\\]*+(?:\\.[^"\\]*+)*+', re.S)


def _string_end(buf: bytes, pos: int) -> tuple[bool, int]:
    """Reading the JSON string that `pos` (a position at or after its opening quote + 1, and not
    inside an escape) is in: (True, the index just past its closing `"`), or (False, where to
    search again once more bytes are read: the end of `buf`, or a backslash it ends with). Each
    byte is searched once, however many chunks the string spans."""
    end = _STRING_BODY.match(buf, pos).end()
    if end < len(buf) and buf[end] == 0x22:  # "
        return True, end + 1
    return False, end


def _closers(text: bytes) -> str:
    """What would close `text`, the start of a JSON value cut short, and the array it is in:
    `"}]` for `{"a": "xy` (the string, the object, the array)."""
    stack, in_str, escaped = [b"]"], False, False
    for c in text:
        if in_str:
            if escaped:
                escaped = False
            elif c == 0x5C:  # backslash
                escaped = True
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c in (0x5B, 0x7B):
            stack.append(b"]" if c == 0x5B else b"}")
        elif c in (0x5D, 0x7D) and len(stack) > 1:
            stack.pop()
    return ('"' if in_str else "") + b"".join(reversed(stack)).decode()


def _array_elements(f) -> Iterator[tuple[int, int, bytes, str | None]]:
    """(index, byte offset, raw bytes, problem) of each element of the JSON array that `f` (a
    binary file at its start) holds. `problem` is None, or why the element cannot be complete,
    said whole with its line and byte (the file ends inside it: a writer stopped mid-array; the
    file ends after a complete element without the array's `]`, then `raw` is empty; content
    after the closing `]`). Elements are not parsed here; the bytes before the current element
    are dropped as reading goes on."""
    buf, base, lines_before = b"", 0, 0  # base: file offset of buf[0]; lines_before: newlines before it
    pos, depth, in_str, eof = 0, 0, False, False
    sep: int | None = None  # where the current element starts (after `[` or `,`)
    index = 0
    while True:
        if in_str:
            closed, pos = _string_end(buf, pos)
            if closed:
                in_str = False
                continue
        else:
            m = (_STRUCT_TOP if depth == 1 else _STRUCT_IN).search(buf, pos)
            if m is not None:
                c, pos = buf[m.start()], m.end()
                if c == 0x22:  # "
                    in_str = True
                elif c in (0x5B, 0x7B):  # [ {
                    depth += 1
                    if depth == 1:
                        sep = pos
                elif c in (0x5D, 0x7D):  # ] }
                    depth -= 1
                    if depth == 0:
                        text = buf[sep:m.start()]
                        if text.strip():
                            yield index, base + sep + (len(text) - len(text.lstrip())), text.strip(), None
                            index += 1
                        rest = (buf[pos:] + f.read(1 << 16)).strip()
                        if rest:  # a stray bracket closed the array early: say so, never drop silently
                            yield (index, base + pos, rest[:4096],
                                   "content after the array's closing ] (an unbalanced bracket in an earlier "
                                   f"element?) (element starts at byte {base + pos})")
                        return
                else:  # a comma between elements
                    text = buf[sep:m.start()]
                    yield index, base + sep + (len(text) - len(text.lstrip())), text.strip(), None
                    index, sep = index + 1, pos
                continue
            pos = len(buf)
        if eof:
            if sep is None:
                return
            text = buf[sep:]
            at = sep + (len(text) - len(text.lstrip()))
            where = lambda k: f"line {lines_before + buf.count(NL, 0, k) + 1}, byte {base + k}"  # noqa: E731
            if text.strip() and (depth > 1 or in_str):
                yield (index, base + at, text.strip(),
                       f"torn JSON array: the file ends inside element [{index}] (truncated?), which starts at "
                       f"{where(at)}: missing {_closers(text.strip())} to close it and the array")
                return
            if text.strip():  # complete, as far as brackets tell: only the array's `]` is missing
                yield index, base + at, text.strip(), None
                index += 1
                at = len(buf.rstrip())
            after = f"after element [{index - 1}]" if index else "before its first element"
            yield (index, base + at, b"", f"torn JSON array: the file ends {after} (truncated?), at {where(at)}: "
                                          "missing ] to close the array (or more elements, then ])")
            return
        cut = min(sep, pos) if sep is not None else pos
        lines_before += buf.count(b"\n", 0, cut)
        buf, base, pos = buf[cut:], base + cut, pos - cut
        if sep is not None:
            sep -= cut
        # an element longer than a chunk doubles what is read next: the bytes held are copied a
        # bounded number of times per element (linear), not once per chunk (quadratic)
        chunk = f.read(max(READ_CHUNK, len(buf)))
        if chunk:
            buf += chunk
        else:
            eof = True


def _regular(path: Path) -> int:
    """Size of `path` if it is a regular file (links followed); RecordError otherwise."""
    try:
        st = path.stat()
    except OSError as exc:
        raise RecordError(str(path), None, None, f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise RecordError(str(path), None, None, "not a regular file (a device, FIFO or socket is never read)")
    return st.st_size


def read_as(path: Path, name: Path) -> Source:
    """`open_source(path)` for a file whose records are known by another name (a spool file
    renamed since it was first seen under `name`): the bytes come from `path`, every record,
    id and rejection names `name`."""
    try:
        source = open_source(path)
    except RecordError as exc:
        if exc.file == str(path):
            exc.file = str(name)
        raise
    source.file, source.path = path, name
    return source


def open_source(path: Path) -> Source:
    """Read enough of `path` to decide JSON / JSONL / CSV / zip by content, not by extension.

    Raises RecordError (naming the file) when the file is none of them.
    """
    size = _regular(path)
    with path.open("rb") as f:
        head = f.read(HEAD_BYTES)
    if head.startswith((ZIP_MAGIC, EMPTY_ZIP_MAGIC)):
        return _open_zip(path, size)
    if gzstream.is_gzip(head):
        return _open_gzip(path, size)
    if head.startswith(PARQUET_MAGIC):
        return _open_parquet(path, size)
    if head.startswith(SQLITE_MAGIC):
        return _open_sqlite(path, size)
    return _open_head(path, head, size, None, None)


def _open_parquet(path: Path, size: int) -> Source:
    """A Parquet file; `first` is its first row (or None when it has none)."""
    src = Source(path, "parquet", None, size=size)
    for _, value in src.parquet_rows():
        if isinstance(value, RecordError):
            raise value
        src.first = value
        break
    src.position, src.last_line = 0, None
    return src


def _open_sqlite(path: Path, size: int) -> Source:
    """A SQLite database, opened read-only; `first` is its sorted table names (readers open it
    themselves, e.g. ingest/formats/trackio.py)."""
    import sqlite3

    try:
        # read-only; `immutable` (no -wal/-shm files created beside it) unless a writer left a WAL
        mode = "mode=ro" if Path(f"{path}-wal").exists() else "immutable=1"
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?{mode}", uri=True)
        try:
            tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise RecordError(str(path), None, None, f"cannot read SQLite database: {exc}") from None
    return Source(path, "sqlite", tables, size=size)


def _open_gzip(path: Path, size: int) -> Source:
    """A gzip file: its content decides the kind, read through the decompressor."""
    try:
        with path.open("rb") as f:  # the head through a decompressor that stops where the bytes do:
            head = gzstream.head(f, HEAD_BYTES)  # a stream cut short still shows what it holds
        if not head and size > 20:  # a gzip header and trailer alone are 20 bytes
            raise EOFError("the compressed stream ends before any content")
        with path.open("rb") as f:  # ISIZE: the uncompressed size mod 2^32, the last 4 bytes
            f.seek(max(size - 4, 0))
            isize = int.from_bytes(f.read(4), "little")
    except (OSError, EOFError, zlib.error) as exc:
        raise RecordError(str(path), None, None, f"broken gzip file: {exc}") from None
    return _open_head(path, head, max(isize, len(head)), None, None, gz=True)


def _open_zip(path: Path, size: int) -> Source:
    try:
        with zipfile.ZipFile(path) as z:
            names = sorted(i.filename for i in z.infolist() if not i.is_dir())
    except (zipfile.BadZipFile, OSError) as exc:
        raise RecordError(str(path), None, None, f"broken zip archive: {exc}") from None
    return Source(path, "zip", names, size=size)


def _open_bytes(path: Path, data: bytes, member: str) -> Source:
    return _open_head(path, data[:HEAD_BYTES], len(data), member, data)


def _open_head(path: Path, head: bytes, size: int, member: str | None, data: bytes | None,
               gz: bool = False) -> Source:
    name = str(path) if member is None else f"{path}!{member}"
    wide = text_encoding(head)
    if wide is not None:
        return _open_wide(path, name, wide, size, member, data, gz)
    if head.startswith(BOM):
        head = head[len(BOM):]
    stripped = head.lstrip()
    if not stripped:
        raise RecordError(name, None, None, "empty file")
    if b"\x00" in head[:4096]:
        raise RecordError(name, None, None, "binary file (NUL bytes): not JSON, JSONL, CSV or a zip archive")
    if stripped[:1] == b"[" and size > STREAM_BYTES and data is None:
        return _open_array(path, size, gz)
    if stripped[:1] in (b"{", b"[") or later_line_is_object(stripped):
        return _open_json(path, size, member, data, gz)
    first_line = stripped.split(b"\n", 1)[0].decode("utf-8", "replace")
    if "," in first_line:
        src = Source(path, "csv", None, size=size, member=member, data=data, gzip=gz)
        src.first = next((row for _, row in src.csv_rows()), None)
        src.position = 0
        return src
    raise RecordError(name, 1, None, "not a trace file: expected a JSON object or array, JSONL records, CSV "
                                     "or a zip archive")


def text_encoding(head: bytes) -> str | None:
    """The encoding of text that is not UTF-8, told by its byte-order mark (`UTF-16LE`,
    `UTF-16BE`, `UTF-32LE`, `UTF-32BE`) or, without one, by the NUL bytes of its ASCII characters
    (`UTF-16LE without a byte-order mark`, `UTF-32BE without a byte-order mark`, ...: one NUL per
    character in UTF-16, three in UTF-32); None for anything else (UTF-8, binary). `head`: the
    first bytes of the text (of a gzip file, decompressed). The one detection both the CLI
    (`open_source`) and the worker (app/worker/stretches.py `StretchReader.mode`) use."""
    for bom, enc in WIDE_BOMS:
        if head.startswith(bom):
            return enc
    sample = head[:4096]
    if len(sample) < 8 or b"\x00" not in sample:
        return None
    n = len(sample) - len(sample) % 4
    lanes = [sample[k:n:4] for k in range(4)]
    for enc, text in (("UTF-32LE", 0), ("UTF-32BE", 3)):  # ASCII JSON as UTF-32: three NULs in every four bytes
        nuls = [lane for k, lane in enumerate(lanes) if k != text]
        if all(lane.count(0) >= 0.9 * len(lane) for lane in nuls) and lanes[text].count(0) == 0:
            return f"{enc} without a byte-order mark"
    for enc, text, nul in (("UTF-16LE", sample[0::2], sample[1::2]), ("UTF-16BE", sample[1::2], sample[0::2])):
        if nul.count(0) >= 0.9 * len(nul) and text.count(0) == 0:  # ASCII JSON as UTF-16: every other byte NUL
            return f"{enc} without a byte-order mark"
    return None



def _open_wide(path: Path, name: str, encoding: str, size: int, member: str | None, data: bytes | None,
               gz: bool) -> Source:
    """A UTF-16 file with its byte-order mark, decoded to UTF-8 (held in memory, up to
    MAX_WIDE_BYTES) and read like any other; byte offsets in its errors count the UTF-8 text.
    UTF-32, and UTF-16 without a byte-order mark, are refused naming the encoding."""
    codec, _, without = encoding.partition(" ")
    how = f"convert it to UTF-8 first (iconv -f {codec} -t UTF-8)"
    if not codec.startswith("UTF-16") or without:
        raise RecordError(name, None, None, f"{codec} text{' ' + without if without else ''}: not read; {how}")
    if size > MAX_WIDE_BYTES:
        raise RecordError(name, None, None, f"{codec} text of {size} bytes is larger than {MAX_WIDE_BYTES} bytes, "
                                            f"what is decoded in memory: not read; {how}")
    if data is None:
        with (gzip.open(path, "rb") if gz else path.open("rb")) as f:
            data = f.read(MAX_WIDE_BYTES + 1)
    text = data.decode("utf-16", "replace").encode("utf-8")  # the codec reads the mark and drops it
    src = _open_head(path, text[:HEAD_BYTES], len(text), member, text)
    src.decoded_from = encoding
    return src


def later_line_is_object(head: bytes) -> bool:
    """Whether one of the lines after the first (up to PROBE_LINES, within `head`) is a JSON
    object: a file whose first line is not JSON at all (`hello`, a stray log line) is still JSONL
    then, and the broken line costs one record, as it would anywhere else in the file."""
    for raw in head.split(b"\n")[1:PROBE_LINES]:
        raw = raw.strip()
        if raw[:1] != b"{":
            continue
        try:
            if isinstance(loads(raw), dict):
                return True
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue
    return False


def _open_json(path: Path, size: int, member: str | None = None, data: bytes | None = None,
               gz: bool = False) -> Source:
    def make(kind: str, first: Any, document: Any = None) -> Source:
        return Source(path, kind, first, document, size=size, member=member, data=data, gzip=gz)

    probe = make("jsonl", None)
    name = probe.name
    first_good = None  # (line, value) of the first line that parses on its own
    lines_seen = 0
    for lineno, value in probe.lines():
        lines_seen += 1
        if isinstance(value, dict) and first_good is None:  # a JSONL record is an object
            first_good = (lineno, value)
        if (first_good is not None and lines_seen >= 2) or lines_seen >= PROBE_LINES:
            break
    one_line = lines_seen <= 1
    if first_good is not None and first_good[0] == 1 and not one_line:
        return make("jsonl", first_good[1])  # JSONL, first line good
    if first_good is not None and one_line and isinstance(first_good[1], dict):
        return make("jsonl", first_good[1])  # one object on one line
    # A document (pretty-printed JSON, a one-line array), or JSONL with a broken first line.
    raw = probe.read_bytes().removeprefix(BOM)
    try:
        doc = loads(raw)
        return make("json", doc, doc)
    except (ValueError, UnicodeDecodeError) as whole_exc:
        torn = _torn_array(name, raw)
        if torn is not None and not torn[0]:
            raise torn[1] from None  # torn inside its first element: nothing to read, the file is rejected
        if torn is not None:  # a writer stopped mid-array: its complete elements are records
            src = make("json", torn[0], torn[0])
            src.torn = torn[1]
            return src
        if first_good is not None:
            return make("jsonl", first_good[1])
        lineno = getattr(whole_exc, "lineno", None)
        raise RecordError(name, lineno, None, f"not JSON or JSONL: {whole_exc}") from None


def _unparsed_line(raw: bytes, exc: Exception) -> str:
    """Why a JSONL line did not parse (the RecordError names the file and line). A record cut off
    (`cut_short`: it opens `{` or `[` and the text ends inside it) is said plainly, with how many
    bytes it has and whether the line was ended after the cut (a writer restarted after dying
    mid-line, whose client ended the line) or not (the file's last line: the writer stopped
    mid-line); the parser's message would only give a position inside the record. Any other
    line is `invalid JSON` with the parser's message and position."""
    if not cut_short(raw):
        return f"invalid JSON: {exc}"
    body = raw.rstrip(b"\r\n")
    closer = "}" if body.lstrip()[:1] == b"{" else "]"
    if len(body) < len(raw):
        return (f"cut-off line: truncated JSON, the record ends early (after {len(body)} bytes, before its "
                f"closing {closer}) and the line was ended there: the rest of the record is missing")
    return (f"cut-off line: truncated JSON, the record ends early (after {len(body)} bytes, before its closing "
            f"{closer}) and the line has no newline: the writer stopped mid-line")


def _torn_array(name: str, raw: bytes) -> tuple[list, RecordError] | None:
    """A top-level JSON array cut short (`[{...}, {...}, {"a": ` as a writer left it): its
    complete elements, and the error that names the torn tail (its index, line, byte and what is
    missing: `_array_elements`). None when `raw` is not that: not an array, not cut short at its
    end (`cut_short`), or broken before the tear as well."""
    if raw.lstrip()[:1] != b"[" or not cut_short(raw):
        return None
    elements, tail = [], None
    for i, _offset, text, problem in _array_elements(io.BytesIO(raw)):
        if problem is not None:
            tail = RecordError(name, None, f"[{i}]", problem, text[:4096].decode("utf-8", "replace") or None)
            continue
        try:
            elements.append(loads(text))
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
    return (elements, tail) if tail is not None else None


def _open_array(path: Path, size: int, gz: bool = False) -> Source:
    """A top-level JSON array too big to load: streamed; `first` holds its first element."""
    src = Source(path, "json", [], size=size, streamed=True, gzip=gz)
    elements, before = src.elements(), []
    for i, value in elements:
        before.append((i, value))
        if not isinstance(value, RecordError):
            src.first = [value]
            src.pending = itertools.chain(before, elements)  # read once: the reader continues from here
            break
    src.position = 0
    if src.pending is None:
        src.last_line, src.last_raw = None, None
    return src
