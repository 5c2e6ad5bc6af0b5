"""The ATIF writer's converter: one rollout → one ATIF-v1.7 trajectory (`to_trajectory`), which
the `atif` reader (`ingest/formats/atif.py`) reads back exactly."""
from __future__ import annotations

from typing import Any

from ingest.formats import _openai, _rl
from ingest.schema import Rollout


def _iso(ts: float | None) -> str | None:
    from datetime import datetime, timezone

    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat()


def _atif_tool_call(tc: Any, i: int, k: int) -> dict:
    """ATIF wants an arguments object: a raw string that is one is parsed; otherwise `{}` with
    the raw text (and the id, when the source had none) under `extra.rollscope`."""
    parsed = _openai.parse_arguments(tc.arguments)
    out: dict[str, Any] = {"tool_call_id": tc.id if tc.id is not None else f"call_{i}_{k}", "function_name": tc.name,
                           "arguments": parsed.value if parsed.shape == "object" else {}}
    out["extra"] = {"rollscope": {"arguments": tc.arguments, "id": tc.id, "tool_call_extra": tc.extra}}
    return out


def _step_rl(n: Any) -> dict:
    rl = _rl.node_fields(n)
    if n.message.content is None:
        rl["content_null"] = True
    if n.message.name is not None:
        rl["message_name"] = n.message.name
    if n.message.reasoning_content is not None and n.message.role != "assistant":
        rl["reasoning_content"] = n.message.reasoning_content
    if n.message.role == "tool" and n.message.tool_call_id is None:
        # A result that names no call (text-action agents: SWE-agent, mini-swe-agent): ATIF's
        # `source_call_id` is null, which reads as a user message; keep it a tool result.
        rl["message_role"] = "tool"
    return rl


def to_trajectory(r: Rollout) -> dict[str, Any]:
    """One rollout as an ATIF-v1.7 trajectory (Harbor RFC 0001): one agent step per assistant
    node with its tool calls, the tool results that follow it folded into its observation, and
    `metrics.prompt_token_ids` (the full prompt: the tokens of the path before the node) /
    `completion_token_ids` / `logprobs`; system and user nodes as their own steps. What ATIF has
    no field for (run, step, group, mask, advantages, ending, the exact raw tool-call text, branch
    parents...) goes under `extra.rollscope` (ingest/formats/_rl.py) at trajectory, step and
    result level, so reading the file back loses nothing."""
    nodes = r.nodes
    prefix: list[list[int]] = []
    for n in nodes:  # tokens of the path before each node
        before = prefix[n.parent] + nodes[n.parent].token_ids if n.parent is not None else []
        prefix.append(before)
    calls_by_node = {c.node: c for c in r.calls if c.node is not None}
    steps: list[dict] = []
    folded: set[int] = set()
    for i, n in enumerate(nodes):
        if i in folded:
            continue
        m = n.message
        step: dict[str, Any] = {"step_id": len(steps) + 1}
        if n.timestamp is not None:
            step["timestamp"] = _iso(n.timestamp)
        text = m.content if m.content is not None else ""
        if m.role == "assistant":
            step.update(source="agent", message=text)
            call = calls_by_node.get(i)
            if call is not None and call.model:
                step["model_name"] = call.model
            if m.reasoning_content is not None:
                step["reasoning_content"] = m.reasoning_content
            if m.tool_calls:
                step["tool_calls"] = [_atif_tool_call(tc, i, k) for k, tc in enumerate(m.tool_calls)]
            metrics: dict[str, Any] = {}
            if call is not None and call.usage is not None:
                if call.usage.input_tokens is not None:
                    metrics["prompt_tokens"] = call.usage.input_tokens
                if call.usage.output_tokens is not None:
                    metrics["completion_tokens"] = call.usage.output_tokens
                if call.usage.cache_read_input_tokens is not None:
                    metrics["cached_tokens"] = call.usage.cache_read_input_tokens
            if n.token_ids and n.sampled:
                metrics["prompt_token_ids"] = prefix[i]
                metrics["completion_token_ids"] = list(n.token_ids)
                if n.logprobs:
                    metrics["logprobs"] = list(n.logprobs)
            if metrics:
                step["metrics"] = metrics
            step["llm_call_count"] = 1 if n.sampled else 0
            results = []
            j = i + 1
            while j < len(nodes) and nodes[j].message.role == "tool" and nodes[j].parent == j - 1:
                results.append(_atif_result(nodes[j]))
                folded.add(j)
                j += 1
            if results:
                step["observation"] = {"results": results}
        elif m.role == "tool":  # a tool result not right after its call: carried by a system step
            step.update(source="system", message="", observation={"results": [_atif_result(n)]})
            step["extra"] = {"rollscope": {"carrier": True}}
            steps.append(step)
            continue
        else:
            step.update(source="system" if m.role == "system" else "user", message=text)
        step["extra"] = {"rollscope": _step_rl(n)}
        steps.append(step)
    model = next((c.model for c in r.calls if c.model), None)
    agent: dict[str, Any] = {"name": r.episode.agent if r.episode else "agent", "version": "rollscope/1"}
    if model:
        agent["model_name"] = model
    if r.tools:
        agent["tool_definitions"] = r.tools
    usage = [c.usage for c in r.calls if c.usage is not None]
    final: dict[str, Any] = {"total_steps": len(steps)}
    if usage and all(u.input_tokens is not None for u in usage):
        final["total_prompt_tokens"] = sum(u.input_tokens for u in usage)  # type: ignore[misc]
    if usage and all(u.output_tokens is not None for u in usage):
        final["total_completion_tokens"] = sum(u.output_tokens for u in usage)  # type: ignore[misc]
    return {
        "schema_version": "ATIF-v1.7",
        "session_id": r.episode.id if r.episode else r.id,
        "trajectory_id": r.id,
        "agent": agent,
        "steps": steps,
        "final_metrics": final,
        "extra": {"rollscope": _rl.envelope(r, calls=True)},
    }


def _atif_result(n: Any) -> dict:
    out: dict[str, Any] = {"source_call_id": n.message.tool_call_id,
                           "content": n.message.content if n.message.content is not None else ""}
    out["extra"] = {"rollscope": _step_rl(n)}
    return out
