"""verifiers v1 Episodes as prime-rl writes them (`rollouts/step_N/train/effective/traces.jsonl`, one
`Episode.to_record()` per line, orjson, `exclude_none`).

Schema sources: ingest/formats/verifiers.py (docstring), ../shared/formats-reference.md §1 (verifiers
`v1/trace.py`, `v1/graph.py`, `v1/episode.py`; prime-rl `monitors/file.py`), and the real files
tests/fixtures/realdata/verifiers (verifiers 0.4.0 `Episode.to_record()`): key names, nesting, flat
tool calls `{id, type, name, arguments}`, tool-call turns without `content`, epoch-float timestamps.

The graph is built as verifiers' `add_turn` builds it: each request's prompt messages reuse the
nodes already stored for them (same parent, same message) while their stored tokens are what this
prompt holds there; the first message whose tokens differ, and every one after it, is a new node
under the last reused one (a branch: the history as this request's prompt restated it; a restated
assistant message carries no reasoning when the prompt lost it). New tokens are split among the new
messages at their turn openings (leading scaffold folds into the following message); the generation
prompt goes on the assistant node before its completion (mask 0), so `concat(token_ids along a path)
== prompt_ids + completion_ids`. `logprobs` and `advantages` are compact (one per mask-true token).

Carried: token ids, full prompts (the path), environment tokens, mask, behaviour logprobs, finish
reasons, `sampling.max_tokens`, usage, reasoning, tool calls, tools, model-call `time`, group id
(`episode.group`), advantages, rewards `{name: {score, weight}}`, step (`run.work.step`), arrays
kept apart (compact logprobs). Not carried: a trainer logprob array (prime-rl exports it to
`token_exports/`, not the trace), token bytes, an index within the group or a group size (verifiers
has no such field). Environment messages after the last request are not tokenized (only a model
turn's prompt is); a NaN score is written as orjson writes it: `null`.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from tests.checks.matrix.episode import Episode, Request, Tok, env_segments, tok_of

NAME = "verifiers"
CARRIES = frozenset({"ending", "token_ids", "prompt_ids", "env_tokens", "mask", "logprobs", "finish_reason",
                     "max_tokens", "usage", "reasoning", "tool_calls", "tools", "timing", "group",
                     "advantages", "reward", "step", "parallel_arrays"})
CANNOT = {  # faults this format has no way to write, although it holds the fields
    "non_finite_reward": "prime-rl writes with orjson, which writes NaN as null (unscored)",
}
STOPS = {"completed": "agent_completed", "max_turns": "max_turns", "error": "error"}


def _message(m: dict) -> dict:
    """An OpenAI chat message as a verifiers Message (flat tool calls, `exclude_none`)."""
    out: dict = {"role": m["role"]}
    content = m.get("content")
    if content is not None and not (content == "" and m.get("tool_calls")):
        out["content"] = content
    if m.get("reasoning_content") is not None:
        out["reasoning_content"] = m["reasoning_content"]
    if m.get("tool_calls"):
        out["tool_calls"] = [{"id": c.get("id"), "type": "function", "name": c["function"]["name"],
                              "arguments": c["function"]["arguments"]} for c in m["tool_calls"]]
    for key in ("tool_call_id", "name"):
        if m.get(key) is not None and m["role"] == "tool":
            out[key] = m[key]
    return out


def _key(parent: int | None, m: dict) -> str:
    return json.dumps([parent, m], sort_keys=True)


def _generation_prompt(tok: Tok, messages: list[dict], prompt: list[int]) -> int:
    """How many of the prompt's last tokens are the template's generation prompt."""
    with_gen = tok.encode(tok.render(messages, generation=True, tools=None))
    without = tok.encode(tok.render(messages, generation=False, tools=None))
    n = len(with_gen) - len(without)
    return n if 0 < n <= len(prompt) and with_gen[:len(without)] == without and prompt[-n:] == with_gen[-n:] else 0


def _compact(values: list, mask: list[bool]) -> list:
    """verifiers' compact layout: one value per mask-true token (a short array stays short)."""
    if len(values) != len(mask):
        return list(values)
    return [v for v, m in zip(values, mask) if m]


class _Graph:
    def __init__(self, tok: Tok) -> None:
        self.tok, self.nodes, self.index = tok, [], {}

    def turn(self, messages: list[dict], req: Request, ts: float | None, advantage: float | None,
             answer: dict, record_content: bool) -> int:
        prompt, parent, path_len, k = list(req.prompt_ids), None, 0, 0
        for k, m in enumerate(messages):
            node = self.index.get(_key(parent, _message(m)))
            if node is None or prompt[path_len:path_len + len(self.nodes[node]["token_ids"])] \
                    != self.nodes[node]["token_ids"]:
                break
            parent, path_len = node, path_len + len(self.nodes[node]["token_ids"])
        else:
            k = len(messages)
        g = _generation_prompt(self.tok, messages, prompt)
        region = prompt[path_len:len(prompt) - g]
        new = [_message(m) for m in messages[k:]]
        if new:
            text = self.tok.ctx.decode(region)
            for m in new:  # a restated turn whose reasoning the prompt lost carries none
                if m["role"] == "assistant" and m.get("reasoning_content") and m["reasoning_content"] not in text:
                    m.pop("reasoning_content")
            parts = env_segments(region, [m.get("content") or "" for m in new], self.tok)
            for m, ids in zip(new, parts):
                self.nodes.append({**({"parent": parent} if parent is not None else {}), "message": m,
                                   "sampled": False, "token_ids": ids, "mask": [False] * len(ids),
                                   "is_content": [], "logprobs": []})
                parent = len(self.nodes) - 1
                self.index[_key(self.nodes[parent].get("parent"), m)] = parent
        gen = prompt[len(prompt) - g:] if g else []
        completion = list(req.completion_ids) if record_content else []
        sampled_mask = [bool(x) for x in (req.mask if req.mask is not None else [1] * len(completion))]
        mask = [False] * len(gen) + (sampled_mask if record_content else [])
        msg = _message(answer) if record_content else {"role": "assistant"}
        node = {**({"parent": parent} if parent is not None else {}), "message": msg, "sampled": True,
                "token_ids": gen + completion, "mask": mask, "is_content": [],
                "logprobs": _compact(list(req.logprobs), sampled_mask) if record_content else []}
        if ts is not None:
            node["timestamp"] = ts
        if advantage is not None and record_content:
            node["advantages"] = [advantage] * sum(sampled_mask)
        self.nodes.append(node)
        idx = len(self.nodes) - 1
        self.index[_key(parent, msg)] = idx
        return idx


