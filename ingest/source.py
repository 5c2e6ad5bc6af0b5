"""Opening a trace file: JSON document, JSONL, or CSV, read leniently and with positions.

- Only regular files are read (a FIFO or a link to /dev/zero would never end).
- JSONL and CSV are streamed line by line, so memory stays bounded by the longest record;
  a JSON document is read whole (it is one value).
- The format is decided by content: a first line that is a JSON value followed by more lines is
  JSONL. A JSONL file whose first line is broken is still JSONL when a later line parses, so one
  bad first line costs one record, not the file.
- JSON is parsed with orjson; when orjson refuses (bare NaN/Infinity, which Python's json.dumps
  writes; lone surrogates), the standard library parser takes over, so such files load: the
  non-finite values reach the reader as float('nan') / float('inf'), and lone surrogates (which
  UTF-8 cannot carry) become U+FFFD. Nesting deeper than the parser allows is a RecordError.
- A UTF-8 byte-order mark is ignored.
- Zip archives (Inspect's `.eval` logs, zipped run folders) open as kind 'zip': `members()`
  lists the files inside and `open_member(name)` opens one as its own Source (JSON, JSONL or CSV by
  the same rules), named `<archive>!<member>` in errors. Members are read into memory one at a
  time and refused past `MAX_MEMBER_BYTES` uncompressed (a zip bomb is refused, not unpacked).
"""
from __future__ import annotations

import csv
import io
import json
import stat
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

HEAD_BYTES = 1 << 16  # what is read to decide the format of a file
PROBE_LINES = 50  # lines tried for a first good record when the first line is broken
BOM = b"\xef\xbb\xbf"
ZIP_MAGIC = b"PK\x03\x04"
EMPTY_ZIP_MAGIC = b"PK\x05\x06"
MAX_MEMBER_BYTES = 1 << 30  # 1 GiB uncompressed per zip member


class RecordError(Exception):
    """A record that cannot be ingested: names the file, the line (1-based) and the field."""

    def __init__(self, file: str, line: int | None, field: str | None, message: str, raw: str | None = None):
        super().__init__(message)
        self.file, self.line, self.field, self.message, self.raw = file, line, field, message, raw

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line is not None else "")
        return f"{where}: {self.field + ': ' if self.field else ''}{self.message}"


def _fix_surrogates(value: Any) -> Any:
    """Lone UTF-16 surrogates (valid JSON escapes, invalid Unicode) → U+FFFD; pairs are joined."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_fix_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_fix_surrogates(k): _fix_surrogates(v) for k, v in value.items()}
    return value


def loads(data: bytes | str) -> Any:
    """Parse one JSON value; accepts NaN/Infinity/-Infinity (non-strict JSON).

    Raises ValueError for anything that is not JSON, including nesting too deep to parse.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return _fix_surrogates(json.loads(data))
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


