"""SWE-agent `.traj` files (SWE-agent/SWE-agent), both schema generations:

    {environment, trajectory: [{action, observation, response, thought, state, execution_time?,
     query?}], history: [{role, content, agent, message_type?, thought?, action?, tool_calls?,
     tool_call_ids?, is_demo?}], info: {exit_status, submission, model_stats, ...},
     replay_config?}

(`sweagent/types.py` `TrajectoryStep`, `HistoryItem`, `AgentInfo`; `sweagent/agent/agents.py`
`save_trajectory`). The old generation (SWE-agent 0.x) writes `state` as a JSON string, plain-text
actions and demonstrations as one user message with `is_demo: true`; the new one (1.x) writes
`state` as a dict, OpenAI tool calls (`tool_calls`, results with `tool_call_ids`), and
`message_type` (`system_prompt`, `observation`, `action`, `thought`, `demonstration`).

Mapping (docs/formats.md, "SWE-agent"):
- `history` is the context the model saw: one node per message, in order. Messages marked
  `is_demo` or `message_type: demonstration` keep `extra.demonstration = true`.
- New generation: tool calls as sampled, results paired by `tool_call_ids` (first id; all ids in
  `extra.tool_call_ids`); an item's `thinking_blocks` (litellm, Anthropic extended thinking) are the
  message's reasoning (`_thinking`). Old generation: the assistant's `action` is a plain-text command; it
  becomes a tool call named by the command's first word (`extra.parsed_from_text`) with
  `{"command": action}`, and the next user message (the observation) becomes its tool result
  (role tool, `extra.source_role = "user"`).
- `trajectory[k].state` (parsed from a string when needed) and `execution_time` are kept on the
  k-th observation node's `extra`.
- `info.exit_status` is the ending detail, mapped through the endings table (`ingest.endings.WORDS`,
  docs/formats.md): `submitted` and `exit_forfeit` → submitted; `exit_cost`, `exit_context`,
  `exit_format`, `exit_total_execution_time`, `exit_step_limit` → truncated; `exit_api`,
  `exit_error`, `exit_environment_error`, `exit_command_timeout` → error; an auto-submission
  `submitted (exit_X)` reads as `exit_X`; anything else (`early_exit`, `skipped`) → unknown.
- `info.model_stats` is usage: `tokens_sent` → metrics.input_tokens, `tokens_received` →
  output_tokens, `instance_cost` → cost, `api_calls` → api_calls. `submission` stays in `extra`.
- A demonstration (`trajectories/demonstrations/*.traj`: `{history}` alone, no `trajectory` or
  `info`) is read the same way; its ending is unknown (detail `demonstration`) and the rollout
  carries `extra.demonstration = true`.
- Rollout id: the file name without `.traj`; run: `--run`, else the parent folder.
"""
from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from typing import Any

from ingest.endings import from_reason
from ingest.errors import RecordError
from ingest.fields import FieldError
from ingest.formats._harness import Chain, action_call, documents, openai_tool_call
from ingest.formats._openai import apply_notes, content_from_openai
from ingest.formats.base import ReadContext, record_error, shape_error
from ingest.schema import Call, Ending, EndingInfo, Message, Rollout, RunRef
from ingest.source import Source

EXPECTS = "SWE-agent .traj {trajectory: [steps], history: [messages], info: {exit_status, model_stats}}"
NAME = "swe-agent"
_AUTO = re.compile(r"submitted \((exit_[a-z_]+)\)\Z")
DEMONSTRATION_KEYS = {"history", "environment", "replay_config"}


def sniff(source: Source) -> bool:
    d = source.first
    return (source.kind in ("json", "jsonl") and isinstance(d, dict) and isinstance(d.get("history"), list)
            and ((isinstance(d.get("trajectory"), list) and isinstance(d.get("info"), dict)) or is_demonstration(d)))


