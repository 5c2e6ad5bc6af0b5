"""Small pieces shared by the agent-harness readers (Inspect, SWE-agent, mini-swe-agent,
OpenHands, OTLP), on top of the shared converters (`_openai`, `_build`): timestamps by the
project's UTC rule, the builder with assistant messages sampled, calls for actions the harness
parsed out of the model's text, usage in its several spellings, the documents of a file, and the
read loop of a reader whose documents each hold one run (`read_documents`).

The timestamp rule (docs/formats.md): an ISO string with an offset is converted to UTC; a naive
ISO string is taken as UTC and flagged as assumed; a number is epoch seconds (or milli/micro/
nanoseconds when it is too large to be seconds).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

from ingest.errors import RecordError
from ingest.formats._build import RolloutBuilder
from ingest.formats._openai import tool_call_from_openai
from ingest.formats.base import ReadContext, record_error
from ingest.schema import Message, Rollout, ToolCall, Usage
from ingest.source import Source


def to_epoch(value: Any) -> tuple[float | None, bool]:
    """(epoch seconds in UTC, assumed) for an ISO-8601 string or an epoch number.

    `assumed` is True when the value carried no offset and was taken as UTC. Unreadable → (None,
    False). Numbers above 1e11 are read as ms, above 1e14 as µs, above 1e17 as ns.
    """
    if value is None or isinstance(value, bool):
        return None, False
    if isinstance(value, (int, float)):
        v = float(value)
        for scale in (1e17, 1e14, 1e11):
            if abs(v) > scale:
                v /= {1e17: 1e9, 1e14: 1e6, 1e11: 1e3}[scale]
                break
        return v, False
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            return None, False
        if dt.tzinfo is None:
            return dt.replace(tzinfo=timezone.utc).timestamp(), True
        return dt.timestamp(), False
    return None, False


def openai_tool_call(tc: dict, path: str = "tool_calls") -> ToolCall:
    """An OpenAI `{id, type, function: {name, arguments}}` (or flat) call, through `_openai`."""
    return tool_call_from_openai(tc, path)


def action_call(command: str, name: str | None = None) -> ToolCall:
    """A tool call for an action the harness parsed out of the model's text (no id was sampled):
    `name` defaults to the command's first word, arguments `{"command": ...}`."""
    word = command.strip().split(None, 1)[0] if command.strip() else "action"
    return ToolCall(id=None, name=name or word, arguments=json.dumps({"command": command}, ensure_ascii=False),
                    extra={"parsed_from_text": True})


def usage_from(d: Any) -> Usage | None:
    """OpenAI (`prompt_tokens`, `completion_tokens`, details) or Inspect/OTel-named usage."""
    if not isinstance(d, dict):
        return None
    def num(*keys):
        for k in keys:
            v = d.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return v
        return None
    cached = num("cache_read_input_tokens", "input_tokens_cache_read")
    details = d.get("prompt_tokens_details")
    if cached is None and isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        cached = details["cached_tokens"]
    reasoning = num("reasoning_tokens", "reasoning_output_tokens")
    cdetails = d.get("completion_tokens_details")
    if reasoning is None and isinstance(cdetails, dict) and isinstance(cdetails.get("reasoning_tokens"), int):
        reasoning = cdetails["reasoning_tokens"]
    u = Usage(input_tokens=num("input_tokens", "prompt_tokens"),
              output_tokens=num("output_tokens", "completion_tokens"),
              cache_read_input_tokens=cached, reasoning_output_tokens=reasoning, cost=num("cost", "total_cost"))
    return u if any(v is not None for v in (u.input_tokens, u.output_tokens, u.cache_read_input_tokens,
                                            u.reasoning_output_tokens, u.cost)) else None


class Chain(RolloutBuilder):
    """The shared `RolloutBuilder`, with assistant messages sampled unless said otherwise (none
    of these formats records tokens)."""

    def add(self, message: Message, tokens=None, *, sampled: bool | None = None, **kw: Any) -> int:  # type: ignore[override]
        return super().add(message, tokens, sampled=message.role == "assistant" if sampled is None else sampled, **kw)


def documents(source: Source) -> Iterator[tuple[int | None, Any]]:
    """The documents of a file: the one JSON document (line None), or each JSONL line's value
    (a one-line JSON file is read as JSONL; a bad line is a RecordError value)."""
    if source.kind == "jsonl":
        yield from source.lines()
    else:
        yield None, source.document


ReadOne = Callable[[Any, Source, ReadContext, "int | None"], Iterator["Rollout | RecordError"]]


def read_documents(source: Source, ctx: ReadContext, *, recognise: Callable[[Any], Any], what: str,
                   read_one: ReadOne) -> Iterator[Rollout | RecordError]:
    """Each document of `source` (`documents`): a bad line stays a RecordError; a document that
    `recognise` gives None for is rejected as not `what`; the rest go to `read_one(doc, source,
    ctx, line)`. An odd record is rejected with its reason, never raised."""
    for line, doc in documents(source):
        if isinstance(doc, RecordError):
            yield doc
        elif recognise(doc) is None:
            yield RecordError(source.name, line, None, f"not {what}")
        else:
            try:
                yield from read_one(doc, source, ctx, line)
            except Exception as exc:  # noqa: BLE001 - an odd record is rejected with its field, never raised
                yield record_error(source.name, line, None, exc)
