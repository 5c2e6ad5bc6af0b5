"""NVIDIA NeMo Gym rollout JSONL (docs/formats.md).

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
baseline); `_rollscope` (Rollscope's writer) names the rollout (`rollout_id`) and restores what
NeMo Gym has no place for (`patch`, applied last); ids and groups are scoped by `agent_ref.name`
when present (`<agent>:task<t>-rollout<r>`, group `<agent>:<t>`), since one collection may mix
environments whose task indices overlap. Every environment field (`terminated`, `resolved`,
`info`, timings...) is kept in `extra`; the ending is decided by `_ending` (the table in
docs/formats.md). The verify output's reward-like fields beside `reward` (`accuracy`,
`set_overlap`, `subtask_score`, `resolved`, `*_reward`...: `reward_parts`) are also reward
components of weight 0: shown and filterable, never summed (`reward` stays the total).
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from ingest import endings, timestamps
from ingest.errors import RecordError
from ingest.fields import FieldError, is_number_or_none
from ingest.formats import _responses
from ingest.formats._build import RolloutBuilder
from ingest.formats.base import ReadContext, guarded, join_path, json_line, shape_error
from ingest.schema import Ending, EndingInfo, Error, GroupRef, Message, Node, Reward, Rollout, RunRef, Task, Usage
from ingest.source import Source

NAME = "nemo-gym"
EXPECTS = "JSONL of `{responses_create_params, response: {output: [Responses items]}, reward, _ng_task_index?}`"

SAMPLING_KEYS = ("temperature", "top_p", "max_output_tokens", "reasoning", "tool_choice", "parallel_tool_calls",
                 "top_logprobs", "truncation", "max_tool_calls")
_RECORD_KEYS = frozenset({"responses_create_params", "response", "reward", "_ng_task_index", "_ng_rollout_index",
                          "_ng_attempt_index", "_rollscope"})


def _is_record(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("response"), dict) and isinstance(
        d["response"].get("output"), list) and ("responses_create_params" in d or "reward" in d)


def _not_a_record(d: Any, file: str, line: int | None, prefix: str | None) -> RecordError:
    """Why `d` is not a NeMo Gym rollout, at the field at fault (`response.output: missing`)."""
    if isinstance(d, dict) and isinstance(d.get("response"), dict):
        return shape_error(file, line, join_path(prefix or None, "response"), d["response"], "NeMo Gym response",
                           (("output", "array"),), otherwise=": a NeMo Gym rollout has responses_create_params or "
                           "reward beside response")
    return shape_error(file, line, prefix, d, "NeMo Gym rollout", (("response", "object"),
                                                                   ("responses_create_params", "object")))


def sniff(source: Source) -> bool:
    first = source.first
    if source.kind == "json" and isinstance(first, list) and first:
        first = first[0]
    return source.kind in ("json", "jsonl") and _is_record(first)


def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    stem = ctx.source_key(source)
    for line, prefix, index, value in source.entries():
        default_id = f"{stem}#{index}"
        if isinstance(value, RecordError):
            yield value
        elif not _is_record(value):
            yield _not_a_record(value, source.name, line, prefix)
        else:
            yield guarded(source.name, line, prefix, lambda: _rollout(
                value, ctx.run_for(source), ctx.step, source.name, line, prefix, default_id))


# A verify output's field that scores the rollout (by name): what environments write beside
# `reward` (`accuracy`, `set_overlap` in example_multi_step, `subtask_score` in
# competitive_coding_challenges, `resolved` in the SWE agents, `library_reward`, `judge_score`...).
REWARD_PART = re.compile(r"reward|score|accura|correct|resolved|success|pass|overlap", re.IGNORECASE)


def reward_parts(d: dict) -> dict[str, Reward]:
    """The reward-like top-level fields of a NeMo Gym verify output (`BaseVerifyResponse` and an
    environment's subclass of it; REWARD_PART by name, not `reward` itself nor `_ng_*` keys):
    a finite number as it is, a boolean as 1 / 0. Components of weight 0 (`extra.metric: true`):
    NeMo Gym's reward is `reward`, these are what it was computed from or beside."""
    out: dict[str, Reward] = {}
    for k, v in d.items():
        if k == "reward" or k.startswith("_") or not REWARD_PART.search(k):
            continue
        if isinstance(v, bool):
            out[k] = Reward(score=float(v), weight=0.0, extra={"metric": True})
        elif isinstance(v, int | float) and math.isfinite(v):
            out[k] = Reward(score=float(v), weight=0.0, extra={"metric": True})
    return out


def _index(d: dict, key: str) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise FieldError(key, "expected a non-negative integer")
    return v


def _rollout(d: dict, run_id: str, step: int | None, file: str, line: int | None, prefix: str,
             default_id: str) -> Rollout:
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
        finish = (incomplete.get("reason")
                  if (last and incomplete and isinstance(incomplete.get("reason"), str)) else None)
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
    kept = d["_rollscope"] if isinstance(d.get("_rollscope"), dict) else {}
    named = kept.get("rollout_id")
    rid = ((named if isinstance(named, str) and named else None) or _rollout_id(scope, task_index, rollout_index)
           or default_id)
    info: dict[str, Any] = {"format": NAME, "file": file, "line": line}
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
        id=rid, run=RunRef(id=run_id), step=step, attempt=attempt,
        group=GroupRef(id=f"{scope}{task_index}", index=rollout_index) if task_index is not None else None,
        task=Task(type=(d.get("agent_ref") or {}).get("name") if isinstance(d.get("agent_ref"), dict) else None,
                  key=None if task_index is None else str(task_index),
                  data=params.get("metadata") if params.get("metadata") is not None else d.get("instance_id")),
        tools=[t for t in tools if isinstance(t, dict)],
        nodes=b.nodes, calls=b.calls, reward=None if reward is None else float(reward),
        rewards=reward_parts(d), metrics=metrics, timing=timing, extra=extra, source=info,
    )
    rollout.ending, errors = _ending(d, response)
    rollout.errors.extend(errors)
    if isinstance(params.get("max_output_tokens"), int):
        rollout.ending.evidence.last_output_token_cap = params["max_output_tokens"]
    rollout = b.finish(rollout)
    patch = kept.get("patch")
    if patch is None:
        return rollout
    if not isinstance(patch, dict):
        raise FieldError("_rollscope.patch", "expected an object")
    return Rollout.model_validate(_apply(rollout.to_json_dict(), patch, "_rollscope.patch"))


