"""Trackio spans → Rollscope calls and tool results, by trackio's own rules
(trackio/agent_sessions.py, what it renders for the Hub's viewer): generation spans ordered by
start time pair with the assistant messages in order and become their calls (model, usage, times,
error); a tool result takes the tool span whose id is its `tool_call_id`, else the next unused one,
and a span in status `error`/`failed` or with an `error` marks the result failed
(`message.extra.error`, counted by `ingest.metrics.tool_errors`). A trace with spans and no
messages is built from its spans. Used by `ingest/formats/trackio.py`.
"""
from __future__ import annotations

import math
from typing import Any

from ingest.fields import FieldError
from ingest.formats import _openai
from ingest.formats._build import RolloutBuilder
from ingest.formats.base import id_text
from ingest.schema import Call, Error, Message, Span, Usage
from ingest.timestamps import to_epoch

FINISH_KEYS = ("finish_reason", "stop_reason")
ERROR_STATUSES = frozenset({"error", "failed"})


def stamp(value: Any, path: str) -> float | None:
    if value in (None, ""):
        return None
    try:
        return to_epoch(value, path).epoch
    except FieldError:
        return None


def ordered(spans: list[dict], kind: str) -> list[dict]:
    """Spans of one kind by start time, then position (trackio.agent_sessions._ordered_spans)."""
    indexed = [(i, s) for i, s in enumerate(spans) if str(s.get("kind") or "").lower() == kind]

    def key(item: tuple[int, dict]) -> tuple[float, int]:
        start = stamp(item[1].get("start_time") or item[1].get("startTime"), "start_time")
        return (start if start is not None else math.inf, item[0])

    return [s for _, s in sorted(indexed, key=key)]


def span_is_error(span: dict) -> bool:
    """trackio.agent_sessions._span_is_error: status error/failed, or an error set."""
    return str(span.get("status") or "").lower() in ERROR_STATUSES or bool(span.get("error"))


def _error_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for k in ("message", "error", "type"):
            if isinstance(value.get(k), str):
                return value[k]
    return "" if value is None or value is True else _openai.arguments_text(value)


def span_time(span: dict) -> tuple[float | None, float | None]:
    start = stamp(span.get("start_time") or span.get("startTime"), "start_time")
    end = stamp(span.get("end_time") or span.get("endTime"), "end_time")
    duration = span.get("duration_ms")
    if isinstance(duration, (int, float)) and not isinstance(duration, bool) and math.isfinite(duration):
        if end is None and start is not None:
            end = start + duration / 1000
        elif start is None and end is not None:
            start = end - duration / 1000
    return start, end


def _usage(span: dict) -> Usage | None:
    """trackio.agent_sessions.span_usage's fields: input/prompt, output/completion, cache reads, cost."""
    u = span.get("usage") if isinstance(span.get("usage"), dict) else {}

    def count(*keys: str) -> int | None:
        for k in keys:
            v = u.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
            if isinstance(v, float) and v.is_integer():
                return int(v)
        return None

    cost = span.get("cost_usd")
    cost = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None
    details = u.get("completion_tokens_details") if isinstance(u.get("completion_tokens_details"), dict) else {}
    usage = Usage(input_tokens=count("input_tokens", "prompt_tokens"),
                  output_tokens=count("output_tokens", "completion_tokens"),
                  cache_read_input_tokens=count("cache_read_input_tokens", "cached_tokens"),
                  reasoning_output_tokens=count("reasoning_tokens") or (
                      details.get("reasoning_tokens") if isinstance(details.get("reasoning_tokens"), int) else None),
                  cost=cost)
    rest = {k: v for k, v in u.items() if k not in ("input_tokens", "prompt_tokens", "output_tokens",
                                                     "completion_tokens", "cache_read_input_tokens", "cached_tokens",
                                                     "reasoning_tokens")}
    if rest:
        usage.extra.update(rest)
    if all(getattr(usage, f) is None for f in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                                               "reasoning_output_tokens", "cost")) and not rest:
        return None
    return usage


def _span_finish(span: dict) -> str | None:
    for holder in (span, span.get("metadata"), span.get("output")):
        if isinstance(holder, dict):
            for k in FINISH_KEYS:
                if isinstance(holder.get(k), str):
                    return holder[k]
    return None


def _span_extra(span: dict) -> dict:
    out = {"span_id": span.get("id"), "span_name": span.get("name")}
    for k in ("parent_id", "status", "duration_ms", "metadata"):
        if span.get(k) is not None:
            out[k] = span[k]
    return {k: v for k, v in out.items() if v is not None}


def _generation_call(b: RolloutBuilder, node: int | None, span: dict, errors: list[Error], *,
                     last: bool = True) -> Call:
    """The call of one generation span. A failed one is the rollout's error only when it is the
    last generation (the rollout ended on it); one that was retried is the call's error alone."""
    start, end = span_time(span)
    error = None
    if span_is_error(span):
        error = Error(type="generation_error", message=_error_text(span.get("error")) or str(span.get("status")))
        if last:
            errors.append(error.model_copy())
    model = span.get("model") if isinstance(span.get("model"), str) else None
    return b.call(node, _span_finish(span), _usage(span), model=model,
                  time=Span(start=start, end=end) if start is not None or end is not None else None,
                  error=error, extra=_span_extra(span))


