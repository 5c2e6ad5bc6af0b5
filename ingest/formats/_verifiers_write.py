"""The verifiers writer's converter: one rollout → one verifiers v1 Episode record
(`to_episode`), which the `verifiers` reader (`ingest/formats/verifiers.py`) reads back."""
from __future__ import annotations

from typing import Any

from ingest import endings
from ingest.formats import _rl
from ingest.formats._verifiers_arrays import COMPACT, compact
from ingest.schema import Node, Rollout


def _vf_message(n: Node) -> dict:
    m = n.message
    out: dict[str, Any] = {"role": m.role}
    if m.content is not None:
        out["content"] = m.content
    if m.reasoning_content is not None:
        out["reasoning_content"] = m.reasoning_content
    if m.tool_calls:
        out["tool_calls"] = [{"id": tc.id, "type": "function", "name": tc.name, "arguments": tc.arguments}
                             for tc in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        out["name"] = m.name
    return out


def _vf_node(n: Node) -> dict:
    out: dict[str, Any] = {}
    if n.parent is not None:
        out["parent"] = n.parent
    out.update(message=_vf_message(n), sampled=n.sampled, token_ids=list(n.token_ids), mask=list(n.mask),
               is_content=list(n.is_content), logprobs=compact(n, n.logprobs) if n.logprobs else [])
    if n.timestamp is not None:
        out["timestamp"] = n.timestamp
    for name in ("advantages", "reference_logprobs"):
        values = getattr(n, name)
        if values is not None:
            out[name] = compact(n, values)
    if n.loss_weights is not None:
        out["loss_weights"] = n.loss_weights
    return out


def _vf_call(c: Any) -> dict:
    out: dict[str, Any] = {"node": c.node}
    for key in ("model", "endpoint", "sampling"):
        if getattr(c, key) is not None:
            out[key] = getattr(c, key)
    out["finish_reason"] = c.finish_reason_raw or c.finish_reason
    if c.usage is not None:
        u = c.usage
        usage = dict(u.extra)
        if u.input_tokens is not None:
            usage["prompt_tokens"] = u.input_tokens - (u.cache_read_input_tokens or 0)
        for src, dst in (("output_tokens", "completion_tokens"), ("cache_read_input_tokens", "cached_input_tokens"),
                         ("reasoning_output_tokens", "reasoning_tokens"), ("cost", "cost")):
            if getattr(u, src) is not None:
                usage[dst] = getattr(u, src)
        out["usage"] = usage
    if c.time is not None:
        out["time"] = c.time.to_json_dict()
    if c.error is not None:
        out["error"] = c.error.to_json_dict()
    out.update(c.extra)
    return out


def _rl_node(n: Node) -> dict:
    """What a verifiers node cannot hold: extras, per-node RL fields, and any per-token array
    with values at positions the mask leaves out (verifiers keeps only sampled positions)."""
    fields = {k: v for k, v in _rl.node_fields(n).items()
              if k in ("policy_version", "reward", "mc_return", "node_extra", "message_extra")}
    for name in COMPACT:
        values = getattr(n, name)
        if values and (not any(n.mask) or any(v is not None and not m for v, m in zip(values, n.mask))):
            fields[name] = values  # the compact form would not give these back
    if n.message.tool_calls and any(tc.extra for tc in n.message.tool_calls):
        fields["tool_call_extras"] = [tc.extra for tc in n.message.tool_calls]
    return fields


def to_episode(r: Rollout) -> dict[str, Any]:
    """One rollout as a verifiers `Episode.to_record()` with one trace: the graph, calls, rewards,
    stop condition, errors and timing in verifiers' own fields (logprobs, advantages and reference
    logprobs compacted to the sampled tokens; `prompt_tokens` without cache reads); what verifiers
    has no field for (attempt, group index, ending, node extras...) in `trace.info.rollscope`
    (ingest/formats/_rl.py), which this reader reads back."""

    ep_extra = r.extra.get("episode") if isinstance(r.extra.get("episode"), dict) else {}
    task = r.task.to_json_dict() if r.task else None
    info = dict(r.extra.get("info") or {}) if isinstance(r.extra.get("info"), dict) else {}
    info["rollscope"] = {**_rl.envelope(r), "nodes": [_rl_node(n) for n in r.nodes]}
    trace: dict[str, Any] = {
        "version": r.extra.get("trace_version", 1), "id": r.id,
        "agent": r.extra.get("agent") or {"name": r.episode.agent if r.episode else "agent",
                                          "trainable": r.episode.trainable if r.episode else True},
        "tools": r.tools, "nodes": [_vf_node(n) for n in r.nodes], "calls": [_vf_call(c) for c in r.calls],
        "rewards": {k: (None if v is None else v.to_json_dict()) for k, v in r.rewards.items()
                    if not (v is not None and v.extra.get("metric") is True and k in r.metrics)},  # in `metrics`
        "metrics": r.metrics, "info": info,
        "errors": [e.to_json_dict() for e in r.errors], "timing": r.timing,
    }
    if "verifiers" in r.extra:
        trace["verifiers"] = r.extra["verifiers"]
    if task is not None:
        trace["task"] = task
    if r.stop_condition is not None:
        trace["stop_condition"] = r.stop_condition
    run: dict[str, Any] = {"type": r.run.type, "id": r.run.id}
    if r.run.name:
        run["name"] = r.run.name
    if r.step is not None or r.policy is not None:
        run["work"] = {"type": r.run.type, "step": r.step}
        if r.policy is not None:
            run["work"]["policy"] = r.policy.to_json_dict()
    episode: dict[str, Any] = {
        "id": r.episode.id if r.episode else r.id,
        "env": ep_extra.get("env") or {"id": r.run.id},
        "run": run, "ok": not r.errors and r.ending.type != endings.Ending.error,
        "errors": ep_extra.get("errors") or [], "traces": [trace],
    }
    if task is not None:
        episode["task"] = task
    if r.group is not None:
        episode["group"] = {"id": r.group.id}
    return episode