def is_demonstration(d: dict) -> bool:
    """A demonstration (`trajectories/demonstrations/*.traj`, shown to the model as an example):
    `{history: [...]}` alone, whose messages carry SWE-agent's own `agent` / `message_type` keys."""
    history = d.get("history")
    return (isinstance(history, list) and bool(history) and set(d) <= DEMONSTRATION_KEYS
            and all(isinstance(m, dict) and "role" in m and ("agent" in m or "message_type" in m) for m in history))


def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    for line, doc in documents(source):
        if isinstance(doc, RecordError):
            yield doc
            continue
        if not (isinstance(doc, dict) and isinstance(doc.get("history"), list)
                and (isinstance(doc.get("info"), dict) or is_demonstration(doc))):
            yield shape_error(source.name, line, None, doc, "SWE-agent trajectory",
                              (("history", "array"), ("info", "object")))
            continue
        try:
            yield _rollout(doc, source, ctx, line)
        except _Bad as exc:
            yield RecordError(source.name, line, exc.field or None, exc.message)
        except Exception as exc:  # noqa: BLE001 - an odd record is rejected with its field, never raised
            yield record_error(source.name, line, None, exc)


class _Bad(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def exit_ending(status: Any) -> Ending:
    """`info.exit_status` → ending through the endings table (`ingest.endings.WORDS`); an
    auto-submission `submitted (exit_X)` is read as `exit_X`."""
    if isinstance(status, str):
        m = _AUTO.match(status.strip())
        status = m.group(1) if m else status
    return from_reason(status)


def _state(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        for parse in (json.loads, ast.literal_eval):
            try:
                return parse(text)
            except (ValueError, SyntaxError):
                continue
        return value
    return value


def _rollout(doc: dict, source: Source, ctx: ReadContext, line: int | None) -> Rollout:
    history = doc["history"]
    steps = doc.get("trajectory") if isinstance(doc.get("trajectory"), list) else []
    demonstration = "info" not in doc
    info = doc.get("info") or {}
    chain = Chain()
    pending_text_call = False  # an old-generation action waiting for its observation
    observations: list[int] = []
    for k, m in enumerate(history):
        where = f"history[{k}]"
        if not isinstance(m, dict):
            raise _Bad(where, f"expected a message object, got {type(m).__name__}")
        role = m.get("role")
        if role not in ("system", "user", "assistant", "tool"):
            raise _Bad(f"{where}.role", f"unknown role {role!r}")
        content = m.get("content")
        if isinstance(content, list):
            content = [p if isinstance(p, dict) else {"type": "text", "text": str(p)} for p in content]
        elif content is not None and not isinstance(content, str):
            content = str(content)
        extra = {k2: v for k2, v in m.items()
                 if k2 not in ("role", "content", "tool_calls", "tool_call_ids", "is_demo", "name", "thinking_blocks")}
        reasoning = _thinking(m.get("thinking_blocks"), f"{where}.thinking_blocks", extra)
        if m.get("is_demo") or m.get("message_type") == "demonstration":
            extra["demonstration"] = True
        tool_calls = None
        tool_call_id = None
        if role == "assistant":
            raw_calls = m.get("tool_calls")
            if isinstance(raw_calls, str):
                raw_calls = _state(raw_calls)
            if isinstance(raw_calls, list) and raw_calls:
                tool_calls = [openai_tool_call(tc) for tc in raw_calls if isinstance(tc, dict)]
            elif isinstance(m.get("action"), str) and m["action"].strip() and not extra.get("demonstration"):
                tool_calls = [action_call(m["action"].rstrip("\n"))]
                pending_text_call = True
        elif role == "tool":
            ids = m.get("tool_call_ids")
            if isinstance(ids, str):
                ids = _state(ids)
            if isinstance(ids, list) and ids:
                tool_call_id = str(ids[0])
                if len(ids) > 1:
                    extra["tool_call_ids"] = ids
            observations.append(len(chain.nodes))
        elif role == "user" and pending_text_call and not extra.get("demonstration"):
            role = "tool"
            extra["source_role"] = "user"
            pending_text_call = False
            observations.append(len(chain.nodes))
        name = m.get("name") if isinstance(m.get("name"), str) else None
        if role == "tool" and name is None:
            prev = next((n for n in reversed(chain.nodes) if n.message.tool_calls), None)
            if prev is not None and len(prev.message.tool_calls) == 1:
                name = prev.message.tool_calls[0].name
        chain.add(Message(role=role, content=content, reasoning_content=reasoning, tool_calls=tool_calls,
                          tool_call_id=tool_call_id, name=name, extra=extra))
    for i, n in enumerate(chain.nodes):
        if n.message.role == "assistant":
            chain.calls.append(Call(node=i))
    last = chain.nodes[-1].message if chain.nodes else None
    if (last is not None and last.role == "assistant" and last.tool_calls
            and exit_ending(info.get("exit_status")) == Ending.submitted):
        for tc in last.tool_calls:  # the submission ended the run: no observation follows it
            tc.extra["ends_rollout"] = True
    # trajectory step k ↔ k-th observation (both in order; demonstrations are not steps)
    for k, step in enumerate(steps):
        if not isinstance(step, dict) or k >= len(observations):
            continue
        node = chain.nodes[observations[k]]
        if "state" in step:
            node.message.extra["state"] = _state(step["state"])
        if "execution_time" in step:
            try:
                node.message.extra["execution_time"] = float(step["execution_time"])
            except (TypeError, ValueError):
                node.message.extra["execution_time"] = step["execution_time"]

    status = info.get("exit_status")
    ending = EndingInfo(type=exit_ending(status), detail=str(status) if status is not None else None)
    if demonstration:  # an example written for the model to imitate: it records no exit status
        ending = EndingInfo(type=Ending.unknown, detail="demonstration",
                            message="a demonstration records no exit status")
    stats = info.get("model_stats") if isinstance(info.get("model_stats"), dict) else {}
    metrics = {}
    for src, dst in (("tokens_sent", "input_tokens"), ("tokens_received", "output_tokens"),
                     ("instance_cost", "cost"), ("api_calls", "api_calls")):
        v = stats.get(src)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            metrics[dst] = float(v)
    extra: dict[str, Any] = {"info": {k: v for k, v in info.items() if k not in ("exit_status",)},
                             "environment": doc.get("environment"), "generation": _generation(doc)}
    if "replay_config" in doc:
        extra["replay_config"] = doc["replay_config"]
    if demonstration:
        extra["demonstration"] = True
    stem = ctx.source_key(source)
    try:
        return chain.finish(Rollout(id=stem if line is None else f"{stem}#{line}",
                                    run=RunRef(id=ctx.run_for(source), type="eval"),
                       nodes=chain.nodes, calls=chain.calls, ending=ending, metrics=metrics, extra=extra,
                       source={"format": NAME, "file": source.name, "line": line}))
    except ValueError as exc:
        raise _Bad("", str(exc)) from None


def _thinking(blocks: Any, where: str, extra: dict) -> str | None:
    """The reasoning of a history item: its `thinking_blocks` (litellm's `[{type: "thinking",
    thinking, signature}]`, `redacted_thinking`), read as content reasoning blocks are
    (`_openai.normalize_parts`: the text is the reasoning, the blocks without it stay in
    `extra.reasoning_blocks`). Anything else is kept as given in `extra.thinking_blocks`."""
    if blocks is None:
        return None
    if not (isinstance(blocks, list) and all(isinstance(b, dict) for b in blocks)):
        extra["thinking_blocks"] = blocks
        return None
    try:
        _, notes = content_from_openai(blocks, where)
    except FieldError as exc:
        raise _Bad(exc.field, exc.message) from None
    if not notes.get("reasoning"):
        extra["thinking_blocks"] = blocks
        return None
    return apply_notes(extra, notes, None)


def _generation(doc: dict) -> int:
    """1 for the old generation (state as a string, text actions), 2 for the new one."""
    steps = doc.get("trajectory") or []
    if any(isinstance(s, dict) and isinstance(s.get("state"), dict) for s in steps):
        return 2
    if any(isinstance(m, dict) and ("message_type" in m or "tool_calls" in m) for m in doc.get("history") or []):
        return 2
    return 1