def apply_spans(b: RolloutBuilder, messages: list, generations: list[dict], tool_spans: list[dict],
                 spans: list[dict], errors: list[Error]) -> None:
    """Spans onto the message nodes (node i is message i): generation spans become the calls of
    the assistant messages in order, tool spans mark their tool results. With more generation
    spans than assistant messages, failed generations (retried, they produced no message) are
    left without a node first, so the messages keep the generations that produced them; any
    surplus beyond those is a call without a node."""
    assistants = [i for i, n in enumerate(b.nodes) if n.message.role == "assistant"]
    message_calls = {c.node: c for c in b.calls}
    surplus = len(generations) - len(assistants)
    unpaired = set()
    for k, span in enumerate(generations):
        if len(unpaired) < surplus and span_is_error(span):
            unpaired.add(k)
    slots = iter(assistants)
    for k, span in enumerate(generations):
        node = None if k in unpaired else next(slots, None)
        call = _generation_call(b, node, span, errors, last=k == len(generations) - 1)
        old = message_calls.get(node)
        if old is not None and node is not None:  # the message's own finish_reason: keep it on the span's call
            b.calls.remove(old)
            if call.finish_reason_raw is None:
                call.finish_reason, call.finish_reason_raw = old.finish_reason, old.finish_reason_raw
        if node is not None and b.nodes[node].timestamp is None and call.time is not None:
            b.nodes[node].timestamp = call.time.end if call.time.end is not None else call.time.start
    by_id = {str(s.get("id")): s for s in tool_spans}
    remaining = list(tool_spans)
    for i, node in enumerate(b.nodes):
        if node.message.role != "tool":
            continue
        raw = messages[i] if i < len(messages) and isinstance(messages[i], dict) else {}
        call_id = raw.get("tool_call_id") or raw.get("toolCallId")
        span = by_id.get(str(call_id)) if call_id is not None else None
        if span is None and remaining:
            span = remaining[0]
        if span is not None and span in remaining:
            remaining.remove(span)
        x = node.message.extra
        if raw.get("isError") is True:
            x["is_error"] = True
        status = raw.get("status")
        if isinstance(status, str) and status.lower() in ERROR_STATUSES and not x.get("error"):
            x["error"] = status
        if span is not None:
            x["tool_span"] = _span_extra(span)
            start, end = span_time(span)
            if start is not None or end is not None:
                x["tool_span"]["time"] = {"start": start, "end": end}
            if node.timestamp is None and end is not None:
                node.timestamp = end
            if span_is_error(span) and not x.get("error") and x.get("is_error") is not True:
                x["error"] = _error_text(span.get("error")) or str(span.get("status"))
    if remaining:
        b.extra.setdefault("trackio_unmatched_tool_spans", [s.get("id") for s in remaining])


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        for k in ("text", "content", "message", "output"):
            if isinstance(value.get(k), str):
                return value[k]
    return _openai.arguments_text(value)


def from_spans(b: RolloutBuilder, spans: list[dict], errors: list[Error]) -> None:
    """A trace with spans and no messages (trackio.agent_sessions._spans_to_entries): a
    generation is an assistant turn (its output the text; the first one's input, when it is a
    string or a message list, the context); a tool span is a call on the generation before it
    (else on a node of its own) and its result."""
    def order(item: tuple[int, dict]) -> tuple[float, int]:
        start = stamp(item[1].get("start_time") or item[1].get("startTime"), "start_time")
        return (start if start is not None else math.inf, item[0])

    last_gen: int | None = None
    for i, span in sorted(enumerate(spans), key=order):
        kind = str(span.get("kind") or "span").lower()
        if kind == "generation":
            if not b.nodes:
                inp = span.get("input")
                if isinstance(inp, list) and all(isinstance(m, dict) and "role" in m for m in inp):
                    _openai.add_messages(b, inp, f"spans[{i}].input")
                elif isinstance(inp, str):
                    b.add(Message(role="user", content=inp), extra={"from_span": span.get("id")})
            last_gen = b.add(Message(role="assistant", content=_text(span.get("output"))), sampled=True,
                             extra={"from_span": span.get("id")})
            call = _generation_call(b, last_gen, span, errors)
            if call.time is not None:
                b.nodes[last_gen].timestamp = call.time.end if call.time.end is not None else call.time.start
        elif kind == "tool":
            call_id = id_text(span.get("id"), f"spans[{i}].id") or f"span-{i}"
            name = span.get("name") if isinstance(span.get("name"), str) and span.get("name") else "tool"
            tc = _openai.tool_call(call_id, name, span.get("input"))
            if last_gen is not None and b.last == last_gen:
                msg = b.nodes[last_gen].message
                msg.tool_calls = (msg.tool_calls or []) + [tc]
            else:
                b.add(Message(role="assistant", tool_calls=[tc]), extra={"from_span": span.get("id"),
                                                                         "synthetic": "a tool span's call"})
            _, end = span_time(span)
            x: dict[str, Any] = {"tool_span": _span_extra(span)}
            if span_is_error(span):
                x["error"] = _error_text(span.get("error")) or str(span.get("status"))
            content = span.get("error") if span_is_error(span) and span.get("output") is None else span.get("output")
            b.add(Message(role="tool", tool_call_id=call_id, name=name, content=_text(content), extra=x),
                  timestamp=end)
            last_gen = None
