"""NVIDIA NeMo Gym rollout JSONL, as `ng_collect_rollouts` writes it: one line per rollout,
`{responses_create_params: {input, tools, max_output_tokens, ...}, response: {id, created_at, output:
[Responses items], incomplete_details, status, error, usage}, reward, _ng_task_index, _ng_rollout_index,
agent_ref, ...environment fields (terminated, truncated)}`.

Schema sources: ingest/formats/nemo_gym.py and ingest/formats/_responses.py (docstrings),
../shared/formats-reference.md, and the real files tests/fixtures/realdata/nemo-gym (NVIDIA-NeMo/Gym
`*/data/example_rollouts*.jsonl`): the system and user messages as `input` items, the rollout as
`output` items (a `reasoning` item with `summary_text`, an assistant `message` with `output_text`
parts, one `function_call` item per parallel call, one `function_call_output` per result), each model
call's token fields (`prompt_token_ids`: the full prompt; `generation_token_ids`;
`generation_log_probs`) on the last item of that call, flat tools, gym flags `terminated`/`truncated`.

Carried: token ids, full prompts (so the environment's tokens between requests), behaviour
logprobs kept apart from the ids, the finish reason of the last call (`incomplete_details.reason`,
`max_output_tokens` for a length stop; the other calls' finish reasons have no field), the cap
(`max_output_tokens`, one for the rollout), reasoning, tool calls, tools, the group
(`_ng_task_index`) and index (`_ng_rollout_index`), reward. Not carried: a loss mask, a trainer
logprob array, per-call usage (`response.usage` sums the rollout) or timing (only
`response.created_at`), a group size, advantages, the training step, token bytes. Messages after the
last model call are in no prompt, so they are never tokenized.
"""
from __future__ import annotations

import json
import zlib
from pathlib import Path

from tests.checks.matrix.episode import T0, Episode

NAME = "nemo-gym"
CARRIES = frozenset({"token_ids", "prompt_ids", "env_tokens", "logprobs", "finish_reason", "max_tokens",
                     "reasoning", "tool_calls", "tools", "group", "group_index", "reward", "parallel_arrays"})
MODEL = "Qwen/Qwen3-4B-Instruct-2507"


def _tool(t: dict) -> dict:
    f = t["function"]
    return {"type": "function", "name": f["name"], "description": f.get("description"), "parameters": f["parameters"],
            "strict": None}


def _model_items(m: dict, k: int, tokens: dict | None) -> list[dict]:
    """The output items of one model call, the token fields on its last item."""
    items: list[dict] = []
    if m.get("reasoning_content"):
        items.append({"id": f"rs_{k}", "summary": [{"text": m["reasoning_content"], "type": "summary_text"}],
                      "type": "reasoning", "encrypted_content": None})
    content = m.get("content")
    if content is not None and (content != "" or not m.get("tool_calls")):
        items.append({"id": f"msg_{k}", "content": [{"annotations": [], "text": content, "type": "output_text",
                                                     "logprobs": None}],
                      "role": "assistant", "status": "completed", "type": "message"})
    for c in m.get("tool_calls") or []:
        items.append({"arguments": c["function"]["arguments"], "call_id": c["id"], "name": c["function"]["name"],
                      "type": "function_call", "id": c["id"], "status": "completed"})
    if not items:
        items.append({"id": f"msg_{k}", "content": [], "role": "assistant", "status": "completed", "type": "message"})
    if tokens:
        items[-1].update(tokens)
    return items


def _env_item(m: dict) -> dict:
    if m["role"] == "tool":
        return {"call_id": m.get("tool_call_id"), "output": m.get("content"), "type": "function_call_output",
                "id": None, "status": None}
    return {"role": m["role"], "content": m.get("content"), "type": "message"}


def record(ep: Episode) -> dict:
    """One NeMo Gym rollout line."""
    first = next((i for i, t in enumerate(ep.turns) if t.request is not None), len(ep.turns))
    inputs = [_env_item(t.message) for t in ep.turns[:first]]
    output: list[dict] = []
    for k, t in enumerate(ep.turns[first:], start=first):
        req = t.request
        if req is None:
            output.append(_env_item(t.message))
            continue
        tokens = {"prompt_token_ids": list(req.prompt_ids), "generation_token_ids": list(req.completion_ids),
                  "generation_log_probs": list(req.logprobs)} if ep.content_recorded else None
        output += _model_items(t.message, k, tokens)
    reqs = [r for _, r in ep.requests()]
    last = reqs[-1] if reqs else None
    cut = last is not None and last.finish_reason == "length"
    cap = next((r.max_tokens for r in reqs if r.max_tokens is not None), None)
    response = {"id": f"resp_{ep.id}", "created_at": float(int(T0)), "error": None,
                "incomplete_details": {"reason": "max_output_tokens"} if cut else None, "instructions": None,
                "metadata": None, "model": MODEL, "object": "response", "output": output,
                "parallel_tool_calls": True, "temperature": 1.0, "tool_choice": "auto",
                "tools": [_tool(x) for x in ep.tools], "top_p": None, "max_output_tokens": cap,
                "status": "incomplete" if cut else "completed",
                "usage": {"input_tokens": sum(len(r.prompt_ids) for r in reqs),
                          "output_tokens": sum(r.usage_output_tokens for r in reqs),
                          "total_tokens": sum(len(r.prompt_ids) + r.usage_output_tokens for r in reqs)}}
    if ep.stop == "error":
        response["error"] = {"code": "server_error", "message": "the agent server failed"}
    line = {"responses_create_params": {"background": None, "input": inputs, "instructions": None,
                                        "max_output_tokens": cap, "model": None, "parallel_tool_calls": True,
                                        "temperature": 1.0, "tool_choice": "auto",
                                        "tools": [_tool(x) for x in ep.tools], "top_p": None},
            "response": response, "reward": ep.reward,
            "terminated": ep.stop == "completed", "truncated": ep.stop == "max_turns"}
    if ep.group is not None:
        line["_ng_task_index"] = 17 if ep.group == "g17" else zlib.crc32(ep.group.encode()) % 1000
    if ep.index is not None:
        line["_ng_rollout_index"] = ep.index
    line["agent_ref"] = {"type": "responses_api_agents", "name": "calc_simple_agent"}
    return line


def write(episodes: list[Episode], folder: Path) -> Path:
    path = folder / "rollouts.jsonl"
    path.write_text("".join(json.dumps(record(ep)) + "\n" for ep in episodes))  # NaN as Python's json writes it
    return path
