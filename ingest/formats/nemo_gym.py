"""NVIDIA NeMo Gym rollout JSONL (docs/formats-nemo-gym.md).

Source: NVIDIA-NeMo/Gym `nemo_gym/global_config.py` and `nemo_gym/openai_utils.py`
(`NeMoGymResponse`, token fields on output items), the `ng_collect_rollouts` writer, and the
`*/data/example_rollouts*.jsonl` files of its environments. One line per rollout:

    {responses_create_params: {input, tools, model, temperature, top_p, max_output_tokens, ...},
     response: {id, created_at (epoch s), model, output: [Responses items], usage,
                incomplete_details, status, error},
     reward, _ng_task_index, _ng_rollout_index, _ng_attempt_index?, ...environment fields}

Messages come from `responses_create_params.input` (context) and `response.output` (the rollout),
through `_responses` (one sampled node per model call; parallel calls paired by `call_id`; a final
call with no output stays unanswered; token fields present but empty mean "not recorded"; vLLM
`output_text.logprobs` become tokens without ids). Group = `_ng_task_index`, index =
`_ng_rollout_index`, attempt = `_ng_attempt_index` (only the latest attempt enters a group's
baseline); ids and groups are scoped by `agent_ref.name` when present (`<agent>:task<t>-rollout<r>`,
group `<agent>:<t>`), since one collection may mix environments whose task indices overlap. Every environment field (`terminated`, `resolved`, `info`, timings...) is kept in
`extra`; the ending is decided by `_ending` (the table in docs/formats-nemo-gym.md).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ingest import endings, timestamps
from ingest.fields import FieldError, is_number_or_none
from ingest.formats import _responses
from ingest.formats._build import RolloutBuilder
from ingest.formats.base import ReadContext, guarded
from ingest.schema import Ending, EndingInfo, Error, GroupRef, Rollout, RunRef, Task, Usage
from ingest.source import RecordError, Source

NAME = "nemo-gym"
EXPECTS = "JSONL of `{responses_create_params, response: {output: [Responses items]}, reward, _ng_task_index?}`"

SAMPLING_KEYS = ("temperature", "top_p", "max_output_tokens", "reasoning", "tool_choice", "parallel_tool_calls",
                 "top_logprobs", "truncation", "max_tool_calls")
_RECORD_KEYS = frozenset({"responses_create_params", "response", "reward", "_ng_task_index", "_ng_rollout_index",
                          "_ng_attempt_index"})


def _is_record(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("response"), dict) and isinstance(
        d["response"].get("output"), list) and ("responses_create_params" in d or "reward" in d)


def sniff(source: Source) -> bool:
    first = source.first
    if source.kind == "json" and isinstance(first, list) and first:
        first = first[0]
    return source.kind in ("json", "jsonl") and _is_record(first)


def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    stem = ctx.source_key(source)
    if source.kind == "jsonl":
        items: Any = ((line, "", f"{stem}#{line - 1}", v) for line, v in source.lines())
    else:
        items = ((None, "" if i is None else f"[{i}]", f"{stem}#{i or 0}", v) for i, v in source.records())
    for line, prefix, default_id, value in items:
        if isinstance(value, RecordError):
            yield value
        elif not _is_record(value):
            yield RecordError(source.name, line, prefix or None,
                              "not a NeMo Gym rollout: expected response.output and responses_create_params")
        else:
            yield guarded(source.name, line, prefix, lambda: _rollout(source, ctx, value, line, prefix, default_id))


def _index(d: dict, key: str) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise FieldError(key, "expected a non-negative integer")
    return v


def _rollout(source: Source, ctx: ReadContext, d: dict, line: int | None, prefix: str, default_id: str) -> Rollout:
    params = d.get("responses_create_params") or {}
    if not isinstance(params, dict):
        raise FieldError("responses_create_params", "expected an object")
    response = d["response"]
    b = RolloutBuilder()
    _responses.add_input(b, params.get("input"), "responses_create_params.input")
    instructions = params.get("instructions")
    calls = _responses.add_output(b, response["output"], "response.output")
    sampling = {k: params[k] for k in SAMPLING_KEYS if params.get(k) is not None}
    model = response.get("model") if isinstance(response.get("model"), str) else params.get("model")
    incomplete = response.get("incomplete_details") if isinstance(response.get("incomplete_details"), dict) else None
    for k, c in enumerate(calls):
        node = b.nodes[c.node]
        last = k == len(calls) - 1
        finish = incomplete.get("reason") if (last and incomplete and isinstance(incomplete.get("reason"), str)) else None
        usage = None
        if c.tokens:
            prompt_len = sum(len(n.token_ids) for n in _path_nodes(b, c.node)) - len(node.token_ids)
            usage = Usage(input_tokens=prompt_len, output_tokens=len(node.token_ids))
        b.call(c.node, finish, usage, model=model, endpoint="/responses", sampling=sampling or None)

    task_index = _index(d, "_ng_task_index")
    rollout_index = _index(d, "_ng_rollout_index")
    attempt = _index(d, "_ng_attempt_index") or 0
    reward = d.get("reward")
    if not is_number_or_none(reward):
        raise FieldError("reward", f"expected a number or null, got {type(reward).__name__}")
    agent = d["agent_ref"].get("name") if isinstance(d.get("agent_ref"), dict) else None
    scope = f"{agent}:" if isinstance(agent, str) and agent else ""  # one collection may mix environments
    rid = f"{scope}task{task_index}-rollout{rollout_index}" if task_index is not None and rollout_index is not None \
        else default_id
    info: dict[str, Any] = {"format": NAME, "file": source.name, "line": line}
    if prefix:
        info["path"] = prefix
    timing: dict[str, Any] = {}
    created = response.get("created_at")
    if created is not None:
        ts = timestamps.to_epoch(created, "response.created_at")
        timing["start"] = ts.epoch
        if ts.assumed_utc:
            timing["start_assumed_utc"] = True
    usage = response.get("usage")
    extra = {k: v for k, v in d.items() if k not in _RECORD_KEYS}
    extra["response"] = {k: v for k, v in response.items() if k != "output"}
    extra["responses_create_params"] = {k: v for k, v in params.items() if k != "input"}
    if instructions is not None:
        extra["instructions"] = instructions
    tools = params.get("tools") if isinstance(params.get("tools"), list) else []
    metrics: dict[str, float | None] = {}
    if isinstance(usage, dict):
        for k in ("input_tokens", "output_tokens", "total_tokens"):
            if is_number_or_none(usage.get(k)) and usage.get(k) is not None:
                metrics[f"usage.{k}"] = float(usage[k])
    rollout = Rollout(
        id=rid, run=RunRef(id=ctx.run_for(source)), step=ctx.step, attempt=attempt,
        group=GroupRef(id=f"{scope}{task_index}", index=rollout_index) if task_index is not None else None,
        task=Task(type=(d.get("agent_ref") or {}).get("name") if isinstance(d.get("agent_ref"), dict) else None,
                  key=None if task_index is None else str(task_index),
                  data=params.get("metadata") if params.get("metadata") is not None else d.get("instance_id")),
        tools=[t for t in tools if isinstance(t, dict)],
        nodes=b.nodes, calls=b.calls, reward=None if reward is None else float(reward),
        metrics=metrics, timing=timing, extra=extra, source=info,
    )
    rollout.ending, errors = _ending(d, response)
    rollout.errors.extend(errors)
    if isinstance(params.get("max_output_tokens"), int):
        rollout.ending.evidence.last_output_token_cap = params["max_output_tokens"]
    return b.finish(rollout)


def _path_nodes(b: RolloutBuilder, idx: int) -> list:
    out = []
    cur: int | None = idx
    while cur is not None:
        out.append(b.nodes[cur])
        cur = b.nodes[cur].parent
    return out


def _ending(d: dict, response: dict) -> tuple[EndingInfo, list[Error]]:
    """NeMo Gym's ending, first rule that applies (docs/formats-nemo-gym.md):

    1. `response.error` → error;
    2. an environment error flag (`container_timed_out`, any `*_error` key that is true): the
       endings table decides (`context_length_exceeded_error` → truncated, others → error);
    3. `agent_timed_out` → truncated;
    4. `response.incomplete_details.reason` / `response.status` through the endings table
       (`max_output_tokens` → length_cut; `failed`, `cancelled` → error);
    5. `termination_reason` through the endings table;
    6. gym flags: `truncated` → truncated, `terminated` → task_detected;
    7. the last output item: an assistant message → submitted (the agent answered);
       anything else (a tool call whose result was not recorded, an observation) → unknown.
    """
    err = response.get("error")
    if err:
        code = err.get("code") or err.get("type") if isinstance(err, dict) else None
        msg = err.get("message") if isinstance(err, dict) else str(err)
        return (EndingInfo(type=Ending.error, detail=str(code or "response.error"), message=msg),
                [Error(type=str(code or "error"), message=str(msg or ""))])
    for key, value in d.items():
        if value is True and (key.endswith("_error") or key == "container_timed_out"):
            kind = endings.from_reason(key)
            kind = kind if kind != Ending.unknown else Ending.error
            return EndingInfo(type=kind, detail=key, message=f"{key} = true"), (
                [Error(type=key, message=f"{key} = true")] if kind == Ending.error else [])
    if d.get("agent_timed_out") is True:
        return EndingInfo(type=Ending.truncated, detail="agent_timed_out", message="the agent ran out of time"), []
    incomplete = response.get("incomplete_details")
    if isinstance(incomplete, dict) and isinstance(incomplete.get("reason"), str):
        reason = incomplete["reason"]
        return EndingInfo(type=endings.from_reason(reason), detail=f"incomplete_details.reason={reason}"), []
    status = response.get("status")
    if isinstance(status, str) and status in ("failed", "cancelled", "incomplete"):
        return EndingInfo(type=endings.from_reason(status), detail=f"status={status}"), []
    if isinstance(d.get("termination_reason"), str):
        reason = d["termination_reason"]
        return EndingInfo(type=endings.from_reason(reason), detail=reason), []
    if d.get("truncated") is True:
        return EndingInfo(type=Ending.truncated, detail="truncated=true"), []
    if d.get("terminated") is True:
        return EndingInfo(type=Ending.task_detected, detail="terminated=true"), []
    output = response.get("output") or []
    last = output[-1] if output else None
    if isinstance(last, dict) and _responses.is_model_item(last) and last.get("type", "message") == "message":
        return EndingInfo(type=Ending.submitted, detail="final assistant message",
                          message="the last output item is the agent's message"), []
    kind = last.get("type") if isinstance(last, dict) else None
    return EndingInfo(type=Ending.unknown, detail=None if kind is None else f"last item: {kind}",
                      message="no ending field, and the last output item is not an assistant message"), []
