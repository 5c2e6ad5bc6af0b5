"""The span conventions Rollscope reads and writes: the OpenTelemetry GenAI semantic conventions
(open-telemetry/semantic-conventions `docs/gen-ai/gen-ai-spans.md`, `gen-ai-agent-spans.md`,
`model/gen-ai/registry.yaml`, `gen-ai-input-messages.json`, `gen-ai-output-messages.json`) and
OpenInference's (Arize-ai/openinference `spec/semantic_conventions.md`, `spec/tool_calling.md`).

Here: the `rollscope.*` attribute names, a span's role (model call, tool, agent), and the
messages a span's attributes carry, in every form listed in `ingest/otel/read.py`.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ingest.fields import FieldError
from ingest.formats._openai import arguments_text, message_from_openai, normalize_parts
from ingest.otel.wire import SpanRecord
from ingest.schema import Message, ToolCall

MODEL_OPS = frozenset({"chat", "text_completion", "generate_content", "completion"})
AGENT_OPS = frozenset({"invoke_agent", "create_agent"})
ROLES = {"system": "system", "developer": "system", "user": "user", "human": "user", "assistant": "assistant",
         "ai": "assistant", "model": "assistant", "tool": "tool", "function": "tool", "ipython": "tool"}
RAW_ARGUMENTS = "rollscope.arguments_raw"  # on a tool_call part: the argument string as sampled
ENDS_ROLLOUT = "rollscope.ends_rollout"  # on a tool_call part: the call ended the rollout (submit, finish)
# What GenAI has no place for, written by `spans_from_rollout` so a round trip loses nothing:
ROLLOUT = "rollscope.rollout"  # root: the rollout's fields other than nodes and calls (JSON)
NODES = "rollscope.nodes"  # root: per node, its fields other than the message (JSON list, node order)
NODE = "rollscope.node"  # on a message item or an execute_tool span: the node index
MESSAGE = "rollscope.message"  # beside it: the message, where the GenAI form would not rebuild it
CALL = "rollscope.call"  # on a chat span: the recorded call (JSON with its `index`), or false: no call
# A chat span's input holds only the messages after the previous model output on its branch:
ELIDED = "rollscope.input.elided"  # on a chat span: how many earlier messages of its context were left out
AFTER = "rollscope.input.after"  # beside it: the span id whose output is the message just before its input
SAMPLING = ("temperature", "top_p", "top_k", "max_tokens", "seed", "stop_sequences", "frequency_penalty",
            "presence_penalty", "choice.count")


# --- span roles ----------------------------------------------------------------------------

def _op(s: SpanRecord) -> str | None:
    op = s.attributes.get("gen_ai.operation.name")
    if isinstance(op, str):
        return op
    kind = str(s.attributes.get("openinference.span.kind", "")).upper()
    return {"LLM": "chat", "TOOL": "execute_tool", "AGENT": "invoke_agent"}.get(kind)


def is_model_span(s: SpanRecord) -> bool:
    if _op(s) in MODEL_OPS:
        return True
    return any(k.startswith(("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.prompt.",
                             "gen_ai.completion.", "llm.input_messages.", "llm.output_messages."))
               for k in s.attributes)


def is_tool_span(s: SpanRecord) -> bool:
    return _op(s) == "execute_tool"


def is_agent_span(s: SpanRecord) -> bool:
    return _op(s) in AGENT_OPS


def is_genai_trace(spans: Iterable[SpanRecord]) -> bool:
    """True when some span is a model call, tool call or agent by either convention."""
    return any(is_model_span(s) or is_tool_span(s) or is_agent_span(s) for s in spans)


# --- messages from attributes --------------------------------------------------------------

def json_value(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return None
    return v


def _indexed(attrs: dict, prefix: str) -> dict[int, dict[str, Any]]:
    """`prefix.N.rest = v` → {N: {rest: v}}."""
    out: dict[int, dict[str, Any]] = {}
    for k, v in attrs.items():
        if not k.startswith(prefix):
            continue
        head, _, rest = k[len(prefix):].partition(".")
        if head.isdigit() and rest:
            out.setdefault(int(head), {})[rest] = v
    return dict(sorted(out.items()))


def text_value(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False, sort_keys=True)


def _genai_messages(items: Any) -> list[tuple[Message, str | None]]:
    return [genai_message(m) for m in _genai_items(items)]


def _genai_items(items: Any) -> list[dict]:
    return [m for m in items if isinstance(m, dict)] if isinstance(items, list) else []


def genai_message(m: dict) -> tuple[Message, str | None]:
    """One `gen_ai.*.messages` item → (Message, finish reason)."""
    if True:
        role = ROLES.get(str(m.get("role", "user")).lower(), "user")
        texts, reasoning, calls, other = [], [], [], []
        tool_call_id = None
        content: Any = None
        for p in m.get("parts") or []:
            t = p.get("type") if isinstance(p, dict) else None
            if t == "text":
                texts.append(str(p.get("content", p.get("text", ""))))
            elif t in ("reasoning", "thinking"):
                reasoning.append(str(p.get("content", "")))
            elif t == "tool_call":
                raw = p.get(RAW_ARGUMENTS)
                calls.append(ToolCall(id=p.get("id"), name=str(p.get("name") or ""),
                                      arguments=raw if isinstance(raw, str) else arguments_text(p.get("arguments")),
                                      extra={"ends_rollout": True} if p.get(ENDS_ROLLOUT) else {}))
            elif t == "tool_call_response":
                tool_call_id = p.get("id")
                content = text_value(p.get("response", p.get("result")))
                role = "tool"
            elif isinstance(p, dict):
                other.append(p)
        media: dict = {}
        if other:  # blob / uri / file parts (and any other): the one normaliser (`_openai.normalize_parts`)
            other, notes = normalize_parts(other, "parts")
            media = notes.get("media") or {}
        if content is None:
            content = "\n".join(texts) if texts and not other else ([{"type": "text", "text": x} for x in texts] + other
                                                                    if other else None)
        extra = ({"source_role": m["role"]}
                 if role != m.get("role") and m.get("role") not in ("tool",) and role != "tool" else {})
        if media:
            extra["media"] = media
        return (Message(role=role, content=content, reasoning_content="\n".join(reasoning) if reasoning else None,
                        tool_calls=calls or None, tool_call_id=tool_call_id, name=m.get("name"), extra=extra),
                m.get("finish_reason"))


def _flat_messages(attrs: dict, prefix: str, oi: bool) -> list[tuple[Message, str | None]]:
    out = []
    for _, d in _indexed(attrs, prefix).items():
        if oi:
            d = {k.removeprefix("message."): v for k, v in d.items()}
        role = ROLES.get(str(d.get("role", "user")).lower(), "user")
        content = d.get("content")
        if content is None and oi:
            parts = _indexed(d, "contents.")
            texts = [p.get("message_content.text") for p in parts.values() if p.get("message_content.text") is not None]
            content = "\n".join(texts) if texts else None
        calls = []
        for _, tc in _indexed(d, "tool_calls.").items():
            if oi:
                calls.append(ToolCall(id=tc.get("tool_call.id"), name=str(tc.get("tool_call.function.name") or ""),
                                      arguments=arguments_text(tc.get("tool_call.function.arguments"))))
            else:
                calls.append(ToolCall(id=tc.get("id"), name=str(tc.get("name") or ""),
                                      arguments=arguments_text(tc.get("arguments"))))
        out.append((Message(role=role, content=text_value(content), tool_calls=calls or None,
                            tool_call_id=d.get("tool_call_id"), name=d.get("name")), d.get("finish_reason")))
    return out


def genai_items(s: SpanRecord) -> tuple[list[dict], list[dict]] | None:
    """(input items, output items) of a span in the JSON-messages form (system instructions as a
    first system item), or None when it uses another form."""
    a = s.attributes
    if not ("gen_ai.input.messages" in a or "gen_ai.output.messages" in a or "gen_ai.system_instructions" in a):
        return None
    ins: list[dict] = []
    sys = json_value(a.get("gen_ai.system_instructions"))
    if isinstance(sys, list) and sys:
        text = "\n".join(str(p.get("content", "")) for p in sys if isinstance(p, dict))
        ins.append({"role": "system", "parts": [{"type": "text", "content": text}]})
    return (ins + _genai_items(json_value(a.get("gen_ai.input.messages"))),
            _genai_items(json_value(a.get("gen_ai.output.messages"))))


def span_messages(s: SpanRecord) -> tuple[list[Message], list[tuple[Message, str | None]]]:
    """(input messages, [(output message, finish reason)]) of a model span, newest convention first."""
    a = s.attributes
    inputs: list[Message] = []
    if "gen_ai.input.messages" in a or "gen_ai.output.messages" in a or "gen_ai.system_instructions" in a:
        sys = json_value(a.get("gen_ai.system_instructions"))
        if isinstance(sys, list) and sys:
            text = "\n".join(str(p.get("content", "")) for p in sys if isinstance(p, dict))
            inputs.append(Message(role="system", content=text))
        inputs += [m for m, _ in _genai_messages(json_value(a.get("gen_ai.input.messages")))]
        return inputs, _genai_messages(json_value(a.get("gen_ai.output.messages")))
    if any(k.startswith("gen_ai.prompt.") or k.startswith("gen_ai.completion.") for k in a):
        return ([m for m, _ in _flat_messages(a, "gen_ai.prompt.", False)],
                _flat_messages(a, "gen_ai.completion.", False))
    inputs = [m for m, _ in _flat_messages(a, "llm.input_messages.", True)]
    outputs = _flat_messages(a, "llm.output_messages.", True)
    if inputs or outputs:
        return inputs, outputs
    return event_messages(s)


# Span events that carried message content before it moved to attributes (semconv 1.37):
# ≤ 1.27 two events holding OpenAI-style message lists as JSON; 1.28-1.36 one event per message.
CONTENT_EVENTS = {"gen_ai.content.prompt": "gen_ai.prompt", "gen_ai.content.completion": "gen_ai.completion"}
MESSAGE_EVENTS = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                  "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}
CHOICE_EVENT = "gen_ai.choice"


def event_messages(s: SpanRecord) -> tuple[list[Message], list[tuple[Message, str | None]]]:
    """(inputs, [(output, finish reason)]) from a model span's events, in the two older forms:
    `gen_ai.content.prompt` / `gen_ai.content.completion` with `gen_ai.prompt` / `gen_ai.completion`
    (a JSON list of OpenAI chat messages, semconv ≤ 1.27), and one event per message
    (`gen_ai.{system,user,assistant,tool}.message` with `content`, `tool_calls`, `id`; `gen_ai.choice`
    with `message`, `finish_reason`, `index`; semconv 1.28-1.36, open-telemetry/semantic-conventions
    #980). Empty when the span has none of them. A message that is not OpenAI-shaped is skipped."""
    inputs: list[Message] = []
    outputs: list[tuple[Message, str | None]] = []
    for e in s.events:
        name, ea = e.get("name"), e.get("attributes") or {}
        if name in CONTENT_EVENTS:
            items = json_value(ea.get(CONTENT_EVENTS[name]))
            for m in items if isinstance(items, list) else []:
                msg = _openai(m)
                if msg is None:
                    continue
                if name == "gen_ai.content.prompt":
                    inputs.append(msg[0])
                else:
                    outputs.append(msg)
        elif name in MESSAGE_EVENTS:
            content = ea.get("content")  # a string, or structured parts as JSON
            parsed = json_value(content) if isinstance(content, str) and content[:1] in "[{" else None
            d = {"role": MESSAGE_EVENTS[name], "content": parsed if isinstance(parsed, list) else content}
            if ea.get("tool_calls") is not None:
                d["tool_calls"] = json_value(ea.get("tool_calls"))
            if name == "gen_ai.tool.message" and ea.get("id") is not None:
                d["tool_call_id"] = str(ea["id"])
            msg = _openai(d)
            if msg is not None:
                inputs.append(msg[0])
        elif name == CHOICE_EVENT:
            raw = ea.get("message")
            m = json_value(raw) if isinstance(raw, str) else raw
            if not isinstance(m, dict):  # not JSON: the message's text itself
                m = {"content": raw}
            msg = _openai({"role": "assistant", **m})
            if msg is not None:
                outputs.append((msg[0],
                                ea.get("finish_reason") if isinstance(ea.get("finish_reason"), str) else msg[1]))
    return inputs, outputs


def _openai(m: Any) -> tuple[Message, str | None] | None:
    if not isinstance(m, dict):
        return None
    if isinstance(m.get("content"), (dict, int, float)):
        m = {**m, "content": text_value(m["content"])}
    try:
        got = message_from_openai(m, "event")
    except (FieldError, ValueError):
        return None
    return got.message, got.finish_reason

def tool_message(a: dict, span_name: str = "") -> Message:
    """The tool result an `execute_tool` / TOOL span carries."""
    cid = a.get("gen_ai.tool.call.id") or a.get("tool_call.id")
    name = a.get("gen_ai.tool.name") or a.get("tool.name") or span_name.removeprefix("execute_tool").strip() or None
    result = a.get("gen_ai.tool.call.result", a.get("output.value"))
    return Message(role="tool", content=text_value(result), tool_call_id=cid, name=name)
