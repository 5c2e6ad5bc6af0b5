"""One trace's spans ↔ one rollout, by the OpenTelemetry GenAI semantic conventions
(open-telemetry/semantic-conventions `docs/gen-ai/gen-ai-spans.md`, `gen-ai-agent-spans.md`,
`model/gen-ai/registry.yaml`, `gen-ai-input-messages.json`, `gen-ai-output-messages.json`) and
OpenInference's (Arize-ai/openinference `spec/semantic_conventions.md`, `spec/tool_calling.md`).

Reading (docs/formats.md, "OpenTelemetry"):
- Span roles: a model call is a span with `gen_ai.operation.name` ∈ {chat, text_completion,
  generate_content} or `openinference.span.kind = LLM`, or one carrying message attributes; a
  tool execution is `execute_tool` / `TOOL`; an agent is `invoke_agent` / `create_agent` /
  `AGENT`.
- Messages, newest form first: `gen_ai.system_instructions` + `gen_ai.input.messages` /
  `gen_ai.output.messages` (JSON `[{role, parts: [{type: text|reasoning|tool_call|
  tool_call_response|...}], finish_reason?}]`); the older per-index
  `gen_ai.prompt.N.{role,content,tool_call_id,tool_calls.M.{id,name,arguments}}` /
  `gen_ai.completion.N.{...,finish_reason}` (OpenLLMetry); OpenInference
  `llm.input_messages.N.message.{role,content,contents.K.message_content.{type,text},
  tool_call_id,name,tool_calls.M.tool_call.{id,function.name,function.arguments}}` and
  `llm.output_messages.N.message.*`.
- The message graph: each model call's input is the whole context it saw. Messages are stored
  once: walking a call's input from its agent's anchor, a message equal (role, text, tool call
  id, tool calls) to an existing child of the current node is that child; otherwise a new node.
  A linear agent loop is one branch. A subagent (an agent span under another agent span) starts
  its conversation under the node its parent agent had reached when it started: a branch.
  A model call that recorded no input continues its agent's conversation.
- Tool spans (`gen_ai.tool.call.id`, `gen_ai.tool.name`, `gen_ai.tool.call.result`; OpenInference
  `tool_call.id`, `tool.name`, `output.value`) add the result after the calling message when no
  input already recorded it (the same rule of equal messages decides).
- Calls: model (`gen_ai.response.model` / `gen_ai.request.model` / `llm.model_name`), sampling
  (`gen_ai.request.*`, `llm.invocation_parameters`), finish reason
  (`gen_ai.response.finish_reasons[0]`, the output message's `finish_reason`), usage
  (`gen_ai.usage.*`, `llm.token_count.*`), span start/end, span status error.
- RL fields: `rollscope.rollout_id`, `rollscope.run`, `rollscope.step`, `rollscope.group`,
  `rollscope.group.index`, `rollscope.group.size`, `rollscope.attempt`, `rollscope.reward`,
  `rollscope.rewards` (JSON `{name: {score, weight}}`), `rollscope.ending`,
  `rollscope.ending.detail`, `rollscope.ending.message`, `rollscope.task` (JSON), on any span
  (the root's win). Without them: rollout id = trace id, run = `service.name`, reward from
  `gen_ai.evaluation.result` events, ending from the root status (error) or the last model
  call's finish reason (`stop` → submitted, `length` → length_cut), else unknown.

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
from collections.abc import Iterable
from typing import Any

from ingest.formats._harness import arguments as raw_arguments
from ingest.formats._harness import finish_reason
from ingest.otel import STATUS_ERROR, SpanRecord
from ingest.schema import (
    Call,
    Ending,
    EndingInfo,
    Error,
    GroupRef,
    Message,
    Node,
    Reward,
    Rollout,
    RunRef,
    Span,
    Task,
    ToolCall,
    Usage,
)
from ingest.jsonio import dumps

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

def _json(v: Any) -> Any:
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


def _text(v: Any) -> str | None:
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False, sort_keys=True)


def _genai_messages(items: Any) -> list[tuple[Message, str | None]]:
    return [_genai_message(m) for m in _genai_items(items)]


def _genai_items(items: Any) -> list[dict]:
    return [m for m in items if isinstance(m, dict)] if isinstance(items, list) else []


def _genai_message(m: dict) -> tuple[Message, str | None]:
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
                                      arguments=raw if isinstance(raw, str) else raw_arguments(p.get("arguments")),
                                      extra={"ends_rollout": True} if p.get(ENDS_ROLLOUT) else {}))
            elif t == "tool_call_response":
                tool_call_id = p.get("id")
                content = _text(p.get("response", p.get("result")))
                role = "tool"
            elif isinstance(p, dict):
                other.append(p)
        if content is None:
            content = "\n".join(texts) if texts and not other else ([{"type": "text", "text": x} for x in texts] + other
                                                                    if other else None)
        extra = {"source_role": m["role"]} if role != m.get("role") and m.get("role") not in ("tool",) and role != "tool" else {}
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
                                      arguments=raw_arguments(tc.get("tool_call.function.arguments"))))
            else:
                calls.append(ToolCall(id=tc.get("id"), name=str(tc.get("name") or ""), arguments=raw_arguments(tc.get("arguments"))))
        out.append((Message(role=role, content=_text(content), tool_calls=calls or None,
                            tool_call_id=d.get("tool_call_id"), name=d.get("name")), d.get("finish_reason")))
    return out


def genai_items(s: SpanRecord) -> tuple[list[dict], list[dict]] | None:
    """(input items, output items) of a span in the JSON-messages form (system instructions as a
    first system item), or None when it uses another form."""
    a = s.attributes
    if not ("gen_ai.input.messages" in a or "gen_ai.output.messages" in a or "gen_ai.system_instructions" in a):
        return None
    ins: list[dict] = []
    sys = _json(a.get("gen_ai.system_instructions"))
    if isinstance(sys, list) and sys:
        text = "\n".join(str(p.get("content", "")) for p in sys if isinstance(p, dict))
        ins.append({"role": "system", "parts": [{"type": "text", "content": text}]})
    return ins + _genai_items(_json(a.get("gen_ai.input.messages"))), _genai_items(_json(a.get("gen_ai.output.messages")))


def span_messages(s: SpanRecord) -> tuple[list[Message], list[tuple[Message, str | None]]]:
    """(input messages, [(output message, finish reason)]) of a model span, newest convention first."""
    a = s.attributes
    inputs: list[Message] = []
    if "gen_ai.input.messages" in a or "gen_ai.output.messages" in a or "gen_ai.system_instructions" in a:
        sys = _json(a.get("gen_ai.system_instructions"))
        if isinstance(sys, list) and sys:
            text = "\n".join(str(p.get("content", "")) for p in sys if isinstance(p, dict))
            inputs.append(Message(role="system", content=text))
        inputs += [m for m, _ in _genai_messages(_json(a.get("gen_ai.input.messages")))]
        return inputs, _genai_messages(_json(a.get("gen_ai.output.messages")))
    if any(k.startswith("gen_ai.prompt.") or k.startswith("gen_ai.completion.") for k in a):
        return ([m for m, _ in _flat_messages(a, "gen_ai.prompt.", False)],
                _flat_messages(a, "gen_ai.completion.", False))
    return ([m for m, _ in _flat_messages(a, "llm.input_messages.", True)],
            _flat_messages(a, "llm.output_messages.", True))


# --- the message graph ---------------------------------------------------------------------

def message_key(m: Message, parent: int | None) -> tuple:
    """Identity of a message under a parent: role, text, reasoning, tool call id and calls."""
    content = m.content if isinstance(m.content, str) or m.content is None else \
        json.dumps(m.content, sort_keys=True, default=str)
    return (parent, m.role, content, m.reasoning_content, m.tool_call_id,
            tuple((c.id, c.name, c.arguments) for c in m.tool_calls or ()))


class _Graph:
    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.index: dict[tuple, int] = {}

    def place(self, m: Message, parent: int | None, timestamp: float | None) -> int:
        key = message_key(m, parent)
        if key in self.index:
            return self.index[key]
        idx = len(self.nodes)
        self.nodes.append(Node(parent=parent, message=m, sampled=m.role == "assistant", timestamp=timestamp))
        self.index[key] = idx
        return idx


def _usage(a: dict) -> Usage | None:
    def num(*keys):
        for k in keys:
            v = a.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return v
        return None
    u = Usage(input_tokens=num("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt"),
              output_tokens=num("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion"),
              cache_read_input_tokens=num("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens",
                                          "llm.token_count.prompt_details.cache_read"),
              reasoning_output_tokens=num("gen_ai.usage.reasoning.output_tokens", "llm.token_count.completion_details.reasoning"),
              cost=num("rollscope.usage.cost", "llm.cost.total"))
    return u if any(x is not None for x in (u.input_tokens, u.output_tokens, u.cache_read_input_tokens,
                                            u.reasoning_output_tokens, u.cost)) else None


def _sampling(a: dict) -> dict | None:
    out = {k: a[f"gen_ai.request.{k}"] for k in SAMPLING if f"gen_ai.request.{k}" in a}
    params = _json(a.get("llm.invocation_parameters"))
    if isinstance(params, dict):
        out.update(params)
    return out or None


def _rl(spans: list[SpanRecord], root: SpanRecord | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in sorted(spans, key=lambda s: s is root):  # the root's attributes are applied last: they win
        out.update({k: v for k, v in s.attributes.items() if k.startswith("rollscope.")})
    return out


def rollout_from_spans(spans: list[SpanRecord], *, run_id: str | None = None,
                       source: dict | None = None) -> Rollout:
    """The rollout of one trace's spans (see the module docstring). Raises ValueError (from the
    native schema) when the result is not a valid rollout."""
    if not spans:
        raise ValueError("no spans")
    by_id = {s.span_id: s for s in spans}
    # Time order; a span without a start time keeps its place after the span before it.
    keyed, last = [], 0
    for pos, s in enumerate(spans):
        last = s.start_ns if s.start_ns is not None else last
        keyed.append((last, pos, s))
    order = [s for _, _, s in sorted(keyed, key=lambda x: (x[0], x[1]))]
    roots = [s for s in order if not s.parent_span_id or s.parent_span_id not in by_id]
    root = next((s for s in roots if is_agent_span(s)), roots[0] if roots else order[0])
    if ROLLOUT in root.attributes:
        exact = _written_by_rollscope(order, root, run_id, source)
        if exact is not None:
            return exact

    def agent_of(s: SpanRecord) -> SpanRecord | None:
        cur, seen = by_id.get(s.parent_span_id or ""), set()
        while cur is not None and cur.span_id not in seen:
            seen.add(cur.span_id)
            if is_agent_span(cur):
                return cur
            cur = by_id.get(cur.parent_span_id or "")
        return None

    g = _Graph()
    anchor: dict[str | None, int | None] = {}  # agent span id → node its conversation hangs under
    cursor: dict[str | None, int | None] = {}  # agent span id → latest node of its conversation
    calls: list[Call] = []
    call_tokens: dict[int, str] = {}  # node → span id of its model call
    last_context: dict[str | None, tuple[list[dict], list[int]]] = {}  # agent → (items, their nodes)
    output_node: dict[str, int] = {}  # model span id → the node it output
    order = _after_first(order)

    def agent_key(s: SpanRecord) -> str | None:
        a = agent_of(s)
        return a.span_id if a is not None else None

    def start_agent(key: str | None, at: SpanRecord) -> None:
        if key in anchor:
            return
        parent_agent = agent_of(by_id[key]) if key is not None else None
        pk = parent_agent.span_id if parent_agent is not None else None
        if key is not None and parent_agent is not None:
            start_agent(pk, at)
            anchor[key] = cursor.get(pk)
        else:
            anchor[key] = None
        cursor[key] = anchor[key]

    for s in order:
        if is_model_span(s):
            key = agent_key(s)
            start_agent(key, s)
            items = genai_items(s)
            raw_finish = None
            if items is not None:
                # A model call's input repeats the context the previous call of this agent saw:
                # the equal leading items are the nodes already placed (checked by value).
                ins, outs = items
                after = _elided_after(s)
                if after is not None:
                    # Rollscope's own export: the input continues after another span's output.
                    seen_items, seen_nodes, k = [], [], 0
                    parent = output_node.get(after, cursor[key])
                else:
                    seen_items, seen_nodes = last_context.get(key, ([], []))
                    k = 0
                    while k < len(ins) and k < len(seen_items) and ins[k] == seen_items[k]:
                        k += 1
                    parent = (seen_nodes[k - 1] if k else anchor[key]) if ins else cursor[key]
                path_nodes = list(seen_nodes[:k])
                for item in ins[k:]:
                    parent = g.place(_genai_message(item)[0], parent, None)
                    path_nodes.append(parent)
                last = parent
                for item in outs:
                    m, fr = _genai_message(item)
                    last = g.place(m, last, s.end)
                    path_nodes.append(last)
                    raw_finish = raw_finish or fr
                if ins and after is None:
                    last_context[key] = (ins + outs, path_nodes)
                outputs = outs
            else:
                inputs, outputs = span_messages(s)
                parent = anchor[key] if inputs else cursor[key]
                for m in inputs:
                    parent = g.place(m, parent, None)
                last = parent
                for m, fr in outputs:
                    last = g.place(m, last, s.end)
                    raw_finish = raw_finish or fr
            reasons = s.attributes.get("gen_ai.response.finish_reasons")
            if isinstance(reasons, list) and reasons:
                raw_finish = str(reasons[0])
            elif isinstance(reasons, str):
                raw_finish = reasons
            raw_finish = raw_finish or s.attributes.get("llm.finish_reason")
            cursor[key] = last
            node = last if outputs else None
            if node is not None:
                output_node[s.span_id] = node
            a = s.attributes
            calls.append(Call(
                node=node, model=a.get("gen_ai.response.model") or a.get("gen_ai.request.model") or a.get("llm.model_name"),
                sampling=_sampling(a), finish_reason=finish_reason(raw_finish), finish_reason_raw=raw_finish,
                usage=_usage(a), time=Span(start=s.start, end=s.end),
                error=Error(type=str(a.get("error.type") or "error"), message=s.status_message)
                if s.status_code == STATUS_ERROR else None,
                extra={"span_id": s.span_id, "start_ns": s.start_ns, "end_ns": s.end_ns}))
            if node is not None:
                call_tokens[node] = s.span_id
        elif is_tool_span(s):
            key = agent_key(s)
            start_agent(key, s)
            a = s.attributes
            m = _tool_message(a, s.name)
            cid, name = m.tool_call_id, m.name
            callers = _callers(g, cid, name)
            caller = callers[-1] if callers else None
            # An input may already hold this result, after the message that made this call or,
            # when an agent reuses call ids (`call_0` each turn), after an earlier one.
            recorded = False
            for start in reversed(callers or [cursor[key]]):
                recorded, end = _after_results(g, m, start)
                if recorded:
                    break
                if start == caller or not callers:
                    parent = end
            if recorded:
                continue
            idx = g.place(m, parent, s.end)
            if cursor[key] == parent or caller is None:
                cursor[key] = idx

    rl = _rl(spans, root)
    reward, rewards = rl.get("rollscope.reward"), {}
    raw_rewards = _json(rl.get("rollscope.rewards"))
    if isinstance(raw_rewards, dict):
        for k, v in raw_rewards.items():
            rewards[k] = None if v is None else Reward(score=v.get("score"), weight=v.get("weight", 1.0),
                                                       extra=v.get("extra") or {}) \
                if isinstance(v, dict) else Reward(score=float(v))
    if reward is None and not rewards:
        for s in order:
            for e in s.events:
                ea = e.get("attributes") or {}
                if e.get("name") == "gen_ai.evaluation.result" and isinstance(ea.get("gen_ai.evaluation.score.value"), (int, float)):
                    rewards[str(ea.get("gen_ai.evaluation.name") or "evaluation")] = Reward(
                        score=float(ea["gen_ai.evaluation.score.value"]),
                        extra={"label": ea["gen_ai.evaluation.score.label"]} if "gen_ai.evaluation.score.label" in ea else {})
    ending = _ending(rl, root, calls)
    group = None
    if rl.get("rollscope.group") is not None:
        group = GroupRef(id=str(rl["rollscope.group"]), index=rl.get("rollscope.group.index"),
                         size=rl.get("rollscope.group.size"))
    task = _json(rl.get("rollscope.task"))
    starts = [s.start_ns for s in spans if s.start_ns]
    ends = [s.end_ns for s in spans if s.end_ns]
    timing = {"start": min(starts) / 1e9, "end": max(ends) / 1e9} if starts and ends else {}
    errors = [Error(type=str(root.attributes.get("error.type") or "span_error"), message=root.status_message)] \
        if root.status_code == STATUS_ERROR else []
    run = run_id or rl.get("rollscope.run") or root.resource.get("service.name") or "otel"
    return Rollout(
        id=str(rl.get("rollscope.rollout_id") or root.trace_id), run=RunRef(id=str(run)),
        step=rl.get("rollscope.step"), group=group, attempt=rl.get("rollscope.attempt") or 0,
        task=Task.model_validate(task) if isinstance(task, dict) else None,
        nodes=g.nodes, calls=calls, rewards=rewards, reward=float(reward) if reward is not None else None,
        ending=ending, errors=errors, timing=timing,
        extra={"otel": {"trace_id": root.trace_id, "root_span_id": root.span_id, "root_name": root.name,
                        "start_ns": min(starts) if starts else None, "end_ns": max(ends) if ends else None,
                        **({"agent": root.attributes["gen_ai.agent.name"]} if "gen_ai.agent.name" in root.attributes else {})}},
        source=source or {"format": "otlp"})


def _elided_after(s: SpanRecord) -> str | None:
    """The span id after whose output this span's input continues (`rollscope.input.after`,
    written with `rollscope.input.elided` > 0), or None when the input is the whole context."""
    n, after = s.attributes.get(ELIDED), s.attributes.get(AFTER)
    ok = isinstance(n, int) and not isinstance(n, bool) and n > 0 and isinstance(after, str)
    return after if ok else None


def _after_first(order: list[SpanRecord]) -> list[SpanRecord]:
    """`order` with each span whose input continues another's (`rollscope.input.after`) moved
    after that span, so the node it continues from is placed first whatever the span times say."""
    by_id = {s.span_id: s for s in order}
    out: list[SpanRecord] = []
    done: set[int] = set()  # by identity: a file may repeat a span id
    for s in order:
        chain: list[SpanRecord] = []
        cur: SpanRecord | None = s
        while cur is not None and id(cur) not in done:
            done.add(id(cur))  # also ends a loop of `after` links
            chain.append(cur)
            after = _elided_after(cur)
            cur = by_id.get(after) if after is not None else None
        out += reversed(chain)
    return out


def _tool_message(a: dict, span_name: str = "") -> Message:
    """The tool result an `execute_tool` / TOOL span carries."""
    cid = a.get("gen_ai.tool.call.id") or a.get("tool_call.id")
    name = a.get("gen_ai.tool.name") or a.get("tool.name") or span_name.removeprefix("execute_tool").strip() or None
    result = a.get("gen_ai.tool.call.result", a.get("output.value"))
    return Message(role="tool", content=_text(result), tool_call_id=cid, name=name)


def _written_by_rollscope(spans: list[SpanRecord], root: SpanRecord, run_id: str | None,
                          source: dict | None) -> Rollout | None:
    """The rollout `spans_from_rollout` wrote, rebuilt exactly from its `rollscope.*`
    attributes (node indices, node fields, recorded calls, rollout fields), with the messages
    from the GenAI items; None when a piece is missing (spans dropped or edited on the way),
    and the spans are then read like any other trace."""
    fields, node_fields = _json(root.attributes.get(ROLLOUT)), _json(root.attributes.get(NODES))
    if not isinstance(fields, dict) or not isinstance(node_fields, list):
        return None
    messages: dict[int, Any] = {}
    calls: list[tuple[int, dict]] = []

    def take(idx: Any, build) -> None:
        if isinstance(idx, int) and not isinstance(idx, bool) and idx not in messages:
            messages[idx] = build()

    for s in spans:
        a = s.attributes
        if is_tool_span(s):
            exact = _json(a.get(MESSAGE))
            take(a.get(NODE), lambda: Message.model_validate(exact) if isinstance(exact, dict) else _tool_message(a, s.name))
            continue
        if not is_model_span(s):
            continue
        call = _json(a.get(CALL)) if isinstance(a.get(CALL), str) else a.get(CALL)
        if isinstance(call, dict):
            calls.append((call.pop("index", len(calls)), call))
        elif call is not False:
            return None  # a model span Rollscope did not write
        items = genai_items(s)
        for item in (items[0] + items[1]) if items else []:
            exact = item.get(MESSAGE)
            take(item.get(NODE), lambda: Message.model_validate(exact) if isinstance(exact, dict) else _genai_message(item)[0])
    if set(messages) != set(range(len(node_fields))):
        return None
    body = dict(fields)
    body["nodes"] = [{**(f if isinstance(f, dict) else {}), "message": messages[i].to_json_dict()}
                     for i, f in enumerate(node_fields)]
    body["calls"] = [c for _, c in sorted(calls, key=lambda x: x[0])]
    if run_id:
        body["run"] = {**(body.get("run") or {}), "id": run_id}
    body["source"] = source or {"format": "otlp"}
    return Rollout.model_validate(body)


def _callers(g: _Graph, cid: Any, name: Any) -> list[int]:
    """The assistant nodes whose tool call this tool span may have executed, oldest first: by
    call id, else by tool name (the latest is the one taken)."""
    return [i for i, n in enumerate(g.nodes)
            if any((cid is not None and c.id == cid) or (cid is None and c.name == name) for c in n.message.tool_calls or [])]


def _after_results(g: _Graph, m: Message, start: int | None) -> tuple[bool, int | None]:
    """(already recorded, where result `m` goes after `start`: past the tool results already
    recorded there). Recorded when one of them is `m` (an input already holds it)."""
    parent = start
    while parent is not None:
        if message_key(m, parent) in g.index:
            return True, parent
        nxt = next((i for i in range(parent + 1, len(g.nodes)) if g.nodes[i].parent == parent
                    and g.nodes[i].message.role == "tool"), None)
        if nxt is None:
            break
        parent = nxt
    return False, parent


def _ending(rl: dict, root: SpanRecord, calls: list[Call]) -> EndingInfo:
    if rl.get("rollscope.ending"):
        try:
            typ = Ending(str(rl["rollscope.ending"]))
        except ValueError:
            typ = Ending.unknown
        return EndingInfo(type=typ, detail=rl.get("rollscope.ending.detail") or str(rl["rollscope.ending"]),
                          message=rl.get("rollscope.ending.message"))
    if root.status_code == STATUS_ERROR:
        return EndingInfo(type=Ending.error, detail=str(root.attributes.get("error.type") or "status=ERROR"),
                          message=root.status_message or None)
    last = next((c for c in reversed(calls) if c.finish_reason_raw), None)
    if last is not None:
        if last.finish_reason == "stop":
            return EndingInfo(type=Ending.submitted, detail=f"finish_reason={last.finish_reason_raw}")
        if last.finish_reason == "length":
            return EndingInfo(type=Ending.length_cut, detail=f"finish_reason={last.finish_reason_raw}")
        if last.finish_reason in ("error", "content_filter"):
            return EndingInfo(type=Ending.error, detail=f"finish_reason={last.finish_reason_raw}")
    return EndingInfo(type=Ending.unknown, detail="no ending recorded")


# --- writing -------------------------------------------------------------------------------

def _id(seed: str, n: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[: n * 2]


def _message_json(m: Message, finish: str | None = None) -> dict:
    parts: list[dict] = []
    if m.reasoning_content:
        parts.append({"type": "reasoning", "content": m.reasoning_content})
    if m.role == "tool":
        parts.append({"type": "tool_call_response", "id": m.tool_call_id, "response": m.text() if isinstance(m.content, str) or m.content is None else m.content})
    elif isinstance(m.content, str):
        parts.append({"type": "text", "content": m.content})
    elif isinstance(m.content, list):
        parts += [{"type": "text", "content": p.get("text", "")} if p.get("type") == "text" else p for p in m.content]
    for c in m.tool_calls or []:
        args = _json(c.arguments) if c.arguments else None
        part = {"type": "tool_call", "id": c.id, "name": c.name,
                "arguments": c.arguments if args is None and c.arguments else args}
        if args is not None and raw_arguments(args) != c.arguments:
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
    if _genai_message(item)[0].to_json_dict() != m.to_json_dict():
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
            "score": v.score, "weight": v.weight, **({"extra": v.extra} if v.extra else {})} for k, v in r.rewards.items()},
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
        if _tool_message(a).to_json_dict() != n.message.to_json_dict():
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
