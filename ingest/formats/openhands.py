"""OpenHands event streams (All-Hands-AI/OpenHands): a JSON list of serialized events
(`openhands/events/serialization/event.py` `event_to_dict`), or an evaluation record
`{instance_id, history: [events], error?, metrics?, test_result?}` holding one.

An event is an action (`action: message | run | edit | finish | system | ...`, with `args`) or an
observation (`observation: run | edit | error | agent_state_changed | ...`, with `content`,
`extras`), with `id`, `timestamp` (naive ISO), `source` (`user`, `agent`, `environment`). An
observation points to the action that caused it by `cause` (the action's event id). In
function-calling mode an action carries `tool_call_metadata {function_name, tool_call_id,
model_response, total_calls_in_response}`; `model_response` is the model's full chat completion.

Mapping (docs/formats.md, "OpenHands"):
- `system` and user `message` actions → system / user nodes; an agent `message` → assistant. The
  `system` action's `args.tools` (OpenAI tool definitions) are the rollout's `tools`.
- Agent actions with `tool_call_metadata` → an assistant node whose text is the model response's
  content (else `args.thought`) and whose tool calls come from the response (raw argument
  string) and reasoning (litellm's `message.reasoning_content`); actions from one model response
  (same `model_response.id`) share one node. An agent
  action without metadata (older CodeAct) → assistant node with a call parsed from its text
  (`args.command` / `args.code`). The response's usage, model and finish reason make the call;
  the full response is kept in `call.extra.model_response`.
- An observation with a `cause` → tool result of that action's call (`tool_call_id` from its
  metadata, else the call the cause names); a cause naming no known action is kept with
  `extra.cause_unpaired`. An observation without a cause (an error the runtime reports) → a
  user message with `extra.source_role = "environment"`. `agent_state_changed`, `null`,
  `recall` and `condensation_request` events are not messages; they are counted in
  `extra.skipped_events`.
- The condenser (`openhands/events/action/agent.py` `CondensationAction`, observation `condense`):
  a `condensation` action → a user node holding its `summary` (`source_role = "condensation"`,
  node `extra.kind = "compaction"`, `forgotten_events`, `summary_offset`), never a model call; a
  `condense` observation → an environment node with `extra.kind = "compaction"`.
- Ending: a `finish` action → submitted (its `tool_call` gets `extra.ends_rollout`, since no
  observation follows it); a final `agent_state_changed` to `error` (or an `error` field on an
  evaluation record) → error; otherwise unknown.
- Timestamps are naive: taken as UTC by the project rule, `extra.timestamps_assumed_utc`.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ingest.errors import RecordError
from ingest.formats._harness import Chain, action_call, openai_tool_call, read_documents, to_epoch, usage_from
from ingest.formats._openai import finish_reason
from ingest.formats.base import ReadContext
from ingest.schema import Call, Ending, EndingInfo, Error, Message, Rollout, RunRef, ToolCall
from ingest.source import Source

EXPECTS = "OpenHands event list [{id, source, action | observation, ...}] or {history: [events]}"
NAME = "openhands"
SKIPPED = frozenset({"agent_state_changed", "null", "recall", "change_agent_state", "condensation_request"})
# The condenser's events (`ActionType.CONDENSATION`, `ObservationType.CONDENSE`): later requests see
# the summary instead of the forgotten events, so the node is a compaction in the graph.
CONDENSATION_ACTION, CONDENSATION_OBSERVATION = "condensation", "condense"


def _events(value: Any) -> list | None:
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and isinstance(value.get("history"), list) and "trajectory" not in value:
        return value["history"]
    return None


def _is_event(e: Any) -> bool:
    return isinstance(e, dict) and ("action" in e or "observation" in e) and "source" in e and "id" in e


def sniff(source: Source) -> bool:
    if source.kind not in ("json", "jsonl"):
        return False
    events = _events(source.first)
    return bool(events) and all(_is_event(e) for e in events[:20])


def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    return read_documents(source, ctx, recognise=_events, what="an OpenHands event list", read_one=_read_one)


def _read_one(doc: Any, source: Source, ctx: ReadContext, line: int | None) -> Iterator[Rollout | RecordError]:
    events = _events(doc) or []
    wrapper = doc if isinstance(doc, dict) else {}
    chain = Chain()
    call_of_action: dict[Any, tuple[int, int]] = {}  # action event id → (node, position)
    node_of_response: dict[str, int] = {}
    skipped: dict[str, int] = {}
    assumed = False
    final_state: dict | None = None
    finished = False
    tools: list[dict] = []  # the tools offered, from the `system` action
    for k, e in enumerate(events):
        if not _is_event(e):
            yield RecordError(source.name, line, f"[{k}]" if line is None else f"history[{k}]",
                              "expected an event with id, source and action or observation")
            return
        ts, a = to_epoch(e.get("timestamp"))
        assumed |= a
        meta = e.get("tool_call_metadata") if isinstance(e.get("tool_call_metadata"), dict) else None
        base_extra = {"event_id": e.get("id"), "source": e.get("source")}
        if "action" in e:
            kind = e["action"]
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            if kind in SKIPPED:
                skipped[kind] = skipped.get(kind, 0) + 1
                continue
            if kind == "finish":
                finished = True
            if kind == CONDENSATION_ACTION:  # the agent's condenser, not a model call or a tool call
                message, node_extra = _condensation(args, e, base_extra)
                chain.add(message, timestamp=ts, extra=node_extra)
                continue
            if kind == "system":
                if isinstance(args.get("tools"), list) and not tools:
                    tools = [t for t in args["tools"] if isinstance(t, dict)]
                chain.add(Message(role="system", content=args.get("content") or e.get("message"),
                                  extra={**base_extra, **({"tools": args["tools"]} if args.get("tools") else {})}),
                          timestamp=ts)
                continue
            if e.get("source") != "agent":
                chain.add(Message(role="user", content=args.get("content", e.get("message")),
                                  extra={**base_extra, "action": kind}), timestamp=ts)
                continue
            if meta is None:
                if kind == "message":
                    chain.add(Message(role="assistant", content=args.get("content", e.get("message")),
                                      extra={**base_extra, "action": kind}), timestamp=ts)
                    continue
                command = args.get("command") or args.get("code")
                calls = [action_call(str(command), name=kind)] if command else None
                text = args.get("thought") or e.get("message")
                idx = chain.add(Message(role="assistant", content=text, tool_calls=calls,
                                        extra={**base_extra, "action": kind}), timestamp=ts)
                chain.calls.append(Call(node=idx))
                if calls:
                    call_of_action[e["id"]] = (idx, 0)
                    if kind == "finish":
                        calls[0].extra["ends_rollout"] = True
                continue
            response = meta.get("model_response") if isinstance(meta.get("model_response"), dict) else {}
            rid = response.get("id")
            if rid is not None and rid in node_of_response:
                idx = node_of_response[rid]
            else:
                idx = _response_node(chain, e, args, meta, response, ts, base_extra)
                if rid is not None:
                    node_of_response[rid] = idx
            tcid = meta.get("tool_call_id")
            calls = chain.nodes[idx].message.tool_calls or []
            pos = next((p for p, c in enumerate(calls) if c.id == tcid and p not in
                        {q for (n, q) in call_of_action.values() if n == idx}), None)
            if pos is None:  # the response did not list this call: keep what the action says
                calls.append(ToolCall(id=tcid, name=str(meta.get("function_name") or kind), arguments="",
                                      extra={"from_action": kind}))
                chain.nodes[idx].message.tool_calls = calls
                pos = len(calls) - 1
            call_of_action[e["id"]] = (idx, pos)
            if kind == "finish":
                calls[pos].extra["ends_rollout"] = True
            continue
        kind = e["observation"]
        if kind in SKIPPED:
            skipped[kind] = skipped.get(kind, 0) + 1
            if kind == "agent_state_changed":
                final_state = e.get("extras") if isinstance(e.get("extras"), dict) else {}
            continue
        content = e.get("content") if e.get("content") not in (None, "") else e.get("message")
        extra = {**base_extra, "observation": kind}
        if isinstance(e.get("extras"), dict):
            extra["extras"] = e["extras"]
        cause = e.get("cause")
        if cause is None:
            extra["source_role"] = "environment"
            chain.add(Message(role="user", content=content, extra=extra), timestamp=ts,
                      extra={"kind": "compaction"} if kind == CONDENSATION_OBSERVATION else None)
            continue
        tcid = meta.get("tool_call_id") if meta else None
        name = meta.get("function_name") if meta else None
        if cause in call_of_action:
            n, p = call_of_action[cause]
            call = chain.nodes[n].message.tool_calls[p]
            tcid = tcid or call.id
            name = name or call.name
        else:
            extra["cause_unpaired"] = cause
        extra["cause"] = cause
        chain.add(Message(role="tool", content=content, tool_call_id=tcid, name=name, extra=extra), timestamp=ts)

    state = (final_state or {}).get("agent_state")
    if wrapper.get("error"):
        ending = EndingInfo(type=Ending.error, detail="error", message=str(wrapper["error"]))
    elif finished:
        ending = EndingInfo(type=Ending.submitted, detail="finish")
    elif state == "error":
        ending = EndingInfo(type=Ending.error, detail="agent_state=error", message=(final_state or {}).get("reason"))
    else:
        ending = EndingInfo(type=Ending.unknown, detail=f"agent_state={state}" if state else "no finish action")
    errors = [Error(type="agent_error", message=ending.message or "")] if ending.type == Ending.error else []
    extra: dict[str, Any] = {}
    if skipped:
        extra["skipped_events"] = skipped
    if assumed:
        extra["timestamps_assumed_utc"] = True
    for key in ("instance", "metrics", "test_result", "instruction", "metadata"):
        if wrapper.get(key) is not None:
            extra[key] = wrapper[key]
    times = [n.timestamp for n in chain.nodes if n.timestamp is not None]
    timing = {"start": min(times), "end": max(times)} if times else {}
    rid = str(wrapper.get("instance_id") or ctx.source_key(source) + (f"#{line}" if line else ""))
    try:
        yield chain.finish(Rollout(id=rid, run=RunRef(id=ctx.run_for(source), type="eval"), nodes=chain.nodes,
                                   calls=chain.calls, tools=tools,
                      ending=ending, errors=errors, timing=timing, extra=extra,
                      source={"format": NAME, "file": source.name, "line": line}))
    except ValueError as exc:
        yield RecordError(source.name, line, None, str(exc))


def _response_node(chain: Chain, e: dict, args: dict, meta: dict, response: dict, ts: float | None,
                   base_extra: dict) -> int:
    """The assistant node (and its call) for one model response."""
    choice = (response.get("choices") or [{}])[0] if isinstance(response.get("choices"), list) else {}
    msg = (choice or {}).get("message") if isinstance((choice or {}).get("message"), dict) else {}
    text = (msg.get("content") if msg.get("content") not in (None, "")
            else (args.get("thought") or e.get("message") or None))
    calls = [openai_tool_call(tc) for tc in msg.get("tool_calls") or [] if isinstance(tc, dict)]
    reasoning = msg.get("reasoning_content")  # litellm's field, where the provider returned reasoning
    idx = chain.add(Message(role="assistant", content=text, tool_calls=calls or None,
                            reasoning_content=reasoning if isinstance(reasoning, str) and reasoning else None,
                            extra={**base_extra, "action": e.get("action")}), timestamp=ts)
    raw = (choice or {}).get("finish_reason")
    created, _ = to_epoch(response.get("created"))
    chain.calls.append(Call(node=idx, model=response.get("model"), finish_reason=finish_reason(raw),
                            finish_reason_raw=raw, usage=usage_from(response.get("usage")),
                            extra={"model_response": response, "response_created": created}))
    return idx


def _condensation(args: dict, e: dict, base_extra: dict) -> tuple[Message, dict]:
    """A `condensation` action (OpenHands `CondensationAction`: `forgotten_event_ids` or
    `forgotten_events_start_id`..`end_id`, and the `summary` that stands in for them) as a
    compaction node, what later requests saw instead of the forgotten events: (message, node
    extra with `kind`, `forgotten_events` and `summary_offset`)."""
    forgotten = args.get("forgotten_event_ids")
    if not isinstance(forgotten, list):
        lo, hi = args.get("forgotten_events_start_id"), args.get("forgotten_events_end_id")
        forgotten = {"start": lo, "end": hi} if lo is not None or hi is not None else None
    node_extra: dict[str, Any] = {"kind": "compaction"}
    if forgotten is not None:
        node_extra["forgotten_events"] = forgotten
    if args.get("summary_offset") is not None:
        node_extra["summary_offset"] = args["summary_offset"]
    summary = args.get("summary")
    message = Message(role="user", content=summary if isinstance(summary, str) and summary else e.get("message"),
                      extra={**base_extra, "action": CONDENSATION_ACTION, "source_role": "condensation"})
    return message, node_extra
