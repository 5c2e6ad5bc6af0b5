"""One rollout → OTel GenAI spans (`spans_from_rollout`), which `ingest/otel/read.py` reads
back into the same rollout.

Writing: `spans_from_rollout` emits `invoke_agent` (root, with the `rollscope.*` fields) → one
`chat` span per model call (output = the call's node; input = the messages on the path to it
after the previous model output on that branch, `rollscope.input.elided` counting the earlier
ones and `rollscope.input.after` naming the span that output the last of them, so the export
grows with the rollout, not its square) and one `execute_tool` span per tool result, so reading
them back gives the same rollout. Reading such an input continues after that span's output node.
"""
from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from ingest.formats._openai import arguments_text
from ingest.jsonio import dumps
from ingest.otel.semconv import (
    AFTER,
    CALL,
    ELIDED,
    ENDS_ROLLOUT,
    MESSAGE,
    NODE,
    NODES,
    RAW_ARGUMENTS,
    ROLLOUT,
    SAMPLING,
    genai_message,
    json_value,
    tool_message,
)
from ingest.otel.wire import STATUS_ERROR, SpanRecord
from ingest.schema import Ending, Message, Rollout, Span

# --- writing -------------------------------------------------------------------------------

def _id(seed: str, n: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[: n * 2]


def _message_json(m: Message, finish: str | None = None) -> dict:
    parts: list[dict] = []
    if m.reasoning_content:
        parts.append({"type": "reasoning", "content": m.reasoning_content})
    if m.role == "tool":
        parts.append({"type": "tool_call_response", "id": m.tool_call_id,
                      "response": m.text() if isinstance(m.content, str) or m.content is None else m.content})
    elif isinstance(m.content, str):
        parts.append({"type": "text", "content": m.content})
    elif isinstance(m.content, list):
        parts += [{"type": "text", "content": p.get("text", "")} if p.get("type") == "text" else p for p in m.content]
    for c in m.tool_calls or []:
        args = json_value(c.arguments) if c.arguments else None
        part = {"type": "tool_call", "id": c.id, "name": c.name,
                "arguments": c.arguments if args is None and c.arguments else args}
        if args is not None and arguments_text(args) != c.arguments:
            part[RAW_ARGUMENTS] = c.arguments  # the string as sampled, where the object would not rebuild it
        if c.extra.get("ends_rollout"):
            part[ENDS_ROLLOUT] = True
        parts.append(part)
    out: dict[str, Any] = {"role": m.role, "parts": parts}
    if m.name:
        out["name"] = m.name
    if finish:
        out["finish_reason"] = finish
    return out


def _attr_json(value: Any) -> str:
    """A JSON attribute value keeping every digit of big integers (`ingest.jsonio.dumps`)."""
    return dumps(value).decode("utf-8")


def _item(r: Rollout, i: int, finish: str | None = None) -> dict:
    """Node `i`'s message as a GenAI message item, with its node index (`rollscope.node`) and,
    where the GenAI form would not give the message back exactly, the message itself
    (`rollscope.message`)."""
    m = r.nodes[i].message
    item = _message_json(m, finish)
    item[NODE] = i
    if genai_message(item)[0].to_json_dict() != m.to_json_dict():
        item[MESSAGE] = m.to_json_dict()
    return item


class _Items:
    """Each node's message item as JSON text, made once (a tool result is in its execute_tool
    span and in the next chat span's input)."""

    def __init__(self, r: Rollout) -> None:
        self.r = r
        self.text: dict[int, str] = {}

    def json(self, path: list[int]) -> str:
        for i in path:
            if i not in self.text:
                self.text[i] = json.dumps(_item(self.r, i), ensure_ascii=False)
        return "[" + ",".join(self.text[i] for i in path) + "]"


def spans_from_rollout(r: Rollout, *, service: str = "rollscope") -> list[SpanRecord]:
    """OTel GenAI spans for one rollout: an `invoke_agent` root (with the `rollscope.*` RL
    fields), a `chat` span per model call and an `execute_tool` span per tool result, so a
    GenAI viewer sees the conversation. Ids come from the rollout's own trace when it was read
    from OTLP, else from a hash of run and rollout id.

    What GenAI has no place for travels as `rollscope.*` attributes, so reading the spans back
    (`rollout_from_spans`) gives the same rollout: on the root `rollscope.rollout` (the
    rollout's fields other than nodes and calls, JSON) and `rollscope.nodes` (per node, in node
    order: parent, sampled, timestamp, token ids, mask, logprobs, advantages, ... without the
    message); on each message item `rollscope.node` (its node index) and `rollscope.message`
    where the GenAI parts would not rebuild the message exactly; on each `chat` span
    `rollscope.call` (the recorded call, JSON, with its index). A chat span's input holds only
    the messages after the previous model output on its branch (the system prompt and task in
    the first call only): `rollscope.input.elided` says how many earlier messages of the context
    were left out and `rollscope.input.after` which span output the last of them; a span whose
    input starts at the root has neither. An assistant message with no
    recorded call gets a `chat` span with `rollscope.call = false`, and a conversation that ends
    on a user or system message one with that path as input and no output, so every message
    is in some span."""
    otel = r.extra.get("otel") or {}
    trace_id = otel.get("trace_id") or _id(f"{r.run.id}\x00{r.id}", 16)
    root_id = otel.get("root_span_id") or _id(f"{trace_id}:root", 8)
    t0 = r.timing.get("start") if isinstance(r.timing.get("start"), (int, float)) else None
    t1 = r.timing.get("end") if isinstance(r.timing.get("end"), (int, float)) else None
    ns = (lambda t: int(round(t * 1e9)) if t is not None else None)
    resource = {"service.name": service}
    attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "rollscope.rollout_id": r.id,
                             "rollscope.run": r.run.id, "rollscope.ending": r.ending.type.value}
    if otel.get("agent"):
        attrs["gen_ai.agent.name"] = otel["agent"]
    if r.ending.detail:
        attrs["rollscope.ending.detail"] = r.ending.detail
    if r.ending.message:
        attrs["rollscope.ending.message"] = r.ending.message
    if r.step is not None:
        attrs["rollscope.step"] = r.step
    if r.group is not None:
        attrs["rollscope.group"] = r.group.id
        if r.group.index is not None:
            attrs["rollscope.group.index"] = r.group.index
        if r.group.size is not None:
            attrs["rollscope.group.size"] = r.group.size
    if r.attempt:
        attrs["rollscope.attempt"] = r.attempt
    if r.reward is not None and math.isfinite(r.reward):
        attrs["rollscope.reward"] = float(r.reward)
    if r.rewards:
        attrs["rollscope.rewards"] = json.dumps({k: None if v is None else {
            "score": v.score, "weight": v.weight, **({"extra": v.extra} if v.extra else {})}
            for k, v in r.rewards.items()},
            default=str)
    if r.task is not None:
        attrs["rollscope.task"] = _attr_json(r.task.to_json_dict())
    attrs[ROLLOUT] = _attr_json(r.to_json_dict(exclude={"nodes", "calls", "source"}))
    attrs[NODES] = _attr_json([n.to_json_dict(exclude={"message"}) for n in r.nodes])
    root = SpanRecord(trace_id=trace_id, span_id=root_id, parent_span_id=None,
                      name=f"invoke_agent {otel.get('agent') or 'agent'}", kind=1,
                      start_ns=otel.get("start_ns") or ns(t0), end_ns=otel.get("end_ns") or ns(t1),
                      attributes=attrs, resource=resource, scope="rollscope",
                      status_code=STATUS_ERROR if r.ending.type == Ending.error and r.errors else 0,
                      status_message=r.errors[0].message if r.ending.type == Ending.error and r.errors else "")
    out = [root]

    items = _Items(r)
    has_child = {n.parent for n in r.nodes if n.parent is not None}
    call_of = {c.node: k for k, c in enumerate(r.calls) if c.node is not None and 0 <= c.node < len(r.nodes)}
    # The span that outputs each node some chat span outputs: where a later input may start.
    output_span = {i: _call_span_id(r, k, trace_id) for i, k in call_of.items()}
    output_span.update({i: _id(f"{trace_id}:node:{i}", 8) for i, n in enumerate(r.nodes)
                        if i not in call_of and n.message.role == "assistant"})

    depth = _depths(r)

    def new_input(last: int | None) -> dict[str, Any]:
        """`gen_ai.input.messages` for a span whose context is the path to node `last`: only the
        messages after the last one an earlier chat span output (the previous model call on this
        branch), with how many were left out and that span's id, so the export grows with the
        rollout, not with its square."""
        new: list[int] = []
        while last is not None and last not in output_span:
            new.append(last)
            last = r.nodes[last].parent
        a: dict[str, Any] = {"gen_ai.input.messages": items.json(new[::-1])}
        if last is not None:
            a[ELIDED] = depth[last] + 1
            a[AFTER] = output_span[last]
        return a

    chosen = set(call_of.values())
    order: list[tuple[str, int]] = [("call", k) for k, c in enumerate(r.calls) if c.node is None or k not in chosen]
    for i, n in enumerate(r.nodes):
        if i in call_of:
            order.append(("call", call_of[i]))
        elif n.message.role == "tool":
            order.append(("tool", i))
        elif n.message.role == "assistant" or i not in has_child:
            order.append(("node", i))  # a message no call or tool span would carry
    for what, k in order:
        if what == "call":
            out.append(_chat_span(r, k, trace_id, root_id, resource, new_input))
            continue
        n = r.nodes[k]
        if what == "node":
            a = {"gen_ai.operation.name": "chat", CALL: False}
            if n.message.role == "assistant":
                a.update(new_input(n.parent))
                a["gen_ai.output.messages"] = items.json([k])
            else:
                a.update(new_input(k))
            out.append(SpanRecord(trace_id=trace_id, span_id=_id(f"{trace_id}:node:{k}", 8), parent_span_id=root_id,
                                  name="chat", kind=3, start_ns=ns(n.timestamp), end_ns=ns(n.timestamp),
                                  attributes=a, resource=resource, scope="rollscope"))
            continue
        a = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.result": n.message.text(), NODE: k}
        if n.message.tool_call_id:
            a["gen_ai.tool.call.id"] = n.message.tool_call_id
        if n.message.name:
            a["gen_ai.tool.name"] = n.message.name
        if tool_message(a).to_json_dict() != n.message.to_json_dict():
            a[MESSAGE] = _attr_json(n.message.to_json_dict())
        out.append(SpanRecord(trace_id=trace_id, span_id=_id(f"{trace_id}:tool:{k}", 8), parent_span_id=root_id,
                              name=f"execute_tool {n.message.name or ''}".strip(), kind=1,
                              start_ns=ns(n.timestamp), end_ns=ns(n.timestamp), attributes=a,
                              resource=resource, scope="rollscope"))
    return out


