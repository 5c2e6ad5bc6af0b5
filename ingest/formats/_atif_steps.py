"""ATIF steps → nodes, for the `atif` reader (`ingest/formats/atif.py`, whose docstring gives the
rules): `add_steps` places one trajectory's steps (and, through their observations, tool results
and subagent trajectories) on a `RolloutBuilder`."""
from __future__ import annotations

from typing import Any

from ingest import timestamps
from ingest.fields import is_number_or_none
from ingest.formats import _openai, _rl
from ingest.formats._atif_schema import ATIFResult, ATIFToolCall, ATIFTrajectory
from ingest.formats._build import RolloutBuilder
from ingest.schema import Message, Usage


def add_steps(b: RolloutBuilder, t: ATIFTrajectory, raw: dict, *, segment: int, parent: Any = None) -> None:
    """Append one trajectory's steps (and its embedded subagents, as branches) to `b`."""
    subagents = {s.trajectory_id: (s, r) for s, r in zip(t.subagent_trajectories or [],
                                                          raw.get("subagent_trajectories") or [])}
    placed: set[str | None] = set()
    if parent is not None:
        b._last = parent
    for k, (step, sraw) in enumerate(zip(t.steps, raw.get("steps") or [])):
        path = f"steps[{k}]"
        srl = sraw.get("extra", {}).get("rollscope") if isinstance(sraw.get("extra"), dict) else None
        srl = srl if isinstance(srl, dict) else {}
        node_extra: dict[str, Any] = {"step_id": step.step_id}
        if segment:
            node_extra["segment"] = segment
        step_extra = {key: v for key, v in sraw.items() if key not in (
            "step_id", "timestamp", "source", "message", "model_name", "reasoning_effort", "reasoning_content",
            "tool_calls", "observation", "metrics", "llm_call_count", "assistant_tokens", "assistant_masks",
            "logprobs", "env_tokens", "env_masks", "reward", "mc_return", "policy_version")}
        if isinstance(step_extra.get("extra"), dict):
            cm = step_extra["extra"].get("context_management")
            if isinstance(cm, dict):  # compaction / pruning / injection: the graph's node kind reads it here
                node_extra["context_management"] = cm
            step_extra["extra"] = {kk: v for kk, v in step_extra["extra"].items()
                                   if kk not in ("rollscope", "context_management")} or None
            if step_extra["extra"] is None:
                del step_extra["extra"]
        if step_extra:
            node_extra["step"] = step_extra
        ts = None
        if step.timestamp is not None:
            stamp = timestamps.to_epoch(step.timestamp, f"{path}.timestamp")
            ts = stamp.epoch
            if stamp.assumed_utc:
                node_extra["timestamp_assumed_utc"] = True
        reward = sraw.get("reward") if is_number_or_none(sraw.get("reward")) else None
        mc_return = sraw.get("mc_return") if is_number_or_none(sraw.get("mc_return")) else None
        pv = sraw.get("policy_version") if isinstance(sraw.get("policy_version"), int) else None
        if step.source == "agent":
            calls = [_tool_call(tc) for tc in step.tool_calls or []]
            msg = Message(role="assistant", content=_content(step.message) if step.message != "" or not calls else None,
                          reasoning_content=step.reasoning_content, tool_calls=calls or None)
            if step.message == "" and not calls:
                msg.content = ""
            sampled = step.llm_call_count != 0
            m = step.metrics
            tunix_tokens = sraw.get("assistant_tokens")
            if srl:
                idx = b.add(msg, sampled=sampled, timestamp=ts, extra=node_extra)
            elif sampled and m is not None and (m.prompt_token_ids or m.completion_token_ids is not None):
                idx = b.request(msg, m.prompt_token_ids, m.completion_token_ids, m.logprobs, timestamp=ts,
                                extra=node_extra)
            else:
                idx = b.add(msg, tunix_tokens if isinstance(tunix_tokens, list) else None, sampled=sampled,
                            mask=sraw.get("assistant_masks") if isinstance(tunix_tokens, list) else None,
                            logprobs=sraw.get("logprobs") if isinstance(tunix_tokens, list) else None,
                            timestamp=ts, extra=node_extra)
            node = b.nodes[idx]
            node.reward, node.mc_return = reward, mc_return
            if pv is not None:
                node.policy_version = pv
            _apply_node_rl(node, srl)
            if step.is_copied_context:
                node.mask = [False] * len(node.token_ids)
            if sampled and not srl:
                usage = None
                if m is not None and (m.prompt_tokens is not None or m.completion_tokens is not None):
                    usage = Usage(input_tokens=m.prompt_tokens, output_tokens=m.completion_tokens,
                                  cache_read_input_tokens=m.cached_tokens, cost=m.cost_usd)
                finish = (m.model_extra or {}).get("extra", {}).get("finish_reason") if m is not None else None
                sampling = {"reasoning_effort": step.reasoning_effort} if step.reasoning_effort is not None else None
                call_rl = srl.get("call") if isinstance(srl.get("call"), dict) else {}
                b.call(idx, finish if isinstance(finish, str) else call_rl.get("finish_reason_raw"), usage,
                       model=step.model_name, sampling=sampling or call_rl.get("sampling"),
                       **{k2: v for k2, v in call_rl.items() if k2 in ("endpoint", "policy_version")})
            for j, res in enumerate(step.observation.results if step.observation else []):
                _result(b, res, f"{path}.observation.results[{j}]", subagents, placed, segment, called=bool(calls))
        elif srl.get("carrier"):  # a step written only to carry a tool result (see to_trajectory)
            for j, res in enumerate(step.observation.results if step.observation else []):
                _result(b, res, f"{path}.observation.results[{j}]", subagents, placed, segment)
        else:
            role = "system" if step.source == "system" else "user"
            env_tokens = sraw.get("env_tokens")
            idx = b.add(Message(role=role, content=_content(step.message)),
                        env_tokens if isinstance(env_tokens, list) else None,
                        mask=sraw.get("env_masks") if isinstance(env_tokens, list) else None,
                        timestamp=ts, extra=node_extra)
            b.nodes[idx].reward, b.nodes[idx].mc_return = reward, mc_return
            _apply_node_rl(b.nodes[idx], srl)
            for j, res in enumerate(step.observation.results if step.observation else []):
                _result(b, res, f"{path}.observation.results[{j}]", subagents, placed, segment)
    for tid, (sub, sraw) in subagents.items():
        if tid not in placed:  # not referred to by any step: a branch from the root
            saved = b.last
            add_steps(b, sub, sraw, segment=segment, parent=None)
            b.nodes[len(b.nodes) - len(sub.steps)].extra["subagent"] = tid
            b._last = saved


