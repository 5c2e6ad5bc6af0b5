"""What every format reader and writer is: the `Reader` protocol, the `ReadContext` a caller passes
in, the one way a reader reports a bad record (`record_error`), and the `Writer` of an export
format (`json_line` for the JSON Lines ones).

Readers are modules (or objects) with `NAME`, `EXPECTS`, `sniff(source)` and `read(source, ctx)`;
`ingest/formats/registry.py` lists them in the order detection tries them. A reader never raises
for bad input: each record becomes a `Rollout` or a `RecordError` naming file, line and the field
path inside the record (`messages[3].tool_calls[0].function.name`), built by `record_error`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from ingest.errors import RecordError
from ingest.fields import FieldError
from ingest.jsonio import dumps
from ingest.known import KnownLookup
from ingest.schema import Rollout, json_text
from ingest.source import Source


@dataclass
class ReadContext:
    """What the caller knows that the file may not say.

    `run_id`: run to file rollouts under when the record names none (CLI `--run`); when None,
    readers fall back to the file's parent folder name. `step`: training step default.
    `format`: the reader the caller forced (`--format NAME`), or None to detect by content.
    `root`: the folder being ingested (the one given on the command line, the spool directory);
    a record without an id is named after its file's path relative to it (`source_key`). None
    means the file's own folder.
    `files`: every file this ingest reads (resolved paths), when the caller knows them
    (`ingest_paths`); None (the spool worker, HTTP) means unknown. `notes`: what a reader says
    about a file that gives no records by design (file name → one line, e.g. an ATIF continuation
    merged into its first part's rollout), for the ingest summary.
    `known`: raw hashes → identities the store already holds under them (ingest/known.py), for
    readers that skip records whose bytes are unchanged; None: read everything in full.
    """

    run_id: str | None = None
    step: int | None = None
    format: str | None = None
    root: Path | None = None
    extra: dict = field(default_factory=dict)
    files: frozenset[Path] | None = None
    notes: dict[str, str] = field(default_factory=dict)
    known: KnownLookup | None = None

    def run_for(self, source: Source, record_run: str | None = None) -> str:
        """`--run`, else the record's own run, else the file's folder name, else "default"."""
        return self.run_id or record_run or source.path.resolve().parent.name or "default"

    def source_key(self, source: Source) -> str:
        """The stable name of a record's source, which readers build missing ids from
        (`<key>#<index>`): the file's path relative to `root` in `/` form, without its trace
        suffixes (`step_3/rollouts.jsonl` → `step_3/rollouts`; `x.traj.json` → `x`), then
        `!member` for a file inside a zip archive, then `@step<N>` when the caller gave the step.

        The same file ingested again from the same root gets the same key (so nothing is added
        twice), and two files of the same name in different folders get different keys (so one
        never replaces the other). A file directly in `root`, outside it, or read with no root is
        known by its name alone, as before folders counted (`rollouts#12`).
        """
        path = source.path
        folder = ""
        if self.root is not None:
            try:
                rel = path.resolve().relative_to(self.root.resolve())
                folder = rel.parent.as_posix() if rel.parent != Path(".") else ""
            except ValueError:
                folder = ""
        name = path.name
        while True:
            bare = _strip_suffix(name)
            if bare == name:
                break
            name = bare
        key = f"{folder}/{name}" if folder else name
        if source.member is not None:
            key += f"!{source.member}"
        if self.step is not None:
            key += f"@step{self.step}"
        return key


# Suffixes left out of a name a missing id is derived from (`rollouts.jsonl` → `rollouts`).
ID_SUFFIXES = (".jsonl", ".json", ".ndjson", ".csv", ".traj", ".gz", ".parquet")


def _strip_suffix(name: str) -> str:
    for suffix in ID_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


class Reader(Protocol):
    """One trace format. `NAME` is what `--format` and `rollout.source.format` say; `EXPECTS`
    is one line naming the shape it reads (shown when no reader claims a file)."""

    NAME: str
    EXPECTS: str

    def sniff(self, source: Source) -> bool: ...

    def read(self, source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]: ...


Chunks = Iterator[tuple[bytes, int]]  # a writer's output: bytes, with the number of records in them


@dataclass(frozen=True)
class Writer:
    """One export format (`WRITERS` in registry.py, by export name; Inspect's recorders).
    `write(rollouts)` is the format module's `write`: the file's bytes chunk by chunk (one a
    rollout for the JSONL formats, one a row group for Parquet), each with how many records it
    holds (rollouts, or training samples). `samples`: the format writes one record per branch
    with token ids, so a run without tokens writes nothing (`ingest.export.NoSamples`)."""

    write: Callable[[Iterable[Rollout]], Chunks]
    samples: bool = False


def json_line(value: Any) -> bytes:
    """One JSON Lines line: strict JSON (NaN → null), big integers with every digit."""
    return dumps(value) + b"\n"


def join_path(prefix: str | None, sub: str | None) -> str | None:
    """`messages[3]` + `role` → `messages[3].role`; `[2]` + `[0]` → `[2][0]`; empty parts vanish."""
    if not sub:
        return prefix or None
    if not prefix:
        return sub
    return prefix + sub if sub.startswith("[") else f"{prefix}.{sub}"


def pydantic_path(loc: tuple) -> str:
    """pydantic's error location as a path: ("nodes", 3, "parent") → "nodes[3].parent"."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _first_bad_flag(path: str, values: list) -> tuple[str, str]:
    """A flag array's error (ingest/schema.py `Flags`, refused as a whole) as the path and message
    of its first entry that is neither true, false, 0 nor 1 (`mask[3]`, and the value)."""
    for k, v in enumerate(values):
        if not (isinstance(v, bool) or (type(v) in (int, float) and v in (0, 1))):
            shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
            return f"{path}[{k}]", f"expected true or false (or the number 0 or 1), got {shown}"
    return path, "expected a list of true or false (or the numbers 0 and 1)"


def _pydantic_message(err: dict) -> str:
    """pydantic's message for one error, with what was written when the value was of the wrong
    type (`Input should be a valid number, got "-0.1"`: the record's own value, as JSON, cut at
    80 characters)."""
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "string_pattern_mismatch":
        msg = "ids must not contain control characters (tab, newline, NUL, ...)"
    elif (err["type"].endswith(("_type", "_parsing")) or err["type"] == "int_from_float") and "input" in err \
            and (err["input"] is None or isinstance(err["input"], (str, int, float, bool))):
        msg = f"{msg}, got {json_text(err['input'])}"
    return msg


def _named_field(msg: str) -> tuple[str | None, str]:
    """A whole-record validator names its field and value first ("nodes[3].parent = 9: the
    parent must be ..."): the field, and the rest with the value last ("the parent must be ...
    (got 9)"), so that the field is said once."""
    head, sep, rest = msg.partition(" = ")
    if sep and head and all(c.isalnum() or c in "_.[]-" for c in head) and not head[0].isdigit():
        value, colon, text = rest.partition(": ")
        return head, f"{text} (got {value})" if colon and text else msg
    return None, msg


def record_error(file: str, line: int | None, prefix: str | None, exc: BaseException,
                 raw: str | None = None) -> RecordError:
    """The one translation of a reader failure into a RecordError.

    - `FieldError(field, message)` (ingest.fields): the field path is `prefix` + `field`.
    - pydantic `ValidationError`: the first error's location becomes the path; a whole-record
      validator's message that starts `field = value:` names the field.
    - `RecordError`: returned as it is (with `raw` filled when missing).
    - anything else (a reader bug or an unforeseen shape): the record is rejected at `prefix` with
      the exception's type and text, so one odd record never stops the file.
    """
    if isinstance(exc, RecordError):
        if exc.raw is None:
            exc.raw = raw
        return exc
    if isinstance(exc, FieldError):
        return RecordError(file, line, join_path(prefix, exc.field), exc.message, raw)
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        path = pydantic_path(err["loc"])
        msg = _pydantic_message(err)
        if err["type"] == "flags_type" and isinstance(err.get("input"), list):
            path, msg = _first_bad_flag(path, err["input"])
        named, msg = _named_field(msg)
        if named:
            path = join_path(path, named) or ""
        return RecordError(file, line, join_path(prefix, path), msg, raw)
    return RecordError(file, line, prefix or None, f"cannot read record: {type(exc).__name__}: {exc}", raw)


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type: object, array, string, number, boolean, null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


RUN_KEYS = (("run", "id"), ("run_id",), ("run",), ("run_name",))  # where records of the formats name their run


def run_named(value: Any) -> str | None:
    """The run a record names, read from its JSON even when the record is invalid (for the
    quarantine entry's `run`): native `run.id`, else `run_id`, `run` (a string) or `run_name`,
    where the formats keep it; a string or an integer, else None."""
    if not isinstance(value, dict):
        return None
    for path in RUN_KEYS:
        v: Any = value
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        if isinstance(v, str) and v or isinstance(v, int) and not isinstance(v, bool):
            return str(v)
    return None


def shape_error(file: str, line: int | None, prefix: str | None, value: Any, what: str,
                fields: tuple[tuple[str, str], ...], one_of: bool = False, otherwise: str = "") -> RecordError:
    """Why `value` is not a `what` record ("verifiers Episode"), naming the field at fault.

    `fields`: (key, JSON type: "object", "array", "string", "id" = string or integer, "any") in the
    order the format lists them. All are needed, or with `one_of` at least one. The error names the
    first present key of the wrong type (`messages: must be an array, got string`), else the
    first missing one (`traces: missing`); a value that is not an object is named at `prefix`.
    When every field is there and well typed, the error is `not a <what>` + `otherwise` (what else
    the format needs), at `prefix`.
    """
    names = ", ".join(k for k, _ in fields)
    a = "an" if what[0] in "AEIOUaeiou" else "a"
    need = f"{a} {what} has {'one of ' if one_of else ''}{names}"
    if not isinstance(value, dict):
        return RecordError(file, line, prefix or None, f"expected a JSON object ({need}), got {json_type(value)}")
    for key, kind in fields:
        if key in value and not _is_kind(value[key], kind):
            want = "a string or integer id" if kind == "id" else f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"
            return RecordError(file, line, join_path(prefix, key),
                               f"must be {want}, got {json_type(value[key])} ({need})")
    missing = [k for k, _ in fields if k not in value]
    if missing and (not one_of or len(missing) == len(fields)):
        return RecordError(file, line, join_path(prefix, missing[0]), f"missing: {need}")
    return RecordError(file, line, prefix or None, f"not {a} {what}{otherwise}")


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "any":
        return True
    if kind == "id":
        return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
    return json_type(value) == kind


def guarded(file: str, line: int | None, prefix: str | None,
            build: Callable[[], Rollout]) -> Rollout | RecordError:
    """`build()`, or the RecordError `record_error` makes of whatever it raised."""
    try:
        return build()
    except Exception as exc:  # noqa: BLE001 - one odd record must not stop the file
        return record_error(file, line, prefix, exc)


def id_text(value: Any, path: str, *, required: bool = False) -> str | None:
    """An id as written: a string, or an integer kept with every digit (`str(int)`), never a
    float (tests/fixtures/cases/20-big-integer-ids.json). Raises FieldError for anything else."""
    if value is None:
        if required:
            raise FieldError(path, "missing id")
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise FieldError(path, f"expected a string or integer id, got {type(value).__name__}")
