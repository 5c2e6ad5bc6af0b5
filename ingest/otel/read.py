"""One trace's spans → one rollout (`rollout_from_spans`), by the conventions of
`ingest/otel/semconv.py`.

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
- Tools offered: `gen_ai.tool.definitions` (JSON list) of the first model call that records it.
- RL fields: `rollscope.rollout_id`, `rollscope.run`, `rollscope.step`, `rollscope.group`,
  `rollscope.group.index`, `rollscope.group.size`, `rollscope.attempt`, `rollscope.reward`,
  `rollscope.rewards` (JSON `{name: {score, weight}}`), `rollscope.ending`,
  `rollscope.ending.detail`, `rollscope.ending.message`, `rollscope.task` (JSON), on any span
  (the root's win). Without them: rollout id = trace id, run = `service.name`, reward from
  `gen_ai.evaluation.result` events, ending from the root status (error) or the last model
  call's finish reason (`stop` → submitted, `length` → length_cut), else unknown.
"""
from __future__ import annotations

import json
from typing import Any

from ingest.fields import FieldError
from ingest.formats._openai import finish_reason
from ingest.formats.base import record_error
from ingest.otel.semconv import (
    AFTER,
    CALL,
    ELIDED,
    MESSAGE,
    NODE,
    NODES,
    ROLLOUT,
    SAMPLING,
    genai_items,
    genai_message,
    is_agent_span,
    is_model_span,
    is_tool_span,
    json_value,
    span_messages,
    tool_message,
)
from ingest.otel.wire import STATUS_ERROR, SpanRecord
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
    Usage,
)

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
              output_tokens=num("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
                                "llm.token_count.completion"),
              cache_read_input_tokens=num("gen_ai.usage.cache_read.input_tokens",
                                          "gen_ai.usage.cache_read_input_tokens",
                                          "llm.token_count.prompt_details.cache_read"),
              reasoning_output_tokens=num("gen_ai.usage.reasoning.output_tokens",
                                          "llm.token_count.completion_details.reasoning"),
              cost=num("rollscope.usage.cost", "llm.cost.total"))
    return u if any(x is not None for x in (u.input_tokens, u.output_tokens, u.cache_read_input_tokens,
                                            u.reasoning_output_tokens, u.cost)) else None


def _sampling(a: dict) -> dict | None:
    out = {k: a[f"gen_ai.request.{k}"] for k in SAMPLING if f"gen_ai.request.{k}" in a}
    params = json_value(a.get("llm.invocation_parameters"))
    if isinstance(params, dict):
        out.update(params)
    return out or None