def _tool(t: dict) -> dict:
    f = t["function"]
    return {"type": "function", "name": f["name"], "description": f.get("description"), "parameters": f["parameters"]}


def _score(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x  # orjson: NaN -> null


def episode_record(ep: Episode) -> dict:
    """One Episode line: one trace (the agent), its graph, calls, rewards, stop condition, timing."""
    tok = tok_of(ep)
    graph, calls = _Graph(tok), []
    messages = ep.messages()
    if not ep.content_recorded:  # capture off (the eval client): no token fields, the model's messages empty
        messages = [{"role": "assistant"} if m["role"] == "assistant" else m for m in messages]
    for i, req in ep.requests():
        if not ep.content_recorded:
            req = Request([], [], [], req.finish_reason, req.max_tokens, req.usage_output_tokens,
                          start=req.start, end=req.end)
        node = graph.turn(messages[:i], req, req.end, ep.advantage, messages[i], ep.content_recorded)
        time = {k: v for k, v in (("start", req.start), ("end", req.end)) if v is not None}
        call = {"node": node, "model": "matrix/tiny", "sampling": {"temperature": 1.0},
                "endpoint": "/chat/completions", "finish_reason": req.finish_reason,
                "usage": {"prompt_tokens": len(ep.turns[i].request.prompt_ids),
                          "completion_tokens": req.usage_output_tokens}}
        if req.max_tokens is not None:
            call["sampling"]["max_tokens"] = req.max_tokens
        if time:
            call["time"] = time
        calls.append(call)
    for k, t in enumerate(ep.turns):  # tool results stamped when the tool returned; a mask put on them
        if t.role == "tool":
            for n in graph.nodes:
                if n["message"] == _message(t.message) and not n["sampled"]:
                    if t.end is not None:
                        n.setdefault("timestamp", t.end)
                    if t.env_mask:
                        n["mask"] = [True] * len(n["token_ids"])
    last = max((i for i, _ in ep.requests()), default=-1)
    for t in ep.turns[last + 1:]:  # after the last model turn: in the conversation, not in any prompt
        graph.nodes.append({"parent": len(graph.nodes) - 1, "message": _message(t.message), "sampled": False,
                            "token_ids": [], "mask": [], "is_content": [], "logprobs": []})
    task = {"type": "MatrixTask", "data": {"prompt": ep.messages()[1]["content"]}, "key": ep.task,
            "hash": hashlib.sha256(ep.task.encode()).hexdigest()}
    errors = [{"type": "ToolError", "message": "the agent aborted"}] if ep.stop == "error" else []
    first_cap = next((r.max_tokens for _, r in ep.requests() if r.max_tokens is not None), None)
    trace = {
        "version": 1, "id": ep.id, "verifiers": {"version": "0.4.0"}, "task": task,
        "agent": {"config": {"model": "matrix/tiny", "sampling": {"temperature": 1.0, "max_tokens": first_cap},
                             "max_turns": ep.max_turns}, "name": "agent", "trainable": True},
        "tools": [_tool(t) for t in ep.tools], "nodes": graph.nodes, "calls": calls,
        "request_rewrites": [], "response_rewrites": [],
        "rewards": {"correct": {"score": _score(ep.reward), "weight": 1.0}}, "metrics": {}, "info": {},
        "extra_usage": [], "is_completed": True, "ok": not errors, "stop_condition": STOPS[ep.stop],
        "is_timeout": False, "errors": errors,
        "timing": {"start": min((r.start for _, r in ep.requests() if r.start is not None), default=None)},
    }
    record = {"id": f"{ep.id}-episode", "env": {"id": "matrix-v1"}, "task": task,
              "run": {"type": "train", "id": ep.run, "name": ep.run,
                      "work": {"type": "train", "step": ep.step}},
              "ok": not errors, "is_timeout": False, "errors": [], "traces": [trace]}
    if ep.group is not None:
        record["group"] = {"id": ep.group}
    return record


def _dumps(value) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def write(episodes: list[Episode], folder: Path) -> Path:
    step = episodes[0].step if episodes else 0
    path = folder / "rollouts" / f"step_{step}" / "train" / "effective" / "traces.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(_dumps(episode_record(ep)) + "\n" for ep in episodes))
    return path
