"""A demo script rendered into native nodes and calls: messages with toy token ids, loss masks,
behaviour logprobs, policy versions and timestamps."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from ingest.demo.scripts import MAX_TOKENS, MAX_TURNS, Turn
from ingest.demo.tasks import CALC_SYSTEM, EDIT_SYSTEM, CalcTask, EditTask
from ingest.demo.toy_tokenizer import IM_END, IM_START, ROLE_TOKEN, ToyTokenizer

MODEL = "rollscope/toy-agent-1b"
TEMPERATURE = 1.0


def _sampled_text(turn: Turn) -> str:
    """What the model sampled for `turn`, as one string (call ids are assigned by the server)."""
    parts = []
    if turn.reasoning:
        parts.append(f"<think>{turn.reasoning}</think>")
    if turn.content:
        parts.append(turn.content)
    for c in turn.calls:
        parts.append(f'<tool_call>{{"name": "{c.name}", "arguments": {c.arguments}}}</tool_call>')
    return "\n".join(parts)


def _prompt_node(tok: ToyTokenizer, role: str, message: dict[str, Any], parent: int | None, ts: float,
                 tokenized: bool = True) -> dict[str, Any]:
    if not tokenized:  # the environment message of a terminal step: nothing follows it
        return {"parent": parent, "message": message, "timestamp": ts}
    body = tok.encode(message.get("content") or "")
    ids = [IM_START, ROLE_TOKEN[role], *body, IM_END]
    n = len(body)
    return {"parent": parent, "message": message, "timestamp": ts, "token_ids": ids,
            "mask": [False] * len(ids), "is_content": [False, False] + [True] * n + [False],
            "logprobs": [None] * len(ids)}


def _logprobs(n: int, rate: float, rng: random.Random) -> list[float]:
    """Behaviour logprobs: mostly confident tokens, a heavy tail of unlikely ones."""
    ex = rng.expovariate
    return [-round(ex(rate) + 1e-4, 4) for _ in range(n)]


@dataclass
class Plan:
    task: CalcTask | EditTask
    ending: str
    detail: str
    turns: list[Turn]
    terminal_result: bool       # keep the last tool result as an untokenized terminal node
    correct: float
    fmt: float
    error: dict[str, Any] | None = None


def render_plan(plan: Plan, versions: list[int], t0: float, rate: float, rng: random.Random,
            tok: ToyTokenizer) -> dict[str, Any]:
    """Nodes, calls, timing and ending of one rollout (advantages are filled in later)."""
    task = plan.task
    system = CALC_SYSTEM if isinstance(task, CalcTask) else EDIT_SYSTEM
    nodes = [_prompt_node(tok, "system", {"role": "system", "content": system}, None, t0),
             _prompt_node(tok, "user", {"role": "user", "content": task.prompt}, 0, t0)]
    calls: list[dict[str, Any]] = []
    context = len(nodes[0]["token_ids"]) + len(nodes[1]["token_ids"])
    cached = len(nodes[0]["token_ids"])      # the system prompt is shared across the group
    clock = round(t0 + rng.uniform(0.01, 0.05), 3)
    model_s = tool_s = 0.0
    sampled_total = 0
    last_output = 0
    for ti, turn in enumerate(plan.turns):
        last_turn = ti == len(plan.turns) - 1
        call_ids = [f"call_{rng.getrandbits(40):010x}" for _ in turn.calls]
        body = tok.encode(_sampled_text(turn))
        if turn.finish == "length":
            body = body[:MAX_TOKENS]
        n = len(body)
        ids = [IM_START, ROLE_TOKEN["assistant"], *body, IM_END]
        version = versions[min(ti, len(versions) - 1)]
        input_tokens = context + 2
        latency = round(0.12 + 0.0002 * input_tokens + 0.016 * n + rng.uniform(0.0, 0.3), 3)
        start, clock = clock, round(clock + latency, 3)
        model_s += latency
        message: dict[str, Any] = {"role": "assistant", "content": turn.content}
        if turn.reasoning:
            message["reasoning_content"] = turn.reasoning
        if turn.calls:
            message["tool_calls"] = [{"id": cid, "name": c.name, "arguments": c.arguments}
                                     for c, cid in zip(turn.calls, call_ids)]
        lps = _logprobs(n, rate * (3.0 if turn.finish == "length" else 1.0), rng)
        nodes.append({"parent": len(nodes) - 1, "message": message, "sampled": True,
                      "timestamp": clock, "token_ids": ids,
                      "mask": [False, False] + [True] * n + [False],
                      "is_content": [False, False] + [True] * n + [False],
                      "logprobs": [None, None, *lps, None], "policy_version": version})
        calls.append({"node": len(nodes) - 1, "model": MODEL, "endpoint": "/chat/completions",
                      "sampling": {"temperature": TEMPERATURE, "max_tokens": MAX_TOKENS},
                      "finish_reason": turn.finish,
                      "usage": {"input_tokens": input_tokens, "output_tokens": n,
                                "cache_read_input_tokens": cached},
                      "time": {"start": start, "end": clock}, "policy_version": version})
        sampled_total += n
        last_output = n
        context += len(ids)
        cached = context
        if plan.error is not None and last_turn:
            # The sandbox dies while running the tool: no result is recorded.
            crash = round(rng.uniform(0.5, 8.0), 3)
            clock = round(clock + crash, 3)
            tool_s += crash
            break
        for c, cid in zip(turn.calls, call_ids):
            dur = round(rng.uniform(0.8, 4.0) if c.name == "run_tests" else rng.uniform(0.01, 0.12), 3)
            clock = round(clock + dur, 3)
            tool_s += dur
            msg = {"role": "tool", "content": c.result, "tool_call_id": cid, "name": c.name}
            terminal = last_turn and plan.terminal_result
            node = _prompt_node(tok, "tool", msg, len(nodes) - 1, clock, tokenized=not terminal)
            nodes.append(node)
            context += len(node.get("token_ids", ()))
    agent_end = clock
    timing: dict[str, Any] = {"start": t0, "agent": {"start": t0, "end": agent_end,
                                                     "model": {"duration": round(model_s, 3)},
                                                     "harness": {"duration": round(tool_s, 3)}}}
    end = agent_end
    if plan.error is None:
        end = round(agent_end + rng.uniform(0.05, 0.4), 3)
        timing["scoring"] = {"start": agent_end, "end": end}
    timing["end"] = end
    turns = len(plan.turns)
    n_tool_calls = sum(len(t.calls) for t in plan.turns)
    executed = plan.turns[:-1] if plan.error is not None else plan.turns
    tool_errors = sum(1 for t in executed for c in t.calls if c.result.startswith("Error:"))
    return {
        "nodes": nodes, "calls": calls, "timing": timing,
        "metrics": {"num_turns": float(turns), "num_tool_calls": float(n_tool_calls),
                    "output_tokens": float(sampled_total), "tool_errors": float(tool_errors)},
        "evidence": {"last_finish_reason": calls[-1]["finish_reason"], "output_tokens": sampled_total,
                     "last_output_tokens": last_output, "last_output_token_cap": MAX_TOKENS, "turns": turns,
                     "max_turns": MAX_TURNS},
    }