def _rl(spans: list[SpanRecord], root: SpanRecord | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in sorted(spans, key=lambda s: s is root):  # the root's attributes are applied last: they win
        out.update({k: v for k, v in s.attributes.items() if k.startswith("rollscope.")})
    return out


def _rewards_value(v: Any) -> Any:
    """`rollscope.rewards` as a value: a JSON object (as text) or None. Raises FieldError naming
    the attribute for text that is not JSON: a reward left out silently would store the rollout
    as unrewarded."""
    if not isinstance(v, str):
        return v
    try:
        return json.loads(v)
    except ValueError as exc:
        raise FieldError('attributes["rollscope.rewards"]', f"not valid JSON ({exc}): {v[:80]!r}") from None


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
                    parent = g.place(genai_message(item)[0], parent, None)
                    path_nodes.append(parent)
                last = parent
                for item in outs:
                    m, fr = genai_message(item)
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
                node=node,
                model=a.get("gen_ai.response.model") or a.get("gen_ai.request.model") or a.get("llm.model_name"),
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
            m = tool_message(a, s.name)
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
            failed = _tool_span_error(s)
            if recorded:
                if failed:  # the result an input already holds failed: say so on it
                    g.nodes[g.index[message_key(m, end)]].message.extra.setdefault("error", failed)
                continue
            if failed:
                m.extra["error"] = failed
            idx = g.place(m, parent, s.end)
            if cursor[key] == parent or caller is None:
                cursor[key] = idx

    rl = _rl(spans, root)
    reward, rewards = rl.get("rollscope.reward"), {}
    raw_rewards = _rewards_value(rl.get("rollscope.rewards"))
    if isinstance(raw_rewards, dict):
        for k, v in raw_rewards.items():
            rewards[k] = None if v is None else Reward(score=v.get("score"), weight=v.get("weight", 1.0),
                                                       extra=v.get("extra") or {}) \
                if isinstance(v, dict) else Reward(score=float(v))
    if reward is None and not rewards:
        for s in order:
            for e in s.events:
                ea = e.get("attributes") or {}
                if (e.get("name") == "gen_ai.evaluation.result"
                        and isinstance(ea.get("gen_ai.evaluation.score.value"), (int, float))):
                    rewards[str(ea.get("gen_ai.evaluation.name") or "evaluation")] = Reward(
                        score=float(ea["gen_ai.evaluation.score.value"]),
                        extra={"label": ea["gen_ai.evaluation.score.label"]}
                        if "gen_ai.evaluation.score.label" in ea else {})
    ending = _ending(rl, root, calls)
    group = None
    if rl.get("rollscope.group") is not None:
        group = GroupRef(id=str(rl["rollscope.group"]), index=rl.get("rollscope.group.index"),
                         size=rl.get("rollscope.group.size"))
    task = json_value(rl.get("rollscope.task"))
    tools = _tool_definitions(order)
    starts = [s.start_ns for s in spans if s.start_ns]
    ends = [s.end_ns for s in spans if s.end_ns]
    timing = {"start": min(starts) / 1e9, "end": max(ends) / 1e9} if starts and ends else {}
    errors = [Error(type=str(root.attributes.get("error.type") or "span_error"), message=root.status_message)] \
        if root.status_code == STATUS_ERROR else []
    run = run_id or rl.get("rollscope.run") or root.resource.get("service.name") or "otel"
    run_from = ('attributes["rollscope.run"]' if not run_id and rl.get("rollscope.run")
                else 'resource.attributes["service.name"]' if not run_id and root.resource.get("service.name")
                else None)
    try:
        run_ref = RunRef(id=str(run))
    except ValueError as exc:  # pydantic's ValidationError: named by the attribute, not by `id`
        if run_from is None:
            raise
        raise FieldError(run_from, record_error("", None, None, exc).message) from None
    return Rollout(
        id=str(rl.get("rollscope.rollout_id") or root.trace_id), run=run_ref,
        step=rl.get("rollscope.step"), group=group, attempt=rl.get("rollscope.attempt") or 0,
        task=Task.model_validate(task) if isinstance(task, dict) else None,
        nodes=g.nodes, calls=calls, rewards=rewards, tools=tools,
        reward=float(reward) if reward is not None else None,
        ending=ending, errors=errors, timing=timing,
        extra={"otel": {"trace_id": root.trace_id, "root_span_id": root.span_id, "root_name": root.name,
                        "start_ns": min(starts) if starts else None, "end_ns": max(ends) if ends else None,
                        **({"agent": root.attributes["gen_ai.agent.name"]}
                           if "gen_ai.agent.name" in root.attributes else {})}},
        source=source or {"format": "otlp"})


def _tool_definitions(spans: list[SpanRecord]) -> list[dict]:
    """The tools offered to the model: `gen_ai.tool.definitions` (a JSON list of OpenAI-style
    `{type, function: {name, description, parameters}}` or flat `{name, ...}` objects) of the first
    model span that records it; [] when none does."""
    for s in spans:
        if is_model_span(s):
            defs = json_value(s.attributes.get("gen_ai.tool.definitions"))
            if isinstance(defs, list) and defs:
                return [d for d in defs if isinstance(d, dict)]
    return []


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



def _written_by_rollscope(spans: list[SpanRecord], root: SpanRecord, run_id: str | None,
                          source: dict | None) -> Rollout | None:
    """The rollout `spans_from_rollout` wrote, rebuilt exactly from its `rollscope.*`
    attributes (node indices, node fields, recorded calls, rollout fields), with the messages
    from the GenAI items; None when a piece is missing (spans dropped or edited on the way),
    and the spans are then read like any other trace."""
    fields, node_fields = json_value(root.attributes.get(ROLLOUT)), json_value(root.attributes.get(NODES))
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
            exact = json_value(a.get(MESSAGE))
            take(a.get(NODE),
                 lambda: Message.model_validate(exact) if isinstance(exact, dict) else tool_message(a, s.name))
            continue
        if not is_model_span(s):
            continue
        call = json_value(a.get(CALL)) if isinstance(a.get(CALL), str) else a.get(CALL)
        if isinstance(call, dict):
            calls.append((call.pop("index", len(calls)), call))
        elif call is not False:
            return None  # a model span Rollscope did not write
        items = genai_items(s)
        for item in (items[0] + items[1]) if items else []:
            exact = item.get(MESSAGE)
            take(item.get(NODE),
                 lambda: Message.model_validate(exact) if isinstance(exact, dict) else genai_message(item)[0])
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
            if any((cid is not None and c.id == cid) or (cid is None and c.name == name)
                   for c in n.message.tool_calls or [])]


def _tool_span_error(s: SpanRecord) -> dict | None:
    """A tool span that failed (status ERROR; GenAI `error.type` names the kind): the tool result's
    `extra.error` `{type, message}` (ingest.metrics.tool_failure counts it), else None. The
    result's own text may not say so (a Python exception's text: `ZeroDivisionError: ...`)."""
    if s.status_code != STATUS_ERROR:
        return None
    kind = s.attributes.get("error.type")
    return {"type": str(kind or "error"), "message": s.status_message or (str(kind) if kind else "tool span failed")}


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
