"""Opening a trace file: JSON document, JSONL, or CSV, read leniently and with positions.

JSON is parsed with orjson; when orjson refuses (bare NaN/Infinity, which Python's json.dumps
writes), the standard library parser takes over, so such files load and the non-finite values
reach the reader as float('nan') / float('inf').
"""
from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson


class RecordError(Exception):
    """A record that cannot be ingested: names the file, the line (1-based) and the field."""

    def __init__(self, file: str, line: int | None, field: str | None, message: str, raw: str | None = None):
        super().__init__(message)
        self.file, self.line, self.field, self.message, self.raw = file, line, field, message, raw

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line is not None else "")
        return f"{where}: {self.field + ': ' if self.field else ''}{self.message}"


def loads(data: bytes | str) -> Any:
    """Parse one JSON value; accepts NaN/Infinity/-Infinity (non-strict JSON)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


@dataclass
class Source:
    """One input file, opened. `kind` is 'json' (one document), 'jsonl' or 'csv'.

    `first` is the first record (the whole document for 'json'), which readers sniff.
    """

    path: Path
    kind: str
    first: Any
    document: Any = None
    _data: bytes = field(default=b"", repr=False)

    @property
    def name(self) -> str:
        return str(self.path)

    def line_count(self) -> int:
        return self._data.count(b"\n") + (0 if self._data.endswith(b"\n") else 1)

    def lines(self) -> Iterator[tuple[int, Any]]:
        """JSONL: (line number, parsed value or RecordError) for each non-empty line."""
        for lineno, raw in enumerate(self._data.split(b"\n"), start=1):
            if not raw.strip():
                continue
            try:
                yield lineno, loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                text = raw[:4096].decode("utf-8", "replace")
                torn = not raw.rstrip().endswith((b"}", b"]"))
                msg = ("torn line (writer stopped mid-record): " if torn else "invalid JSON: ") + str(exc)
                yield lineno, RecordError(self.name, lineno, None, msg, text)

    def csv_rows(self) -> Iterator[tuple[int, dict[str, str]]]:
        """CSV: (line number of the row's first line, row dict)."""
        csv.field_size_limit(sys.maxsize)
        text = self._data.decode("utf-8", "replace").splitlines(keepends=True)
        reader = csv.DictReader(text)
        _ = reader.fieldnames  # read the header first, so line_num counts from it
        while True:
            line = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            yield line, row


def open_source(path: Path) -> Source:
    """Read `path` and decide JSON / JSONL / CSV by content, not by extension.

    Raises RecordError when the file is neither.
    """
    data = path.read_bytes()
    stripped = data.lstrip()
    name = str(path)
    if not stripped:
        raise RecordError(name, None, None, "empty file")
    if stripped[:1] in (b"{", b"["):
        try:
            doc = loads(data)
            if isinstance(doc, dict) and b"\n" not in stripped.rstrip():
                # One object on one line: a one-record JSONL file, so errors can say "line 1".
                return Source(path, "jsonl", doc, None, data)
            return Source(path, "json", doc, doc, data)
        except (ValueError, UnicodeDecodeError) as whole_exc:
            first_line = stripped.split(b"\n", 1)[0]
            try:
                first = loads(first_line)
            except (ValueError, UnicodeDecodeError):
                lineno = getattr(whole_exc, "lineno", None)
                raise RecordError(name, lineno, None, f"not JSON or JSONL: {whole_exc}") from None
            return Source(path, "jsonl", first, None, data)
    head = stripped[:4096].decode("utf-8", "replace").splitlines()[0] if stripped else ""
    if "," in head:
        src = Source(path, "csv", None, None, data)
        src.first = next((row for _, row in src.csv_rows()), None)
        return src
    raise RecordError(name, 1, None, "unrecognised file: not JSON, JSONL or CSV")
