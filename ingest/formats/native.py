"""The native format: JSONL, one `rollscope/1` rollout per line (docs/trace-format.md)."""
from __future__ import annotations

from collections.abc import Iterable, Iterator

from pydantic import ValidationError

from ingest import fastdecode
from ingest.errors import RecordError
from ingest.formats.base import ReadContext, join_path, json_line, record_error, run_named
from ingest.known import Known, raw_hash, salt
from ingest.schema import SCHEMA_VERSION, Rollout
from ingest.source import Source
from ingest.stages import stage

NAME = "native"
EXPECTS = 'JSONL (or a JSON array) of records with `schema: "rollscope/1"`'


def sniff(source: Source) -> bool:
    first = source.first
    if isinstance(first, list) and first:
        first = first[0]
    return isinstance(first, dict) and str(first.get("schema", "")).startswith("rollscope/")


CHUNK_LINES, CHUNK_BYTES = 200, 16 << 20  # lines looked up in the store at once (ReadContext.known)


def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError | Known]:
    """A record without `run` is filed under `ctx.run_for(source)` (`--run`, else the file's
    folder name), the rule every reader follows; `--run` overrides a record's own run.

    Each JSONL line is hashed first (ingest/known.py `raw_hash`, kept on the rollout); with
    `ctx.known`, lines are looked up in chunks (200 lines or 16 MB, one lookup each) and a line
    the store holds with these very bytes is yielded as a `Known`, not decoded."""
    run = ctx.run_for(source)
    if source.kind == "jsonl":
        salted = salt(NAME, SCHEMA_VERSION, ctx.run_id, run, ctx.step)

        def full(line: int, raw: bytes, digest: str) -> Rollout | RecordError:
            if source.last_line != line:  # read ahead in a chunk: a rejection names this line's text
                source.last_line, source.last_raw = line, raw[:4096].decode("utf-8", "replace")
            with stage("decode"):
                rollout = _from_bytes(raw, source.name, line, ctx)
                if rollout is None:  # the slow path names the line and field of what is wrong
                    value = source.parse_line(line, raw)
                    rollout = value if isinstance(value, RecordError) else parse_record(
                        value, source.name, line, ctx, default_run=run)
            if isinstance(rollout, Rollout):
                rollout._raw_hash = digest
            return rollout

        for chunk in _hashed_chunks(source, salted, ctx.known is not None):
            found = ctx.known([digest for _, _, digest in chunk]) if ctx.known is not None else {}
            for line, raw, digest in chunk:
                hit = found.get(digest)
                # stored from these bytes of this very file: unchanged. The same bytes stored from
                # another file are decided in full (app/store/write.py `decide`: which file of
                # the ingest keeps the copy)
                if hit is not None and hit[1] == source.name:
                    yield Known(hit[0], digest, {"format": NAME, "file": source.name, "line": line},
                                lambda line=line, raw=raw, digest=digest: full(line, raw, digest))
                else:
                    yield full(line, raw, digest)
        return
    for i, value in source.records():
        yield value if isinstance(value, RecordError) else parse_record(
            value, source.name, None, ctx, prefix=None if i is None else f"[{i}]", default_run=run)


def _hashed_chunks(source: Source, salted: bytes, chunked: bool) -> Iterator[list[tuple[int, bytes, str]]]:
    """(line, bytes, raw hash) of the file's lines, a chunk at a time (`chunked`), else one by
    one (nothing to look up: a line is decoded as soon as it is read)."""
    chunk: list[tuple[int, bytes, str]] = []
    size = 0
    lines = source.raw_lines()
    while True:
        with stage("read"):
            got = next(lines, None)
        if got is None:
            break
        line, raw = got
        with stage("hash"):
            chunk.append((line, raw, raw_hash(raw, salted)))
        size += len(raw)
        if not chunked or len(chunk) >= CHUNK_LINES or size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _from_bytes(raw: bytes, file: str, line: int, ctx: ReadContext) -> Rollout | None:
    """A good line decoded straight from its bytes: by ingest/fastdecode.py when it is plain (the
    same rollout, its token arrays already numpy arrays; half the time on a text-only line), else by
    pydantic in one pass; None for anything pydantic refuses, which `parse_record` then reports."""
    rollout = fastdecode.rollout(raw)
    if rollout is None:
        try:
            rollout = Rollout.model_validate_json(raw)
        except ValueError:
            return None
    if rollout.schema_ != SCHEMA_VERSION or "schema_" not in rollout.model_fields_set:
        return None
    if ctx.run_id:
        rollout.run.id = ctx.run_id
    rollout.source = {"format": NAME, "file": file, "line": line}
    return rollout


def parse_record(value: object, file: str, line: int | None, ctx: ReadContext,
                 prefix: str | None = None, default_run: str | None = None) -> Rollout | RecordError:
    """Validate one native record. Errors name the first failing field as a dotted path, after
    `prefix` (the record's place in a JSON array, `[i]`). A record without `run` gets
    `{"id": ctx.run_id or default_run}`; with neither it is rejected at `run`."""
    if not isinstance(value, dict):
        return RecordError(file, line, prefix, f"expected a JSON object, got {type(value).__name__}")
    if value.get("schema") != SCHEMA_VERSION:
        return RecordError(file, line, join_path(prefix, "schema"),
                           f"unsupported schema {value.get('schema')!r}; this reader knows {SCHEMA_VERSION!r}")
    if "run" not in value and (ctx.run_id or default_run):
        value = {**value, "run": {"id": ctx.run_id or default_run}}
    try:
        rollout = Rollout.model_validate(value)
    except ValidationError as exc:
        err = record_error(file, line, prefix, exc)
        err.run = ctx.run_id or run_named(value)  # the run it would be stored in, for the quarantine entry
        return err
    if ctx.run_id:
        rollout.run.id = ctx.run_id
    rollout.source = {"format": NAME, "file": file, "line": line}
    return rollout


# --- writing --------------------------------------------------------------------------------

def write_line(rollout: Rollout) -> bytes:
    """One native JSONL line (with trailing newline) for `rollout`: strict JSON, integers past 64
    bits with every digit. A NaN or ±Infinity in a node's logprobs, advantages or reference
    logprobs is written null with the node's `non_finite` marker (the model's JSON form,
    ingest/schema.py `_strict_json_model`), so that reading the line back gives the same rollout
    (its invalid_logprob finding included)."""
    return json_line(rollout.to_json_dict())


def write(rollouts: Iterable[Rollout]) -> Iterator[tuple[bytes, int]]:
    """Native JSONL (`rollscope/1`, docs/trace-format.md), one line a rollout."""
    for r in rollouts:
        yield write_line(r), 1