def _call_span_id(r: Rollout, k: int, trace_id: str) -> str:
    return r.calls[k].extra.get("span_id") or _id(f"{trace_id}:call:{k}", 8)


def _depths(r: Rollout) -> list[int]:
    """Each node's position in its path (a root is 0), in one pass over the nodes."""
    depth: list[int | None] = [None] * len(r.nodes)
    for i in range(len(r.nodes)):
        up, j = [], i
        while j is not None and depth[j] is None:
            up.append(j)
            j = r.nodes[j].parent
        d = -1 if j is None else depth[j]
        for j in reversed(up):
            d += 1
            depth[j] = d
    return depth  # type: ignore[return-value]


def _chat_span(r: Rollout, k: int, trace_id: str, root_id: str, resource: dict, new_input) -> SpanRecord:
    c = r.calls[k]
    ns = (lambda t: int(round(t * 1e9)) if t is not None else None)
    a: dict[str, Any] = {"gen_ai.operation.name": "chat"}
    if c.model:
        a["gen_ai.request.model"] = c.model
    for key, v in (c.sampling or {}).items():
        if key in SAMPLING and isinstance(v, (str, int, float, bool, list)):
            a[f"gen_ai.request.{key}"] = v
    if c.finish_reason_raw or c.finish_reason:
        a["gen_ai.response.finish_reasons"] = [c.finish_reason_raw or c.finish_reason]
    if c.usage is not None:
        for attr, v in (("gen_ai.usage.input_tokens", c.usage.input_tokens),
                        ("gen_ai.usage.output_tokens", c.usage.output_tokens),
                        ("gen_ai.usage.cache_read.input_tokens", c.usage.cache_read_input_tokens),
                        ("gen_ai.usage.reasoning.output_tokens", c.usage.reasoning_output_tokens),
                        ("rollscope.usage.cost", c.usage.cost)):
            if v is not None:
                a[attr] = v
    if c.node is not None and 0 <= c.node < len(r.nodes):
        a.update(new_input(r.nodes[c.node].parent))
        a["gen_ai.output.messages"] = json.dumps([_item(r, c.node, c.finish_reason_raw)], ensure_ascii=False)
    a[CALL] = _attr_json({"index": k, **c.to_json_dict()})
    time = c.time or Span()
    return SpanRecord(
        trace_id=trace_id, span_id=_call_span_id(r, k, trace_id), parent_span_id=root_id,
        name=f"chat {c.model or ''}".strip(), kind=3,
        start_ns=c.extra.get("start_ns") or ns(time.start), end_ns=c.extra.get("end_ns") or ns(time.end),
        attributes=a, resource=resource, scope="rollscope",
        status_code=STATUS_ERROR if c.error else 0, status_message=c.error.message if c.error else "")