@dataclass
class Source:
    """One input file, opened. `kind` is 'json' (one document), 'jsonl', 'csv' or 'zip'.

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

    @property
    def name(self) -> str:
        return str(self.path) if self.member is None else f"{self.path}!{self.member}"

    def _open(self):
        return io.BytesIO(self.data) if self.data is not None else self.path.open("rb")

    def read_bytes(self) -> bytes:
        """The whole file (or zip member) as bytes."""
        return self.data if self.data is not None else self.path.read_bytes()

    def members(self) -> list[str]:
        """The file names inside a zip archive (directories left out), sorted; [] otherwise."""
        if self.kind != "zip":
            return []
        with zipfile.ZipFile(self.path) as z:
            return sorted(i.filename for i in z.infolist() if not i.is_dir())

    def open_member(self, name: str) -> "Source":
        """One file inside this zip archive, opened as its own Source (JSON, JSONL or CSV by
        content). Raises RecordError naming `<archive>!<member>` when it is missing, too large
        or not a trace file."""
        label = f"{self.path}!{name}"
        try:
            with zipfile.ZipFile(self.path) as z:
                info = z.getinfo(name)
                if info.file_size > MAX_MEMBER_BYTES:
                    raise RecordError(label, None, None, f"zip member of {info.file_size} bytes is larger than "
                                                         f"{MAX_MEMBER_BYTES} bytes: refused")
                data = z.read(info)
        except KeyError:
            raise RecordError(label, None, None, "no such member in the zip archive") from None
        except (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError) as exc:
            raise RecordError(label, None, None, f"cannot read zip member: {exc}") from None
        return _open_bytes(self.path, data, member=name)

    def _binary_lines(self) -> Iterator[tuple[int, bytes]]:
        with self._open() as f:
            for lineno, raw in enumerate(f, start=1 + self.line_base):
                if lineno == 1 and raw.startswith(BOM):
                    raw = raw[len(BOM):]
                self.position += len(raw)
                yield lineno, raw

    def lines(self) -> Iterator[tuple[int, Any]]:
        """JSONL: (line number, parsed value or RecordError) for each non-empty line."""
        for lineno, raw in self.raw_lines():
            yield lineno, self.parse_line(lineno, raw)

    def raw_lines(self) -> Iterator[tuple[int, bytes]]:
        """JSONL: (line number, bytes) for each non-empty line, not parsed (for a reader that
        validates bytes directly, and `parse_line` when it cannot)."""
        for lineno, raw in self._binary_lines():
            if not raw.strip():
                continue
            self.last_line = lineno
            self.last_raw = raw[:4096].decode("utf-8", "replace")
            yield lineno, raw

    def parse_line(self, lineno: int, raw: bytes) -> Any:
        """One JSONL line parsed, or a RecordError naming the line (torn or invalid JSON)."""
        try:
            return loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            torn = not raw.rstrip().endswith((b"}", b"]"))
            msg = ("torn or malformed line: the record ends mid-JSON (as when a writer stops mid-line): " if torn else "invalid JSON: ") + str(exc)
            return RecordError(self.name, lineno, None, msg, self.last_raw)

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


def _regular(path: Path) -> int:
    """Size of `path` if it is a regular file (links followed); RecordError otherwise."""
    try:
        st = path.stat()
    except OSError as exc:
        raise RecordError(str(path), None, None, f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise RecordError(str(path), None, None, "not a regular file (a device, FIFO or socket is never read)")
    return st.st_size


def open_source(path: Path) -> Source:
    """Read enough of `path` to decide JSON / JSONL / CSV / zip by content, not by extension.

    Raises RecordError (naming the file) when the file is none of them.
    """
    name = str(path)
    size = _regular(path)
    with path.open("rb") as f:
        head = f.read(HEAD_BYTES)
    if head.startswith((ZIP_MAGIC, EMPTY_ZIP_MAGIC)):
        return _open_zip(path, size)
    return _open_head(path, head, size, None, None)


def _open_zip(path: Path, size: int) -> Source:
    try:
        with zipfile.ZipFile(path) as z:
            names = sorted(i.filename for i in z.infolist() if not i.is_dir())
    except (zipfile.BadZipFile, OSError) as exc:
        raise RecordError(str(path), None, None, f"broken zip archive: {exc}") from None
    return Source(path, "zip", names, size=size)


def _open_bytes(path: Path, data: bytes, member: str) -> Source:
    return _open_head(path, data[:HEAD_BYTES], len(data), member, data)


def _open_head(path: Path, head: bytes, size: int, member: str | None, data: bytes | None) -> Source:
    name = str(path) if member is None else f"{path}!{member}"
    if head.startswith(BOM):
        head = head[len(BOM):]
    stripped = head.lstrip()
    if not stripped:
        raise RecordError(name, None, None, "empty file")
    if b"\x00" in head[:4096]:
        raise RecordError(name, None, None, "binary file (NUL bytes): not JSON, JSONL, CSV or a zip archive")
    if stripped[:1] in (b"{", b"["):
        return _open_json(path, size, member, data)
    first_line = stripped.split(b"\n", 1)[0].decode("utf-8", "replace")
    if "," in first_line:
        src = Source(path, "csv", None, size=size, member=member, data=data)
        src.first = next((row for _, row in src.csv_rows()), None)
        src.position = 0
        return src
    raise RecordError(name, 1, None, "not a trace file: expected a JSON object or array, JSONL records, CSV "
                                     "or a zip archive")


def _open_json(path: Path, size: int, member: str | None = None, data: bytes | None = None) -> Source:
    def make(kind: str, first: Any, document: Any = None) -> Source:
        return Source(path, kind, first, document, size=size, member=member, data=data)

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
    try:
        doc = loads(probe.read_bytes().removeprefix(BOM))
        return make("json", doc, doc)
    except (ValueError, UnicodeDecodeError) as whole_exc:
        if first_good is not None:
            return make("jsonl", first_good[1])
        lineno = getattr(whole_exc, "lineno", None)
        raise RecordError(name, lineno, None, f"not JSON or JSONL: {whole_exc}") from None
