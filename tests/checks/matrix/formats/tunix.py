"""Google Tunix 0.1.7 agentic rollouts: RolloutOrchestrator batches of `TrajectoryItem`s whose
`traj` is a Trajectory-mode episode, the collect mode that carries the most fields (per-turn
context, actions, observations, tokens, masks, logprobs, rewards, status; Token mode flattens the
turns and drops actions and observations, Steps mode has no prompt or status, Conversation mode no
tokens), wrapped as the orchestrator wraps it (group id and index within the group).

Schema sources: ingest/formats/tunix.py (docstring: `Trajectory` from `tunix/rl/agentic/agents/
agent_types.py`, `TrajectoryItem` from `pipeline/rollout_orchestrator.py`), docs/formats-tunix.md,
and the real files tests/fixtures/realdata/tunix/v0.1.7 (`orchestrator_group.Trajectory.json`,
`submitted.Trajectory.json`): `[[{pair_index, group_id, start_step, traj: {task, steps, reward,
status, env_time, reward_time, prompt_tokens}, metadata}]]`; each step's `chat_completions` is that
turn's context with its assistant message (the raw `model_response`, end-of-turn token kept),
`action.action` the parsed calls (the assistant message in `chat_completions` is the agent's parsed
content, reasoning in `thought`, calls in `action`; ToolAgent itself stores the raw response there, as
`model_response` holds it here), `observation.tool_outputs` the results by call id, `thought` the
reasoning, `assistant_tokens`/`assistant_masks`/`logprobs` the completion, `env_tokens`/`env_masks`
the observation's tokens up to the next completion (null on the final step).

Carried: token ids, prompts (one `prompt_tokens`, then each turn's tokens in sequence: a request's
prompt is that concatenation by construction, so a prompt that is not the previous one extended
cannot be written), environment tokens with their mask, a loss mask, behaviour logprobs (a separate
array), reasoning (`thought`), tool calls with ids, the group (`group_id`), index (`pair_index`) and
size (the batch: one batch is one GRPO group, so a size other than its members cannot be written),
reward. Not carried: finish reasons, a `max_tokens` cap per call (`max_response_length` is engine
config, not in the episode), usage, the tools offered (only inside the system prompt text), call
timing (`env_time` is aggregate), advantages, the
training step, token bytes, a trainer logprob array. Capture cannot be turned off (no
`content_recorded=False` shape).
"""
from __future__ import annotations

import json
from pathlib import Path

from tests.checks.matrix.episode import Episode, tok_of

NAME = "tunix"
CARRIES = frozenset({"trailing_env_tokens", "ending", "token_ids", "prompt_ids", "env_tokens", "mask",
                     "logprobs", "reasoning", "tool_calls", "group", "group_index", "group_size", "reward",
                     "parallel_arrays"})
CANNOT = {  # faults this format has no way to write, although it holds the fields
    "token_drift": "the prompt is one token sequence by construction",
    "reasoning_stripped": "the prompt is one token sequence by construction",
    "group_size_mismatch": "the group size is the batch length",
    "duplicate_bos": "v0.1.7 records no prompt_length: a leading run of one id reads as left padding",
}
STATUS = {"completed": "SUCCEEDED", "max_turns": "MAX_STEPS_REACHED", "error": "ENV_TIMEOUT"}


def _chat(m: dict) -> dict:
    """A message as an agent keeps it in `chat_completions`: role, content (tool: its call id)."""
    out = {"role": m["role"], "content": m.get("content") or ""}
    if m["role"] == "tool" and m.get("tool_call_id") is not None:
        out["tool_call_id"] = m["tool_call_id"]
    return out


def trajectory(ep: Episode) -> dict:
    """One Trajectory-mode episode."""
    tok = tok_of(ep)
    reqs = ep.requests()
    raw = {i: tok.ctx.decode(r.completion_ids) for i, r in reqs}  # model_response: the decoded sample
    chat = [_chat(t.message) for t in ep.turns]
    steps = []
    for n, (i, req) in enumerate(reqs):
        nxt = reqs[n + 1] if n + 1 < len(reqs) else None
        m = ep.turns[i].message
        calls = [{"id": c["id"], "type": "function", "function": {"name": c["function"]["name"],
                                                                  "arguments": c["function"]["arguments"]}}
                 for c in m.get("tool_calls") or []]
        if not calls:  # ToolAgent's implicit finish: the final answer
            calls = [{"id": f"finish-{ep.id}-{n}", "type": "function",
                      "function": {"name": "finish", "arguments": {"response": raw[i]}}}]
        end = nxt[0] if nxt else len(ep.turns)
        results = {t.message.get("tool_call_id") or f"unknown-{k}": t.message.get("content")
                   for k, t in enumerate(ep.turns[i + 1:end]) if t.role == "tool"}
        if nxt:
            env = list(nxt[1].prompt_ids[len(req.prompt_ids) + len(req.completion_ids):])
        else:
            env = list(ep.trailing_ids) if ep.trailing_ids else None
        env_mask = None
        if env is not None:
            trained = any(t.env_mask for t in ep.turns[i + 1:end])
            env_mask = [1 if trained else 0] * len(env)
        last = nxt is None
        reward = ep.reward if last else 0.0
        steps.append({
            "chat_completions": chat[:i + 1], "thought": m.get("reasoning_content") or "",
            "action": {"action": calls},
            "observation": {"tool_outputs": results} if results else {},
            "model_response": raw[i], "info": {"response": calls},
            "reward": reward, "done": last, "mc_return": ep.reward,
            "assistant_tokens": list(req.completion_ids),
            "assistant_masks": list(req.mask) if req.mask is not None else [1] * len(req.completion_ids),
            "env_tokens": env, "env_masks": env_mask, "logprobs": list(req.logprobs),
        })
    first = reqs[0][1].prompt_ids if reqs else []
    return {"task": {"id": ep.task, "question": ep.messages()[1]["content"], "policy_version": ep.step},
            "steps": steps, "reward": ep.reward, "status": STATUS[ep.stop],
            "env_time": {"reset_latency": 0.001, "step_latency": 0.001},
            "reward_time": {"reward_latency": 0.0, "reward_cpu_time": 0.0},
            "prompt_tokens": list(first)}


def write(episodes: list[Episode], folder: Path) -> Path:
    groups: dict[str | None, list[dict]] = {}
    for k, ep in enumerate(episodes):
        gid = None if ep.group is None else (17 if ep.group == "g17" else ep.group)
        groups.setdefault(ep.group, []).append({"pair_index": ep.index, "group_id": gid, "start_step": 0,
                                                "traj": trajectory(ep), "metadata": {"generation_id": k}})
    path = folder / "orchestrator_batches.json"
    path.write_text(json.dumps(list(groups.values())))  # a NaN reward as Python's json writes it: NaN
    return path