def _apply_node_rl(node: Any, srl: dict) -> None:
    """Per-step `extra.rollscope` from Rollscope's ATIF export: the node's own fields, exactly."""
    _rl.apply_node(node, srl)
    if srl.get("content_null"):
        node.message.content = None
    if isinstance(srl.get("message_name"), str):
        node.message.name = srl["message_name"]
    if isinstance(srl.get("reasoning_content"), str):
        node.message.reasoning_content = srl["reasoning_content"]
    if srl.get("message_role") == "tool":
        node.message.role = "tool"


def _tool_call(tc: ATIFToolCall) -> Any:
    """An ATIF tool call; the raw argument string and id Rollscope wrote under
    `extra.rollscope` (when the sampled text was not a JSON object) win over `arguments`."""
    extra = dict(tc.model_extra or {})
    inner = extra.get("extra") if isinstance(extra.get("extra"), dict) else {}
    rl = inner.get("rollscope") if isinstance(inner.get("rollscope"), dict) else None
    if rl is not None:
        call = _openai.tool_call(rl.get("id"), tc.function_name, rl.get("arguments", tc.arguments), {})
        call.extra = rl.get("tool_call_extra", {})
        return call
    return _openai.tool_call(tc.tool_call_id, tc.function_name, tc.arguments, extra)


def _result(b: RolloutBuilder, res: ATIFResult, path: str, subagents: dict, placed: set, segment: int,
            *, called: bool = False) -> None:
    """One observation result as a node: a tool message when it names its call (`source_call_id`) or
    answers an agent step that issued tool calls (its id missing: the result of one of them, which one
    is unknown; issue 20), else a user message (an observation of an action that was no tool call)."""
    refs = res.subagent_trajectory_ref
    refs = [refs] if isinstance(refs, dict) else (refs or [])
    extra = dict(res.model_extra or {})
    if refs:
        extra["subagent_trajectory_ref"] = refs
    srl = extra.get("extra", {}).get("rollscope") if isinstance(extra.get("extra"), dict) else None
    if isinstance(extra.get("extra"), dict):
        extra["extra"] = {k: v for k, v in extra["extra"].items() if k != "rollscope"}
        if not extra["extra"]:
            del extra["extra"]
    content = _content(res.content)
    role = "tool" if res.source_call_id is not None or called else "user"
    calling = b.last
    idx = b.add(Message(role=role, tool_call_id=res.source_call_id, content=content, extra=extra),
                extra={"segment": segment} if segment else None)
    if isinstance(srl, dict):
        _apply_node_rl(b.nodes[idx], srl)
    for ref in refs:
        tid = ref.get("trajectory_id") if isinstance(ref, dict) else None
        if tid in subagents and tid not in placed:
            placed.add(tid)
            sub, sraw = subagents[tid]
            saved = b.last
            start = len(b.nodes)
            add_steps(b, sub, sraw, segment=segment, parent=calling)
            if start < len(b.nodes):
                b.nodes[start].extra["subagent"] = tid
            b._last = saved


def _content(message: Any) -> str | list[dict] | None:
    """ATIF `message`: a string, or ContentParts (`text`, `image` with `source{media_type, path}`)."""
    if isinstance(message, list):
        return [dict(p) for p in message]
    return message
