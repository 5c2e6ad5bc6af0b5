"""Generic OpenAI-style chat records (ingest/formats/chat.py, docs/formats-chat.md), in the richest shape a
chat-log producer writes: one JSONL record per rollout, `{rollout_id, group_id, group_index, group_size, step,
task_id, reward, tools, stop_condition, messages, turns}`. `messages` are OpenAI chat messages (assistant
`reasoning_content` as vLLM returns it, `tool_calls` with ids, tool results by `tool_call_id`); `turns` has one
entry per assistant message: the request's full `prompt_ids`, the sampled `completion_ids`, and what the OpenAI
chat completion response said about that choice: `logprobs: {content: [{token, logprob, bytes, top_logprobs}]}`,
`finish_reason`, `usage: {prompt_tokens, completion_tokens, total_tokens}`, and the request's `max_tokens`.
No loss mask, environment tokens, trainer logprobs, advantages or call times have a place in it (a message's
`timestamp` is one instant, not a start and an end)."""
from __future__ import annotations

import json
from pathlib import Path

from tests.checks.matrix.episode import Episode, Request, tok_of

NAME = "chat"
CARRIES = frozenset({"token_ids", "prompt_ids", "logprobs", "finish_reason", "max_tokens", "usage",
                     "reasoning", "tool_calls", "tools", "group", "group_index", "group_size", "reward",
                     "step", "token_bytes", "parallel_arrays"})


def _piece(tok, tid: int) -> bytes:
    try:
        return tok.ctx.decode([tid]).encode()
    except Exception:  # noqa: BLE001 - an id the tokenizer does not know (a fault): no text for it
        return b""


def _entries(req: Request, tok) -> list[dict]:
    """The choice's `logprobs.content`: one entry per logprob the server returned."""
    out = []
    for k, lp in enumerate(req.logprobs):
        raw = bytes.fromhex(req.token_bytes[k]) if req.token_bytes is not None and k < len(req.token_bytes) \
            else _piece(tok, req.completion_ids[k]) if k < len(req.completion_ids) else b""
        out.append({"token": raw.decode("utf-8", errors="replace"), "logprob": lp, "bytes": list(raw),
                    "top_logprobs": []})
    return out


def _turn(req: Request, tok, recorded: bool) -> dict:
    turn: dict = {"prompt_ids": list(req.prompt_ids)}
    if recorded:
        turn["completion_ids"] = list(req.completion_ids)
        turn["logprobs"] = {"content": _entries(req, tok)}
    turn["finish_reason"] = req.finish_reason
    turn["usage"] = {"prompt_tokens": len(req.prompt_ids), "completion_tokens": req.usage_output_tokens,
                     "total_tokens": len(req.prompt_ids) + req.usage_output_tokens}
    if req.max_tokens is not None:
        turn["max_tokens"] = req.max_tokens
    return turn


def _message(m: dict, recorded: bool) -> dict:
    if m["role"] != "assistant":
        return dict(m)
    if not recorded:  # capture off: the message says nothing; its usage still counts the tokens
        return {"role": "assistant", "content": None}
    out = {"role": "assistant", "content": m.get("content")}
    if m.get("reasoning_content"):
        out["reasoning_content"] = m["reasoning_content"]
    if m.get("tool_calls"):
        out["tool_calls"] = [dict(c) for c in m["tool_calls"]]
    return out


def _record(ep: Episode) -> dict:
    tok = tok_of(ep)
    rec: dict = {"rollout_id": ep.id, "step": ep.step, "task_id": ep.task, "reward": ep.reward, "tools": ep.tools,
                 "stop_condition": ep.stop}
    if ep.group is not None:
        rec.update(group_id=ep.group, group_index=ep.index, group_size=ep.size)
    rec["messages"] = [_message(t.message, ep.content_recorded) for t in ep.turns]
    rec["turns"] = [_turn(req, tok, ep.content_recorded) for _, req in ep.requests()]
    return rec


def write(episodes: list[Episode], folder: Path) -> Path:
    path = folder / "rollouts.jsonl"
    path.write_text("".join(json.dumps(_record(ep)) + "\n" for ep in episodes))
    return path