# `_rollscope.patch`: what Rollscope's writer adds for the fields NeMo Gym has no place for
# (verifiers' group and rewards, an ending a harness decided, node timestamps...), as the
# difference between the rollout and what reading the line without it gives:
# `{"set": {key: value}, "drop": [key], "in": {key: patch}, "at": {"<index>": patch}}`; `in`
# patches an object field, `at` one item of a list (nodes, calls) of the same length.

def _diff(mine: Any, back: Any, depth: int) -> dict | None:
    """The patch that turns `back` into `mine` (None when equal); objects and equal-length
    lists are entered `depth` levels deep, below that a differing value is set whole."""
    if mine == back:
        return None
    p: dict[str, Any] = {}
    for k in [*mine, *(k for k in back if k not in mine)]:
        if k not in mine:
            p.setdefault("drop", []).append(k)
            continue
        a, b = mine[k], back.get(k)
        if a == b and k in back:
            continue
        if depth > 0 and isinstance(a, dict) and isinstance(b, dict):
            p.setdefault("in", {})[k] = _diff(a, b, depth - 1)
        elif depth > 0 and isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(
                isinstance(x, dict) and isinstance(y, dict) for x, y in zip(a, b)):
            p.setdefault("at", {})[k] = {str(i): _diff(x, y, depth - 1) for i, (x, y) in enumerate(zip(a, b)) if x != y}
        else:
            p.setdefault("set", {})[k] = a
    return p


