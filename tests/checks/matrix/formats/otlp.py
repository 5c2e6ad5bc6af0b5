"""OTLP/JSON traces with the OpenTelemetry GenAI semantic conventions, as the OpenTelemetry SDK's
OTLP exporter sends them and the Collector's `file` exporter stores them (one
`ExportTraceServiceRequest` JSON line per batch; here one trace, one line, per rollout).

Shape (open-telemetry/opentelemetry-proto `trace.proto` + OTLP/JSON rules; GenAI conventions in
../shared/formats-reference.md §4.1, `gen-ai-spans.md`, `gen-ai-input-messages.json`,
`gen-ai-output-messages.json`; tests/fixtures/cases/42-genai-messages-in-span-events.otlp.json):
`{resourceSpans: [{resource: {attributes: [service.name]}, scopeSpans: [{scope: {name, version},
spans: [...]}]}]}`; an `invoke_agent` root span, a `chat` span per model call (`kind` 3 CLIENT,
`gen_ai.input.messages` = the whole context it was sent and `gen_ai.output.messages` as JSON
strings, parts `text` / `reasoning` / `tool_call` (arguments an object) / `tool_call_response`;
`gen_ai.tool.definitions`, `gen_ai.request.max_tokens`, `gen_ai.response.finish_reasons` (string
array), `gen_ai.usage.input_tokens` / `.output_tokens`, start/end Unix nanoseconds as strings) and an
`execute_tool` span per tool run (`gen_ai.tool.call.id`, `gen_ai.tool.name`,
`gen_ai.tool.call.arguments` / `.result`, with its own start and end).

What GenAI has no place for: token ids, prompt ids, loss masks, logprobs (an open request:
semantic-conventions #1887, semantic-conventions-genai #18), token bytes, advantages. The RL fields
a harness attaches go as the `rollscope.*` attributes docs/formats-otlp.md documents ("RL fields":
`rollscope.rollout_id`, `.run`, `.step`, `.group`, `.group.index`, `.group.size`, `.reward`,
`.ending`), on the root span, as case 42 does. Content capture off
(`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` unset) leaves the message, argument and result
attributes out and keeps usage.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from tests.checks.matrix.episode import Episode

NAME = "otlp"
CARRIES = frozenset({"ending", "finish_reason", "max_tokens", "usage", "reasoning", "tool_calls", "tools",
                     "timing", "group", "group_index", "group_size", "reward", "step"})
ENDINGS = {"completed": "submitted", "max_turns": "truncated", "error": "error"}
MODEL = "tiny-qwen3"


def _value(v) -> dict:
    """A Python value as an OTLP/JSON AnyValue (int64 as a string, as protobuf's JSON mapping does)."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v if math.isfinite(v) else str(v)}  # proto3 JSON: "NaN", "Infinity"
    if isinstance(v, list):
        return {"arrayValue": {"values": [_value(x) for x in v]}}
    return {"stringValue": str(v)}


def _attrs(d: dict) -> list[dict]:
    return [{"key": k, "value": _value(v)} for k, v in d.items() if v is not None]


def _ns(t: float | None) -> str | None:
    return None if t is None else str(int(round(t * 1e9)))


def _id(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size * 2]


def _arguments(raw: str):
    try:
        return json.loads(raw)
    except ValueError:
        return raw  # the instrumentation keeps what it cannot parse as the string


def _parts(m: dict) -> list[dict]:
    """A chat message's GenAI parts (gen-ai-input-messages.json)."""
    if m["role"] == "tool":
        part = {"type": "tool_call_response", "response": m.get("content")}
        if m.get("tool_call_id") is not None:
            part["id"] = m["tool_call_id"]
        return [part]
    parts = []
    if m.get("reasoning_content"):
        parts.append({"type": "reasoning", "content": m["reasoning_content"]})
    if m.get("content"):
        parts.append({"type": "text", "content": m["content"]})
    for c in m.get("tool_calls") or []:
        parts.append({"type": "tool_call", "id": c["id"], "name": c["function"]["name"],
                      "arguments": _arguments(c["function"]["arguments"])})
    return parts


def _span(trace: str, sid: str, parent: str | None, name: str, kind: int, start, end, attrs: dict,
          error: bool = False) -> dict:
    s = {"traceId": trace, "spanId": sid}
    if parent:
        s["parentSpanId"] = parent
    s.update({"flags": 256, "name": name, "kind": kind})  # key order and flags as the SDK's encoder writes them
    if _ns(start) is not None:
        s["startTimeUnixNano"] = _ns(start)
    if _ns(end) is not None:  # a span whose end was never recorded has none
        s["endTimeUnixNano"] = _ns(end)
    s["attributes"] = _attrs(attrs)
    s["status"] = {"code": 2} if error else {}
    return s


def _trace(ep: Episode) -> dict:
    trace = _id(ep.run + ep.id, 16)
    root = _id(ep.id + "/root", 8)
    times = [t for turn in ep.turns for t in (turn.start, turn.end,
                                              *((turn.request.start, turn.request.end) if turn.request else ()))
             if t is not None]
    rl = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "calculator",
          "rollscope.rollout_id": ep.id, "rollscope.step": ep.step, "rollscope.group": ep.group,
          "rollscope.group.index": ep.index if ep.group else None,
          "rollscope.group.size": ep.size if ep.group else None,
          "rollscope.reward": ep.reward, "rollscope.ending": ENDINGS[ep.stop]}
    spans = [_span(trace, root, None, "invoke_agent calculator", 1, min(times) - 0.01, max(times) + 0.01, rl,
                   error=ep.stop == "error")]
    calls = {c["id"]: c for t in ep.turns for c in t.message.get("tool_calls") or []}
    for k, turn in enumerate(ep.turns):
        m, req = turn.message, turn.request
        if req is not None:
            a = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": MODEL,
                 "gen_ai.request.max_tokens": req.max_tokens, "gen_ai.response.model": MODEL,
                 "gen_ai.response.id": f"chatcmpl-{ep.id}-{k}",
                 "gen_ai.response.finish_reasons": [req.finish_reason],
                 "gen_ai.usage.input_tokens": len(req.prompt_ids),
                 "gen_ai.usage.output_tokens": req.usage_output_tokens}
            if ep.tools:
                a["gen_ai.tool.definitions"] = json.dumps(ep.tools)
            if ep.content_recorded:
                context = ep.messages(k)
                sys = [x for x in context if x["role"] == "system"]
                if sys:
                    a["gen_ai.system_instructions"] = json.dumps([{"type": "text", "content": x["content"]}
                                                                  for x in sys])
                a["gen_ai.input.messages"] = json.dumps([{"role": x["role"], "parts": _parts(x)}
                                                         for x in context if x["role"] != "system"])
                a["gen_ai.output.messages"] = json.dumps([{"role": "assistant", "parts": _parts(m),
                                                           "finish_reason": req.finish_reason}])
            spans.append(_span(trace, _id(f"{ep.id}/chat/{k}", 8), root, f"chat {MODEL}", 3,
                               req.start, req.end, a))
        elif m["role"] == "tool":
            call = calls.get(m.get("tool_call_id"))
            a = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": m.get("name"),
                 "gen_ai.tool.type": "function", "gen_ai.tool.call.id": m.get("tool_call_id")}
            if ep.content_recorded:
                a["gen_ai.tool.call.arguments"] = call["function"]["arguments"] if call else None
                a["gen_ai.tool.call.result"] = m.get("content")
            spans.append(_span(trace, _id(f"{ep.id}/tool/{k}", 8), root, f"execute_tool {m.get('name')}", 1,
                               turn.start, turn.end, a))
    return {"resourceSpans": [{
        "resource": {"attributes": _attrs({"service.name": ep.run, "telemetry.sdk.language": "python",
                                           "telemetry.sdk.name": "opentelemetry", "telemetry.sdk.version": "1.39.0"})},
        "scopeSpans": [{"scope": {"name": "opentelemetry.instrumentation.openai_v2", "version": "2.3b0"},
                        "spans": spans}]}]}


def write(episodes: list[Episode], folder: Path) -> Path:
    path = folder / "traces.jsonl"
    path.write_text("".join(json.dumps(_trace(ep)) + "\n" for ep in episodes))
    return path
