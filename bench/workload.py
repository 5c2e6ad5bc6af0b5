"""The benchmark workload of issue 6: agentic GRPO rollouts of 20 turns and about 8k tokens each,
with token ids, loss masks and behaviour logprobs, as native JSONL.

Each rollout: a system and a user prompt, then 20 turns of (assistant with a tool call, tool
result); the last assistant turn answers. Tokens are split ~45% sampled (mask 1, logprobs) and
~55% prompt / tool (mask 0, no logprobs). Groups of 8 per step, deterministic for a seed.

    .venv/bin/python bench/workload.py OUT.jsonl [N]
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import orjson

TURNS = 20
TOKENS = 8192
GROUP = 8


def rollout(k: int, rng: np.random.Generator, run: str = "bench") -> dict:
    """One rollout as a native record (`rollscope/1`), rollout number `k`."""
    per_turn = TOKENS // (2 * TURNS + 2)
    nodes: list[dict] = []

    def node(role: str, text: str, n: int, sampled: bool, **msg) -> None:
        ids = rng.integers(10, 150_000, n).tolist()
        nd = {"parent": len(nodes) - 1 if nodes else None, "message": {"role": role, "content": text, **msg},
              "sampled": sampled, "token_ids": ids, "mask": [1 if sampled else 0] * n}
        if sampled:
            nd["logprobs"] = np.round(-rng.exponential(0.4, n), 4).tolist()
        nodes.append(nd)

    node("system", "You are an agent that solves tasks with the shell tool.", per_turn, False)
    node("user", f"Task {k // GROUP}: fix the failing test in repo {k // GROUP % 97}.", per_turn, False)
    for t in range(TURNS):
        last = t == TURNS - 1
        calls = [] if last else [{"id": f"call_{t}", "name": "shell",
                                  "arguments": f'{{"cmd": "pytest -x tests/t{t}.py"}}'}]
        node("assistant", f"Step {t}: running the tests again." if not last else "Done: the test passes.",
             per_turn, True, **({"tool_calls": calls} if calls else {}))
        if not last:
            node("tool", f"collected {t + 3} items ... {'F' * (t % 4)}{'.' * 3}", per_turn, False,
                 tool_call_id=f"call_{t}")
    return {"schema": "rollscope/1", "id": f"r{k:06d}", "run": {"id": run}, "step": k // (GROUP * 4),
            "group": {"id": f"g{k // GROUP}", "index": k % GROUP}, "nodes": nodes,
            "reward": float(rng.random() < 0.4), "ending": {"type": "submitted"}}


def text_rollout(k: int, rng: np.random.Generator, turns: int = TURNS, run: str = "bench-text") -> dict:
    """One text-only rollout (the peers' workload, as Trackio logs traces): a system and a user
    prompt, then `turns` turns of (assistant with a tool call, tool result), the last assistant
    turn answering; messages and tool calls only, no token arrays."""
    nodes: list[dict] = []

    def node(role: str, text: str, **msg) -> None:
        nodes.append({"parent": len(nodes) - 1 if nodes else None,
                      "message": {"role": role, "content": text, **msg}, "sampled": role == "assistant"})

    node("system", "You are an agent that solves tasks with the shell tool.")
    node("user", f"Task {k // GROUP}: fix the failing test in repo {k // GROUP % 97}.")
    for t in range(turns):
        last = t == turns - 1
        calls = [] if last else [{"id": f"call_{t}", "name": "shell",
                                  "arguments": f'{{"cmd": "pytest -x tests/t{t}.py"}}'}]
        node("assistant", f"Step {t}: running the tests again ({rng.integers(1000)})." if not last
             else "Done: the test passes.", **({"tool_calls": calls} if calls else {}))
        if not last:
            node("tool", f"collected {t + 3} items ... {'F' * (t % 4)}{'.' * 3}", tool_call_id=f"call_{t}")
    return {"schema": "rollscope/1", "id": f"t{k:06d}", "run": {"id": run}, "step": k // (GROUP * 4),
            "group": {"id": f"g{k // GROUP}", "index": k % GROUP}, "nodes": nodes,
            "reward": float(rng.random() < 0.4), "ending": {"type": "submitted"}}


def write_text(path: Path, n: int, turns: int = TURNS, seed: int = 0, start: int = 0) -> Path:
    """`n` text-only rollouts of `turns` turns (`text_rollout`) into `path` (native JSONL)."""
    rng = np.random.default_rng(seed)
    with path.open("wb") as f:
        for k in range(start, start + n):
            f.write(orjson.dumps(text_rollout(k, rng, turns), option=orjson.OPT_APPEND_NEWLINE))
    return path


def write(path: Path, n: int, seed: int = 0, start: int = 0) -> Path:
    """`n` rollouts numbered from `start` into `path` (native JSONL)."""
    rng = np.random.default_rng(seed)
    with path.open("wb") as f:
        for k in range(start, start + n):
            f.write(orjson.dumps(rollout(k, rng), option=orjson.OPT_APPEND_NEWLINE))
    return path


if __name__ == "__main__":
    write(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
