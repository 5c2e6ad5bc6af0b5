"""The native format: JSONL, one `rollscope/1` rollout per line (docs/trace-format.md)."""
from __future__ import annotations

from collections.abc import Iterator

from pydantic import ValidationError

from ingest.formats.base import ReadContext, record_error
from ingest.schema import SCHEMA_VERSION, Rollout
from ingest.source import RecordError, Source

NAME = "native"
EXPECTS = 'JSONL (or a JSON array) of records with `schema: "rollscope/1"`'


def sniff(source: Source) -> bool:
    first = source.first
    if isinstance(first, list) and first:
        first = first[0]
    return isinstance(first, dict) and str(first.get("schema", "")).startswith("rollscope/")


def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    if source.kind == "jsonl":
        items = source.lines()
    else:
        doc = source.document
        items = enumerate(doc if isinstance(doc, list) else [doc], start=1)
    for line, value in items:
        if isinstance(value, RecordError):
            yield value
            continue
        yield parse_record(value, source.name, line if source.kind == "jsonl" else None, ctx)


def parse_record(value: object, file: str, line: int | None, ctx: ReadContext) -> Rollout | RecordError:
    """Validate one native record. Errors name the first failing field as a dotted path."""
    if not isinstance(value, dict):
        return RecordError(file, line, None, f"expected a JSON object, got {type(value).__name__}")
    if value.get("schema") != SCHEMA_VERSION:
        return RecordError(file, line, "schema", f"unsupported schema {value.get('schema')!r}; this reader knows {SCHEMA_VERSION!r}")
    if ctx.run_id and "run" not in value:
        value = {**value, "run": {"id": ctx.run_id}}
    try:
        rollout = Rollout.model_validate(value)
    except ValidationError as exc:
        return record_error(file, line, None, exc)
    if ctx.run_id:
        rollout.run.id = ctx.run_id
    rollout.source = {"format": NAME, "file": file, "line": line}
    return rollout




def write_line(rollout: Rollout) -> bytes:
    """One native JSONL line (with trailing newline) for `rollout`. Strict JSON: NaN → null."""
    import orjson

    return orjson.dumps(rollout.to_json_dict(), option=orjson.OPT_APPEND_NEWLINE)
