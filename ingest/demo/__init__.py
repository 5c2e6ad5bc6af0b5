"""A synthetic, deterministic demo run in the native `rollscope/1` format.

`generate()` yields the rollouts of a small GRPO-style training run of a tool-using agent;
`write()` stores them as native JSONL. The run is fake but shaped like a real one, so every page
of the viewer has something to show: a reward curve that rises over training steps, groups with
mixed outcomes, every ending type (with a short sandbox-crash incident), token arrays with loss
masks, behaviour logprobs and errors-dropped GRPO advantages, a policy version that lags the
training step, and a few tool outputs carrying HTML (trace text is untrusted input; the viewer
must show it as text). docs/demo.md describes the model and its distributions.

Determinism: all randomness comes from one `random.Random(seed)`, drawn in a fixed order, and
all timestamps are offsets from a fixed epoch. The same arguments give a byte-identical file.
Token ids come from a toy word-level tokenizer (`ToyTokenizer`): words and punctuation (with
their leading space) hashed with CRC-32 into ids below 32000, stable across processes (Python's
`hash()` is salted; CRC-32 is not), with collisions resolved by probing in first-seen order.
`write()` also writes the run's vocabulary as a HuggingFace tokenizer.json, so the viewer can
show token text (`rollscope ingest RUN.jsonl --tokenizer RUN.tokenizer.json`).

Here: the training dynamics, `generate` and the writers. Beside it: `toy_tokenizer.py`, `tasks.py`
(the tasks and their arithmetic), `scripts.py` (one rollout's turns, `MAX_TURNS`, `MAX_TOKENS`),
`render.py` (a script → nodes and calls, `MODEL`).
"""
from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ingest.demo.render import Plan, render_plan
from ingest.demo.scripts import calc_script, edit_script, loop_script, runaway
from ingest.demo.tasks import CALC_TOOLS, EDIT_TOOLS, HTML_TASK, TASKS, CalcTask, EditTask, task_ref
from ingest.demo.toy_tokenizer import ToyTokenizer
from ingest.schema import SCHEMA_VERSION, Rollout

__all__ = ["generate", "write", "write_tokenizer", "tokenizer_path"]

RUN_NAME = "Demo GRPO run (synthetic)"
EPOCH = 1_767_225_600.0   # 2026-01-01T00:00:00Z: fixed, so timestamps never depend on the clock
STEP_SECONDS = 150.0      # wall-clock spacing of training steps

# --- the training dynamics -------------------------------------------------------------------

_STOP_CONDITION = {"submitted": "final_answer", "task_detected": "env_done", "truncated": "max_turns",
                   "length_cut": "max_output_tokens", "error": "error"}


def _success_curve(t: float) -> float:
    """Mean success probability at training progress t ∈ [0, 1]: 0.2 → 0.75, fast then slower."""
    k = 2.5
    return 0.2 + 0.55 * (1 - math.exp(-k * t)) / (1 - math.exp(-k))


