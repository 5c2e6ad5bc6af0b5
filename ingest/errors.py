"""The error every reader reports a bad record with: `RecordError` names the file, the line and
the field, and carries the raw text, so a bad record is kept and located in the quarantine
rather than stopping the file (docs/formats.md, "Errors")."""
from __future__ import annotations


class RecordError(Exception):
    """A record that cannot be ingested: names the file, the line (1-based) and the field."""

    def __init__(self, file: str, line: int | None, field: str | None, message: str, raw: str | None = None,
                 run: str | None = None, key: str | None = None):
        super().__init__(message)
        self.file, self.line, self.field, self.message, self.raw = file, line, field, message, raw
        self.run = run  # the record's run, when it was read far enough to know it
        # what the record is known by where its line cannot say (None: its file and line do): an OTLP
        # trace id, each trace of `/v1/traces` a quarantine entry of its own (app/store/quarantine.py)
        self.key = key

    def __reduce__(self):  # pickled whole (the worker's parser processes send rejections back)
        return (RecordError, (self.file, self.line, self.field, self.message, self.raw, self.run, self.key))

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line is not None else "")
        return f"{where}: {self.field + ': ' if self.field else ''}{self.message}"
