"""SWE-agent 1.x `.traj` files, function calling (SWE-agent/SWE-agent `sweagent/types.py` `HistoryItem`,
`TrajectoryStep`, `AgentInfo`; tests/fixtures/realdata/swe-agent/*.function_calling_replace.traj,
tests/fixtures/upstream/swe-agent): one file per episode, `{environment, trajectory: [{action, observation,
response, thought, execution_time, state}], history: [{role, content, agent, message_type, thought?, action?,
tool_calls?, tool_call_ids?}], info: {exit_status, submission, model_stats}, replay_config}`. Tool calls are
OpenAI calls with ids, results are `role: tool` items naming `tool_call_ids`; an item's reasoning is its
`thinking_blocks` (litellm's `[{type: "thinking", thinking, signature}]`). A trajectory records no reward,
group, step, tools schema, finish reason, per-call usage (only run totals in `model_stats`), start/end times
(only each step's `execution_time`) or token ids (ingest/formats/swe_agent.py)."""
from __future__ import annotations

import json
from pathlib import Path

from tests.checks.matrix.episode import Episode

NAME = "swe-agent"
CARRIES = frozenset({"tool_calls", "reasoning"})
EXIT = {"completed": "submitted", "max_turns": "exit_cost", "error": "exit_error"}


def _item(m: dict) -> dict:
    role = m["role"]
    out = {"role": role, "content": m.get("content") or "", "agent": "main"}
    if role == "system":
        out["message_type"] = "system_prompt"
    elif role == "assistant":
        out.update(message_type="action", thought=m.get("content") or "", action="")
        if m.get("reasoning_content"):
            out["thinking_blocks"] = [{"type": "thinking", "thinking": m["reasoning_content"], "signature": "c2ln"}]
        if m.get("tool_calls"):
            out["action"] = "\n".join(f"{c['function']['name']} {c['function']['arguments']}" for c in m["tool_calls"])
            out["tool_calls"] = [{"function": {"arguments": c["function"]["arguments"], "name": c["function"]["name"]},
                                  "id": c.get("id"), "type": "function"} for c in m["tool_calls"]]
    else:
        out["message_type"] = "observation"
        if role == "tool" and m.get("tool_call_id") is not None:
            out["tool_call_ids"] = [m["tool_call_id"]]
    return out


def _document(ep: Episode) -> dict:
    history = [_item(t.message) for t in ep.turns]
    steps = []
    for k, t in enumerate(ep.turns):
        if t.role == "tool":
            call = next((h for h in reversed(history[:k]) if h["role"] == "assistant"), {})
            steps.append({"action": call.get("action", ""), "observation": t.message.get("content") or "",
                          "response": call.get("content", ""), "thought": call.get("thought", ""),
                          "execution_time": (t.end - t.start) if t.start is not None and t.end is not None else 0.0,
                          "state": {"working_dir": "/testbed"}})
    status = EXIT[ep.stop]
    return {"environment": "swe_main", "trajectory": steps, "history": history,
            "info": {"submission": "", "exit_status": status,
                     "model_stats": {"instance_cost": 0.01, "tokens_sent": 0, "tokens_received": 0,
                                     "api_calls": len(ep.requests())}},
            "replay_config": json.dumps({"agent": {"model": {"name": "matrix"}}})}


def write(episodes: list[Episode], folder: Path) -> Path:
    for ep in episodes:
        (folder / f"{ep.id}.traj").write_text(json.dumps(_document(ep), indent=2))
    return folder