def _apply(target: dict, p: dict, where: str) -> dict:
    """`target` with patch `p` applied (see `_diff`); FieldError naming `where` for a bad patch."""
    if not isinstance(p, dict) or not isinstance(target, dict):
        raise FieldError(where, "expected an object")
    out = dict(target)
    for k in p.get("drop") or []:
        out.pop(k, None)
    out.update(p.get("set") or {})
    for k, sub in (p.get("in") or {}).items():
        out[k] = _apply(out.get(k) if isinstance(out.get(k), dict) else {}, sub, f"{where}.in.{k}")
    for k, items in (p.get("at") or {}).items():
        seq = out.get(k)
        if not isinstance(seq, list) or not isinstance(items, dict):
            raise FieldError(f"{where}.at.{k}", "expected a list to patch")
        seq = list(seq)
        for i, sub in items.items():
            if not (isinstance(i, str) and i.isdigit() and int(i) < len(seq)):
                raise FieldError(f"{where}.at.{k}", f"no item {i!r}")
            seq[int(i)] = _apply(seq[int(i)], sub, f"{where}.at.{k}.{i}")
        out[k] = seq
    return out


def _rollout_id(scope: str, task_index: int | None, rollout_index: int | None) -> str | None:
    """`<agent>:task<t>-rollout<r>` when both indices are there (a line without them is named by
    `_rollscope.rollout_id`, which Rollscope's writer adds, else by its file and line)."""
    if task_index is None or rollout_index is None:
        return None
    return f"{scope}task{task_index}-rollout{rollout_index}"


def _path_nodes(b: RolloutBuilder, idx: int) -> list:
    out = []
    cur: int | None = idx
    while cur is not None:
        out.append(b.nodes[cur])
        cur = b.nodes[cur].parent
    return out


# `response.status` words that say how the response ended; `completed` (and `in_progress`,
# `queued`) says only that the last model call returned, not how the episode ended, so it never
# decides: NeMo Gym's agents write `completed` for an answer and for a loop cut at its step limit.
_STATUS_ENDS = frozenset({"failed", "cancelled", "incomplete"})


def _words(d: dict, response: dict) -> list[tuple[str, str]]:
    """The ending words of a line, as (detail, word), in the order they are consulted: how the
    last response ended (`response.incomplete_details.reason`, then `response.status`, only the
    `_STATUS_ENDS` words), then the environment's `termination_reason` (top level, or
    `result.termination_reason`: the tau2 agent writes tau2's `SimulationRun` as `result`,
    NVIDIA-NeMo/Gym responses_api_agents/tau2/app.py)."""
    out: list[tuple[str, str]] = []
    incomplete = response.get("incomplete_details")
    if isinstance(incomplete, dict) and isinstance(incomplete.get("reason"), str):
        out.append((f"incomplete_details.reason={incomplete['reason']}", incomplete["reason"]))
    status = response.get("status")
    if isinstance(status, str) and status.strip().lower() in _STATUS_ENDS:
        out.append((f"status={status}", status))
    result = d.get("result") if isinstance(d.get("result"), dict) else {}
    for where, value in (("termination_reason", d.get("termination_reason")),
                         ("result.termination_reason", result.get("termination_reason"))):
        if isinstance(value, str) and value.strip():
            out.append((value if where == "termination_reason" else f"{where}={value}", value))
    return out


