"""tau-bench results (sierra-research/tau-bench `run.py`, as in tests/fixtures/realdata/tau-bench): one
JSON array per run, an element per (task, trial): `{task_id, reward, info: {task, source, user_cost,
reward_info}, traj: [messages], trial}`. `traj` is what the agent sent and got back: litellm
`Message.model_dump()` for the assistant (`{content, role, tool_calls: [{function: {arguments, name},
id, type}]}`, plus `reasoning_content` when the provider returns reasoning), `{role: "tool",
tool_call_id, name, content}` for the environment. The group is the task (`task_id`), the index the
trial; no group size, tools, finish reasons, usage, timing or token ids are saved (ingest/formats/
tau_bench.py). An episode ends done when the user simulator says `###STOP###` (`info.source = "user"`);
an error run keeps `info.error` and `info.traceback`."""
from __future__ import annotations

import json
from pathlib import Path

from tests.checks.matrix.episode import Episode

NAME = "tau-bench"
CARRIES = frozenset({"ending", "tool_calls", "reasoning", "group", "group_index", "reward"})
# split_group: the group is the task (task_id), yet two tasks with one prompt are two groups of one
# for that prompt, and the check matches groups by their prompt (ingest.checks.prompt_key): it fires
CANNOT: dict[str, str] = {}
STOP = "###STOP###"


def _message(m: dict) -> dict:
    """One message as tau-bench's trajectory holds it."""
    if m["role"] != "assistant":
        return dict(m)
    out = {"content": m.get("content") or None, "role": "assistant"}
    if m.get("reasoning_content"):
        out["reasoning_content"] = m["reasoning_content"]
    if m.get("tool_calls"):
        out["tool_calls"] = [{"function": {"arguments": c["function"]["arguments"], "name": c["function"]["name"]},
                              "id": c.get("id"), "type": "function"} for c in m["tool_calls"]]
    return out


def _element(ep: Episode) -> dict:
    traj = [_message(t.message) for t in ep.turns]
    info: dict = {"task": {"user_id": "matrix", "instruction": ep.task, "actions": [], "outputs": []},
                  "source": "user", "user_cost": 0.0021,
                  "reward_info": {"reward": ep.reward, "info": {"r_actions": ep.reward}, "actions": []}}
    if ep.stop == "completed":
        traj.append({"role": "user", "content": STOP})  # the user simulator ends the episode
    elif ep.stop == "error":
        info = {"error": "RateLimitError: the model API refused the request", "traceback": "Traceback ..."}
    else:
        info["source"] = "agent"  # max_num_steps ran out: no done marker
    return {"task_id": ep.group, "reward": ep.reward, "info": info, "traj": traj, "trial": ep.index}


def write(episodes: list[Episode], folder: Path) -> Path:
    path = folder / "gpt-4o-airline.json"
    # json.dumps writes a NaN reward as `NaN`, as tau-bench's json.dump does
    path.write_text(json.dumps([_element(ep) for ep in episodes], indent=2, allow_nan=True))
    return path
