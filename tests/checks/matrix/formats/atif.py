"""ATIF-v1.7 (Harbor RFC 0001, /work/shared/formats-reference.md §2; ingest/formats/atif.py), as a
Harbor trial writes it: `<trial>/agent/trajectory.json` and the verifier's reward in
`<trial>/result.json` (`verifier_result.rewards`), one trial per rollout.

The shape is copied from tests/fixtures/realdata/atif/multi_tool.trajectory.json: `system`/`user`
steps; one `agent` step per model call with `message`, `reasoning_content`, `tool_calls`
(`tool_call_id`, `function_name`, `arguments` as an object), the call's tool results in the same
step's `observation.results[]` (`source_call_id`, `content`), and `metrics` with `prompt_tokens`,
`completion_tokens`, `prompt_token_ids` (the full prompt, v1.4), `completion_token_ids` (v1.3),
`logprobs` and, in `metrics.extra`, the `finish_reason` (where verifiers-built files keep it);
`final_metrics.extra.stop_condition` says how the episode stopped.

What ATIF has no field for (RFC: no reward, advantage, loss mask, stop reason, step, group, sampling
parameters): loss masks, env tokens other than through the next prompt, a trainer logprob array,
`max_tokens`, token bytes, group, advantages, the training step. A step has one `timestamp`, so a
call has no start and end. Arguments that are not a JSON object are written as the raw string (the
reader's loosened schema keeps it; Harbor's own model would refuse the file)."""
from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

from tests.checks.matrix.episode import Episode

NAME = "atif"
CARRIES = frozenset({"token_ids", "prompt_ids", "logprobs", "finish_reason", "usage", "reasoning",
                     "tool_calls", "tools", "reward", "parallel_arrays"})
STOPS = {"completed": "agent_completed", "max_turns": "max_turns_reached", "error": "error"}


def _iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, tz=timezone.utc).isoformat()


def _arguments(raw: str):
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, dict) else raw


def _steps(ep: Episode) -> list[dict]:
    steps: list[dict] = []
    for turn in ep.turns:
        m, req = turn.message, turn.request
        if m["role"] in ("system", "user"):
            steps.append({"step_id": len(steps) + 1, "source": m["role"], "message": m.get("content") or ""})
        elif m["role"] == "assistant":
            step: dict = {"step_id": len(steps) + 1, "timestamp": _iso(req.end if req else None), "source": "agent",
                          "model_name": "fake/tiny-qwen3", "message": m.get("content") or ""}
            if m.get("reasoning_content"):
                step["reasoning_content"] = m["reasoning_content"]
            if m.get("tool_calls"):
                step["tool_calls"] = [{"tool_call_id": c["id"], "function_name": c["function"]["name"],
                                       "arguments": _arguments(c["function"]["arguments"])} for c in m["tool_calls"]]
            if req is not None:
                metrics = {"prompt_tokens": len(req.prompt_ids), "completion_tokens": req.usage_output_tokens,
                           "prompt_token_ids": list(req.prompt_ids)}
                if ep.content_recorded:
                    metrics |= {"completion_token_ids": list(req.completion_ids), "logprobs": list(req.logprobs)}
                else:
                    step["message"] = ""
                    step.pop("tool_calls", None)
                    step.pop("reasoning_content", None)
                metrics["extra"] = {"finish_reason": req.finish_reason}
                step["metrics"] = metrics
                step["llm_call_count"] = 1
            steps.append(step)
        elif m["role"] == "tool":
            agent = next(s for s in reversed(steps) if s["source"] == "agent")
            result = {"source_call_id": m.get("tool_call_id"), "content": m.get("content")}
            agent.setdefault("observation", {"results": []})["results"].append(result)
    return steps


def trajectory(ep: Episode) -> dict:
    steps = _steps(ep)
    prompt = sum(s.get("metrics", {}).get("prompt_tokens", 0) for s in steps)
    completion = sum(s.get("metrics", {}).get("completion_tokens", 0) for s in steps)
    return {"schema_version": "ATIF-v1.7", "session_id": f"session-{ep.id}", "trajectory_id": ep.id,
            "agent": {"name": "matrix-agent", "version": "1.0.0", "model_name": "fake/tiny-qwen3",
                      "tool_definitions": list(ep.tools)},
            "steps": steps,
            "final_metrics": {"total_prompt_tokens": prompt, "total_completion_tokens": completion,
                              "total_steps": len(steps), "extra": {"stop_condition": STOPS[ep.stop]}}}


def write(episodes: list[Episode], folder: Path) -> Path:
    for ep in episodes:
        trial = folder / ep.id
        (trial / "agent").mkdir(parents=True, exist_ok=True)
        (trial / "agent" / "trajectory.json").write_text(json.dumps(trajectory(ep), indent=2))
        result = {"trial_name": ep.id, "task_name": ep.task, "verifier_result": None}
        if ep.reward is not None:  # Python's json writes a NaN reward as the bare NaN literal
            result["verifier_result"] = {"rewards": {"reward": ep.reward if not math.isnan(ep.reward) else math.nan}}
        (trial / "result.json").write_text(json.dumps(result, indent=2))
    return folder