def _ending(d: dict, response: dict) -> tuple[EndingInfo, list[Error]]:
    """NeMo Gym's ending, first rule that applies (docs/formats.md, "Endings per format"):

    1. `response.error` → error;
    2. an environment error flag (`container_timed_out`, any `*_error` key that is true): the
       endings table decides (`context_length_exceeded_error` → truncated, others → error);
    3. `agent_timed_out` → truncated;
    4. `terminated` on a last response cut for length (`incomplete_details.reason` max_output_tokens):
       task_detected, the environment's claim, corrected to length_cut by the one rule
       (`endings.correct_silent_truncation`), so the `silent_truncation` check reports it;
    5. the ending words (`_words`: `response.incomplete_details.reason`, `response.status`
       failed / cancelled / incomplete, then `termination_reason` / `result.termination_reason`)
       through the endings table: the first word the table knows decides. A word it does not
       know never hides a later one it knows (`max_output_tokens` → length_cut; tau2
       `user_stop` → task_detected, `max_steps` → truncated, `agent_stop` → submitted);
    6. gym flags: `truncated` → truncated, `terminated` → task_detected (5 and 6 are one list
       for `endings.first_known`);
    7. a word was written but none is in the table → unknown, that word as the detail (never
       guessed from the transcript);
    8. the last output item: an assistant message → submitted (the agent answered);
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
    reason = incomplete.get("reason") if isinstance(incomplete, dict) else None
    if d.get("terminated") is True and isinstance(reason, str) and reason.lower() in endings.LENGTH_FINISH_REASONS:
        # the environment ended the episode as done on an answer cut for length: the source's claim,
        # which `endings.correct_silent_truncation` corrects to length_cut and records (issue 20)
        return EndingInfo(type=Ending.task_detected, detail="terminated=true",
                          message="the environment ended the episode as done"), []
    kind, detail = endings.first_known([*_words(d, response), *(
        (f"{flag}=true", flag) for flag in ("truncated", "terminated") if d.get(flag) is True)])
    if detail is not None:
        message = None if kind != Ending.unknown else "no word of this line's ending fields is in the endings table"
        return EndingInfo(type=kind, detail=detail, message=message), []
    output = response.get("output") or []
    last = output[-1] if output else None
    if isinstance(last, dict) and _responses.is_model_item(last) and last.get("type", "message") == "message":
        return EndingInfo(type=Ending.submitted, detail="final assistant message",
                          message="the last output item is the agent's message"), []
    kind = last.get("type") if isinstance(last, dict) else None
    return EndingInfo(type=Ending.unknown, detail=None if kind is None else f"last item: {kind}",
                      message="no ending field, and the last output item is not an assistant message"), []


# --- writing --------------------------------------------------------------------------------
# `to_record` is the reader run backwards: what the reader kept in `extra` (the response and
# request fields, the environment's fields, item ids and statuses) goes back where it came from,
# so NeMo Gym → Rollscope → NeMo Gym → Rollscope gives the same rollout.

def _parts_out(m: Message, content: Any, text_type: str) -> Any:
    """Stored content → Responses content: text parts get their source type back (else
    `text_type`), media placeholders their original part (kept once in `message.extra.media`)."""
    if not isinstance(content, list):
        return content
    media = m.extra.get("media") or {}
    out = []
    for p in content:
        if p.get("type") == "text":
            q = {k: v for k, v in p.items() if k not in ("type", "source_type")}
            part = {"type": p.get("source_type", text_type), **q}
            if part["type"] == "output_text":
                part.setdefault("annotations", [])  # required on output_text by the Responses API
            out.append(part)
        elif p.get("placeholder") and p.get("sha256") in media:
            out.append(media[p["sha256"]])
        elif p.get("source_type"):
            out.append({**{k: v for k, v in p.items() if k != "source_type"}, "type": p["source_type"]})
        else:
            out.append(p)
    return out


def _message_out(m: Message, text_type: str) -> dict:
    extra = {k: v for k, v in m.extra.items() if k not in ("source_role", "media", "content_from", "context")}
    content = m.content
    if m.extra.get("content_from") == "object" and isinstance(content, str):
        content = json.loads(content)
    return {"type": "message", "role": m.extra.get("source_role", m.role), "content": _parts_out(m, content, text_type),
            **extra}


def _model_items(n: Node, tokens: dict[str, Any]) -> list[dict]:
    """One assistant node → the items of its model call: reasoning, message, function calls
    (token fields on the last item, as NeMo Gym writes them)."""
    m = n.message
    x = m.extra
    items: list[dict] = []
    if m.reasoning_content is not None:
        kept = dict((x.get("reasoning_items") or [{}])[0])
        where = "content" if kept.pop("from", "summary") == "content" else "summary"
        kind = "reasoning_text" if where == "content" else "summary_text"
        item = {"type": "reasoning", **kept, where: [{"type": kind, "text": m.reasoning_content}]}
        if where == "content":
            item.setdefault("summary", [])
        items.append(item)
    if m.content is not None:
        kept = dict((x.get("items") or [{}])[0])
        items.append({"type": "message", "role": "assistant",
                      "content": _parts_out(m, m.content, "output_text"), **kept})
    for tc in m.tool_calls or []:
        extra = {k: v for k, v in tc.extra.items() if k not in ("arguments_shape", "arguments_from")}
        args: Any = json.loads(tc.arguments) if tc.extra.get("arguments_from") == "object" else tc.arguments
        items.append({"type": "function_call", "call_id": tc.id, "name": tc.name, "arguments": args, **extra})
    items += [dict(o) for o in x.get("other_items") or []]
    if not items:
        items.append({"type": "message", "role": "assistant", "content": []})
    items[-1].update(tokens)
    return items


def _env_item(m: Message) -> dict:
    if "source_item" in m.extra:
        return m.extra["source_item"]
    if m.role == "tool":
        extra = {k: v for k, v in m.extra.items() if k not in ("item_type", "content_from", "media")}
        output = m.content
        if m.extra.get("content_from") == "object" and isinstance(output, str):
            output = json.loads(output)
        return {"type": m.extra.get("item_type", "function_call_output"), "call_id": m.tool_call_id,
                "output": _parts_out(m, output, "input_text"), **extra}
    return _message_out(m, "input_text")


def to_record(r: Rollout) -> dict[str, Any]:
    """A rollout as one NeMo Gym rollout line (the shape `read` takes): nodes before the first
    sampled one are `responses_create_params.input`, the rest `response.output`; each sampled
    node's tokens as `prompt_token_ids` (its path's tokens before it), `generation_token_ids`
    and `generation_log_probs`; `reward`, `_ng_task_index` (the task key), `_ng_rollout_index`
    (the group index) and `_ng_attempt_index` (when not 0). Nodes are written in order, so a
    rollout with several branches is written as one sequence."""
    extra = dict(r.extra)
    params = dict(extra.pop("responses_create_params", None) or {})
    response = dict(extra.pop("response", None) or {})
    if "instructions" in extra:
        params["instructions"] = extra.pop("instructions")
    first = next((i for i, n in enumerate(r.nodes) if n.sampled), len(r.nodes))
    before: dict[int, list[int]] = {}  # node → tokens of its path before it
    for i, n in enumerate(r.nodes):
        before[i] = [] if n.parent is None else before[n.parent] + list(r.nodes[n.parent].token_ids)
    inputs: list[dict] = []
    outputs: list[dict] = []
    for i, n in enumerate(r.nodes):
        items = inputs if i < first else outputs
        if n.message.role == "assistant":
            tokens = {}
            if n.sampled and n.token_ids:
                tokens = {"prompt_token_ids": before[i], "generation_token_ids": list(n.token_ids),
                          "generation_log_probs": list(n.logprobs) if n.logprobs else []}
            items += _model_items(n, tokens)
        else:
            items.append(_env_item(n.message))
    d: dict[str, Any] = {"responses_create_params": {**params, "input": inputs},
                         "response": {**response, "output": outputs}}
    d["reward"] = r.reward if r.reward is not None else r.total_reward()
    if r.task is not None and r.task.key is not None and r.task.key.isdigit():
        d["_ng_task_index"] = int(r.task.key)
    if r.group is not None and r.group.index is not None:
        d["_ng_rollout_index"] = r.group.index
    if r.attempt:
        d["_ng_attempt_index"] = r.attempt
    d.update(extra)
    agent = extra["agent_ref"].get("name") if isinstance(extra.get("agent_ref"), dict) else None
    scope = f"{agent}:" if isinstance(agent, str) and agent else ""
    kept: dict[str, Any] = {}
    if _rollout_id(scope, d.get("_ng_task_index"), d.get("_ng_rollout_index")) != r.id:
        kept["rollout_id"] = r.id  # NeMo Gym has no id field: the indices name a rollout
    d.pop("_rollscope", None)
    if kept:
        d["_rollscope"] = kept
    # what NeMo Gym has no place for: read the line back, keep the difference
    back = _rollout(json.loads(json.dumps(d)), r.run.id, None, "", None, "", r.id).to_json_dict()
    mine = r.to_json_dict()
    mine.pop("source", None)
    back.pop("source", None)
    patch = _diff(mine, back, 2)
    if patch:
        d["_rollscope"] = {**kept, "patch": patch}
    return d


def write(rollouts: Iterable[Rollout]) -> Iterator[tuple[bytes, int]]:
    """NeMo Gym rollout JSONL, one line a rollout (`to_record`), the shape `ng_collect_rollouts`
    writes."""
    for r in rollouts:
        yield json_line(to_record(r)), 1