def _incidents(steps: int, rng: random.Random) -> dict[int, float]:
    """A few steps where sandbox hosts fail: extra error probability per (bad-host) rollout."""
    out: dict[int, float] = {}
    window = range(steps // 5, steps - steps // 5)     # mid-run, so the chart's ends stay clean
    if steps < 3:
        return out
    for s in rng.sample(window, min(len(window), max(1, steps // 12))):
        peak = rng.uniform(0.45, 0.7)
        out[s] = max(out.get(s, 0.0), peak)
        if s + 1 < steps:
            out[s + 1] = max(out.get(s + 1, 0.0), peak / 2)
    return out


def _plan(task: CalcTask | EditTask, p_correct: float, p_err: float, t: float,
          rng: random.Random) -> Plan:
    """Draw one rollout: its ending first, then correctness and the conversation."""
    u = rng.random()
    p_len = 0.06 - 0.04 * t
    p_trunc = 0.12 - 0.08 * t
    fmt_ok = rng.random() < 0.75 + 0.22 * t
    is_calc = isinstance(task, CalcTask)
    if u < p_err:
        correct = rng.random() < p_correct
        turns, _ = (calc_script(task, correct, rng, fmt_ok) if is_calc
                    else edit_script(task, correct, rng, fmt_ok, detect=False))
        tool_turns = [i for i, tr in enumerate(turns) if tr.calls]
        if not tool_turns:
            turns = loop_script(task, rng)
            tool_turns = list(range(len(turns)))
        cut = rng.choice(tool_turns)
        crashed = turns[cut].calls[0].name
        if rng.random() < 0.8 or p_err > 0.2:
            detail, err = "sandbox_crash", {
                "type": "SandboxCrash", "message": f"sandbox exited with code 137 (host lost) while "
                f"running {crashed}"}
        else:
            detail, err = "tool_server_unavailable", {
                "type": "ToolServerError", "status_code": 503,
                "message": f"tool server returned 503 Service Unavailable for {crashed}"}
        return Plan(task, "error", detail, turns[:cut + 1], False, 0.0, 0.0, err)
    if u < p_err + p_len:
        correct = rng.random() < p_correct
        turns, _ = (calc_script(task, correct, rng, fmt_ok) if is_calc
                    else edit_script(task, correct, rng, fmt_ok, detect=False))
        cut = rng.randrange(len(turns))
        return Plan(task, "length_cut", "max_output_tokens", turns[:cut] + [runaway(task)],
                     False, 0.0, 0.0)
    if u < p_err + p_len + p_trunc:
        # Scored by the task's normal scorer on the final state: a file fix may already be in.
        fixed = not is_calc and rng.random() < 0.3 * p_correct
        return Plan(task, "truncated", "max_turns", loop_script(task, rng, fixed), True,
                     1.0 if fixed else 0.0, 0.0)
    correct = rng.random() < p_correct
    if is_calc:
        turns, malformed = calc_script(task, correct, rng, fmt_ok)
        return Plan(task, "submitted", "final_answer", turns, False, float(correct),
                     float(fmt_ok and not malformed))
    detect = rng.random() < (0.5 if correct else 0.12)
    turns, malformed = edit_script(task, correct, rng, fmt_ok, detect=detect)
    if detect:
        return Plan(task, "task_detected", "goal_reached" if correct else "unrecoverable_state",
                     turns, True, float(correct), float(not malformed))
    return Plan(task, "submitted", "final_answer", turns, False, float(correct),
                 float(fmt_ok and not malformed))


def _versions(step: int, n_turns: int, rng: random.Random) -> list[int]:
    """Policy version per call: the step, or one behind (async RL), syncing mid-rollout sometimes."""
    if step == 0 or rng.random() < 0.4:
        return [step] * n_turns
    if n_turns > 1 and rng.random() < 0.25:
        sync = rng.randrange(1, n_turns)
        return [step - 1] * sync + [step] * (n_turns - sync)
    return [step - 1] * n_turns


def generate(*, run_id: str = "demo-grpo", steps: int = 30, groups: int = 8, group_size: int = 8,
             seed: int = 0, tokenizer: ToyTokenizer | None = None) -> Iterator[Rollout]:
    """Yield the rollouts of a synthetic GRPO run, step by step, group by group.

    Rollout ids are `s{step:03d}-g{group}-r{index}`; groups are `s{step:03d}-g{group}`. Advantages
    use the errors-dropped baseline: reward minus the mean reward of the group's non-error
    rollouts; error rollouts get none.

    Token ids come from `tokenizer` (a fresh `ToyTokenizer` if not given); pass one to get the
    run's vocabulary afterwards (`tokenizer.to_json()`), as `write` does.
    """
    if steps < 0 or groups < 1 or group_size < 1:
        raise ValueError("steps must be >= 0, groups and group_size >= 1")
    rng = random.Random(seed)
    tok = tokenizer if tokenizer is not None else ToyTokenizer()
    run = {"id": run_id, "name": RUN_NAME, "type": "train"}
    incidents = _incidents(steps, rng)
    weights = [t.weight for t in TASKS]
    for s in range(steps):
        t = s / (steps - 1) if steps > 1 else 0.0
        base = _success_curve(t) + rng.gauss(0.0, 0.025)
        rate = 3.0 + 4.0 * t                  # sharper policy later: logprobs closer to 0
        step_t0 = EPOCH + s * STEP_SECONDS
        for g in range(groups):
            task = TASKS[rng.choices(range(len(TASKS)), weights)[0]]
            if s == 0 and g == groups - 1:
                task = HTML_TASK             # every run shows the hostile-HTML case
            p_correct = min(0.97, max(0.03, base + task.difficulty))
            bad_host = s in incidents and rng.random() < 0.5
            p_err = 0.025 + (incidents[s] if bad_host else 0.0)
            group_id = f"s{s:03d}-g{g}"
            records = []
            for i in range(group_size):
                plan = _plan(task, p_correct, p_err, t, rng)
                rid = f"{group_id}-r{i}"
                versions = _versions(s, len(plan.turns), rng)
                t0 = round(step_t0 + rng.uniform(0.0, 6.0), 3)
                body = render_plan(plan, versions, t0, rate, rng, tok)
                reward = round(plan.correct * 1.0 + plan.fmt * 0.1, 6)
                record = {
                    "schema": SCHEMA_VERSION, "id": rid, "run": run, "step": s,
                    "policy": {"start": versions[0], "end": versions[-1]},
                    "group": {"id": group_id, "index": i, "size": group_size},
                    "task": task_ref(task),
                    "tools": CALC_TOOLS if isinstance(task, CalcTask) else EDIT_TOOLS,
                    "nodes": body["nodes"], "calls": body["calls"],
                    "rewards": {"correct": {"score": plan.correct, "weight": 1.0},
                                "format": {"score": plan.fmt, "weight": 0.1}},
                    "reward": reward, "metrics": body["metrics"],
                    "stop_condition": _STOP_CONDITION[plan.ending],
                    "ending": {"type": plan.ending, "detail": plan.detail,
                               "message": plan.error["message"] if plan.error else None,
                               "evidence": body["evidence"]},
                    "errors": [plan.error] if plan.error else [],
                    "timing": body["timing"],
                }
                records.append(record)
            _assign_advantages(records)
            for record in records:
                yield Rollout.model_validate(record)


def _assign_advantages(records: list[dict[str, Any]]) -> None:
    """GRPO advantages with errored rollouts dropped from the baseline, on sampled tokens only."""
    kept = [r["reward"] for r in records if r["ending"]["type"] != "error"]
    if not kept:
        return
    baseline = sum(kept) / len(kept)
    for r in records:
        if r["ending"]["type"] == "error":
            continue
        adv = round(r["reward"] - baseline, 6)
        r["metrics"]["advantage"] = adv
        for node in r["nodes"]:
            if node.get("sampled"):
                node["advantages"] = [adv if m else None for m in node["mask"]]


def tokenizer_path(path: str | Path) -> Path:
    """Where `write(path)` puts the run's tokenizer: `X.jsonl` → `X.tokenizer.json` beside it."""
    p = Path(path)
    stem = p.name[: -len(".jsonl")] if p.name.endswith(".jsonl") else p.name
    return p.with_name(f"{stem}.tokenizer.json")


def write(path: str | Path, *, tokenizer: str | Path | bool = True, **kw: Any) -> int:
    """Write `generate(**kw)` to `path` as native JSONL; return the number of rollouts.

    tokenizer: also write the run's HuggingFace tokenizer.json (every id of the run → its piece;
        give it to `rollscope ingest --tokenizer`): `True` → `tokenizer_path(path)`, a path →
        there, `False` → not at all.
    """
    from ingest.formats.native import write_line

    tok = ToyTokenizer()
    n = 0
    with open(path, "wb") as f:
        for rollout in generate(tokenizer=tok, **kw):
            f.write(write_line(rollout))
            n += 1
    if tokenizer is not False:
        tok.write(tokenizer_path(path) if tokenizer is True else tokenizer)
    return n


def write_tokenizer(path: str | Path, **kw: Any) -> Path:
    """Write only the tokenizer.json of the run `generate(**kw)` (it generates the run again);
    byte-identical to the one `write(..., **kw)` writes. Returns `path`."""
    tok = ToyTokenizer()
    for _ in generate(tokenizer=tok, **kw):
        pass
    tok.write(path)
    return Path(path)
