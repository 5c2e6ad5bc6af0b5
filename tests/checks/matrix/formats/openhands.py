"""OpenHands event streams, as its evaluation harness writes them: `output.jsonl`, one line per
instance `{instance_id, instruction, history: [events], metrics, error, test_result}`
(evaluation/benchmarks/*/run_infer.py; the events `event_to_dict` of
openhands/events/serialization/event.py; tests/fixtures/realdata/openhands/basic.json; the reader's
docstring, ingest/formats/openhands.py).

Events: a `system` action (`args.content`, `args.tools`), the user's `message` action, then per
model response with tool calls one action per call (here the MCP action `call_tool_mcp`, `args
{name, arguments, thought}`), each with `tool_call_metadata {function_name, tool_call_id,
model_response (the litellm chat completion: choices[0].message with content, tool_calls,
finish_reason; usage), total_calls_in_response}`, and its observation (`mcp`, `cause` = the action's
event id, the same metadata). A response with no tool call becomes a `message` action of the agent
WITHOUT metadata (codeact_agent/function_calling.py `response_to_actions`), so its finish reason,
usage and reasoning are not in the stream. A response whose arguments do not parse never becomes
an action: `response_to_actions` raises `FunctionCallValidationError` and the controller records an
`error` observation (no cause) "Failed to parse tool call arguments: ...". Each event has one
naive-ISO `timestamp`: no start/end of a model call. The stream records no token ids, logprobs,
masks, max_tokens, reward, group or step.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from tests.checks.matrix.episode import Episode

NAME = "openhands"
CARRIES = frozenset({"tool_calls", "tools"})
CANNOT = {  # faults OpenHands has no way to write, although it records tool calls
    "ambiguous_tool_result": "every observation names its action by event id (cause)",
    "malformed_tool_arguments": "unparseable arguments raise before any action is recorded",
}
MODEL = "hosted_vllm/tiny-qwen3"


def _ts(t: float | None) -> str:
    return datetime.fromtimestamp(t or 0, tz=timezone.utc).replace(tzinfo=None).isoformat()


def _parses(raw: str) -> bool:
    try:
        json.loads(raw)
        return True
    except ValueError:
        return False


def _response(ep: Episode, k: int, m: dict, req) -> dict:
    calls = [{"index": n, "function": {"arguments": c["function"]["arguments"], "name": c["function"]["name"]},
              "id": c["id"], "type": "function"} for n, c in enumerate(m.get("tool_calls") or [])]
    out = req.usage_output_tokens if req else None
    return {"id": f"chatcmpl-{ep.id}-{k}", "created": int(req.start if req and req.start else 0), "model": MODEL,
            "object": "chat.completion", "system_fingerprint": None,
            "choices": [{"finish_reason": req.finish_reason if req else "tool_calls", "index": 0,
                         "message": {"content": m.get("content") or None, "role": "assistant", "tool_calls": calls,
                                     "function_call": None,
                                     "reasoning_content": m.get("reasoning_content")}}],
            "usage": {"completion_tokens": out, "prompt_tokens": len(req.prompt_ids) if req else None,
                      "total_tokens": (out or 0) + (len(req.prompt_ids) if req else 0)},
            "service_tier": None}


def _history(ep: Episode) -> list[dict]:
    events: list[dict] = []
    action_of_call: dict[str, dict] = {}
    failed: set[str] = set()  # calls of a response that never became actions: nothing ran them
    base = next((r.start for _, r in ep.requests() if r.start is not None), 0.0)

    def add(e: dict) -> dict:
        e = {"id": len(events), **e}
        events.append(e)
        return e

    for k, turn in enumerate(ep.turns):
        m, req = turn.message, turn.request
        t = (req.start if req else None) or turn.start or base
        if m["role"] == "system":
            add({"timestamp": _ts(t - 1), "source": "agent", "message": m["content"], "action": "system",
                 "args": {"content": m["content"], "tools": ep.tools, "openhands_version": "0.39.0",
                          "agent_class": "CodeActAgent"}})
        elif m["role"] == "user":
            add({"timestamp": _ts(t - 0.5), "source": "user", "message": m["content"], "action": "message",
                 "args": {"content": m["content"], "image_urls": None, "wait_for_response": False}})
        elif m["role"] == "assistant" and m.get("tool_calls"):
            bad = [c for c in m["tool_calls"] if not _parses(c["function"]["arguments"])]
            if bad:  # FunctionCallValidationError: no action, an error observation from the controller
                failed.update(c["id"] for c in m["tool_calls"])
                add({"timestamp": _ts(req.end), "source": "agent",
                     "message": f"Failed to parse tool call arguments: {bad[0]['function']['arguments']}",
                     "observation": "error",
                     "content": f"Failed to parse tool call arguments: {bad[0]['function']['arguments']}",
                     "extras": {"error_id": ""}})
                continue
            meta_response = _response(ep, k, m, req)
            for n, c in enumerate(m["tool_calls"]):
                meta = {"function_name": c["function"]["name"], "tool_call_id": c["id"],
                        "model_response": meta_response, "total_calls_in_response": len(m["tool_calls"])}
                e = add({"timestamp": _ts(req.end), "source": "agent", "message": "", "action": "call_tool_mcp",
                         "tool_call_metadata": meta,
                         "args": {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"]),
                                  "thought": (m.get("content") or "") if n == 0 else ""}, "timeout": 120})
                action_of_call.setdefault(c["id"], e)
        elif m["role"] == "assistant":  # no tool call: a MessageAction without metadata
            add({"timestamp": _ts(req.end if req else t), "source": "agent", "message": m.get("content") or "",
                 "action": "message", "args": {"content": m.get("content") or "", "image_urls": None,
                                               "wait_for_response": True}})
        elif m["role"] == "tool":
            cid = m.get("tool_call_id")
            if cid in failed:
                continue
            action = action_of_call.get(cid) if cid is not None else None
            e = {"timestamp": _ts(turn.end), "source": "agent", "message": m["content"], "observation": "mcp",
                 "content": m["content"], "extras": {"name": m.get("name")}}
            if action is not None:
                e["cause"] = action["id"]
                e["tool_call_metadata"] = action["tool_call_metadata"]
            elif cid is not None:  # a result for a call no action made: its cause names no event here
                e["cause"] = 10_000
                e["tool_call_metadata"] = {"function_name": m.get("name"), "tool_call_id": cid,
                                           "model_response": None, "total_calls_in_response": 1}
            add(e)
    state = {"completed": "awaiting_user_input", "max_turns": "error", "error": "error"}[ep.stop]
    add({"timestamp": events[-1]["timestamp"], "source": "environment", "message": "", "observation":
         "agent_state_changed", "content": "", "extras": {"agent_state": state,
                                                         "reason": "" if state != "error" else "RuntimeError"}})
    return events


def write(episodes: list[Episode], folder: Path) -> Path:
    path = folder / "output.jsonl"
    lines = []
    for ep in episodes:
        first_user = next(t.message["content"] for t in ep.turns if t.role == "user")
        lines.append(json.dumps({"instance_id": ep.id, "instruction": first_user, "history": _history(ep),
                                 "metrics": {"accumulated_cost": 0.0}, "error": None, "test_result": {}}))
    path.write_text("".join(x + "\n" for x in lines))
    return path
