"""OpenAI-style chat transcripts, with or without token data (docs/formats-chat.md).

Detected by content, never by file name. Shapes read (a `_case` key, as in ../shared/cases, is
dropped before parsing and kept in `rollout.extra["_case"]`):

1. tau-bench (sierra-research/tau-bench `run.py` checkpoint file): a JSON array of
   `{task_id, trial, reward, info: {task, source, user_cost, reward_info} | {error, traceback},
   traj: [OpenAI chat messages]}`. Rollout id `task{task_id}-trial{trial}`, group = task_id
   (index = trial), task key `str(task_id)`, task data `info.task`, `info` kept in extra.
   Ending from `info` and the last message (see `_tau_ending`).
2. Chat records: `{messages: [...], rollout_id?, reward?, reward_components?, ending?,
   group_id?, ...}` as one JSON object, a JSON array of them, JSONL (one per line; a bad line is
   a RecordError with its line number and the lines around it are still read), a
   `{rollouts: [...], group_id?}` wrapper, or a bare message list `[{role, content}, ...]`.
   `ending` is `{"reason", "message", "error_type"}` or a string; the reason is mapped with
   `endings.from_reason` and kept verbatim as `ending.detail`.
3. Token-level records:
   - `turns: [{prompt_ids, completion_ids, logprobs, prompt_pieces?, completion_pieces?}]`:
     a chain of prompt node (mask 0) → completion node (sampled, mask 1). Turn t+1's prompt
     holds only the delta when it starts with prompt[t] + completion[t]; otherwise (token
     drift) a new root node holds the full prompt and `extra["token_drift"]` records the first
     divergence `{turn, index, expected, found}`. Nothing is repaired; both sequences are kept.
   - top-level `completion_ids` + `logprobs` (+ `completion_pieces`, `prompt_ids`): one turn.
   - `turn_tokens: [{completion_ids, logprobs, completion_pieces?}]` aligned, in order, to the
     assistant messages of `messages` (so are `turns` when `messages` is also given).
   - OpenAI logprobs: `{response: str, logprobs: {content: [{token, logprob, bytes,
     top_logprobs?}]} | [...]}`. OpenAI gives no token ids, so none are invented: each token's
     id is -1 ("not recorded"), with its bytes in `node.extra["token_bytes"]`, its logprob in
     `logprobs` and `mask` 1, unless every entry carries an integer `token_id`.
   - An object whose every value is one of the records above (`{variant_a: {...}, ...}`)
     gives one rollout per key.

Source-supplied token text (pieces, OpenAI `bytes`) becomes `node.extra["token_bytes"]`: one
lowercase hex string per token (text pieces are UTF-8 encoded, lone surrogates kept with
`surrogatepass`, so invalid UTF-8 never raises). Every per-token array is set through
`ingest.align` so a length mismatch is recorded in `node.extra["source_lengths"]`.

Messages: one node each, chained by `parent`; assistant messages are `sampled`. Roles
`developer` → system and `function` → tool; any other role → user, with the original role in
`message.extra["source_role"]`. Tool calls `{id, type, function: {name, arguments}}` (or flat
`{id, name, arguments}`, or a legacy `function_call`) → ToolCall with `arguments` as the raw
string (a dict is `json.dumps`-ed). Ids are kept as given, duplicates included.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ingest import endings
from ingest.align import fill_node, fit
from ingest.fields import FieldError, floats, ints, is_number_or_none
from ingest.formats import ReadContext
from ingest.schema import (
    Call,
    Ending,
    EndingInfo,
    Error,
    GroupRef,
    Message,
    Node,
    Rollout,
    RunRef,
    Task,
    ToolCall,
    Usage,
)
from ingest.source import RecordError, Source

NAME = "chat"

CORE_ROLES = frozenset({"system", "user", "assistant", "tool"})
ROLE_MAP = {"developer": "system", "function": "tool"}

# Keys that make a dict a chat record for `sniff` (strict) ...
TOKEN_KEYS = ("turns", "turn_tokens", "completion_ids")
# ... and the looser set accepted once a file has been claimed (e.g. case 10's reward-only rows).
LENIENT_KEYS = ("rollout_id", "reward", "ending")

# tau-bench: `Env.terminate_tools` of the airline and retail envs (envs/*/env.py).
TAU_TERMINATE_TOOLS = frozenset({"transfer_to_human_agents"})
TAU_STOP = "###STOP###"

FINISH_REASONS = {
    "stop": "stop", "eos": "stop", "end_turn": "stop", "stop_sequence": "stop",
    "length": "length", "max_tokens": "length", "max_output_tokens": "length",
    "tool_calls": "tool_call", "tool_call": "tool_call", "function_call": "tool_call",
    "tool_use": "tool_call", "content_filter": "content_filter", "error": "error",
}

_HEX_ESCAPES = re.compile(r"^(?:bytes:)?((?:\\x[0-9a-fA-F]{2})+)$")

# Envelope keys every chat record may carry; token keys are consumed by the branch that reads
# them; everything else goes to `rollout.extra`.
_ENVELOPE = frozenset({
    "rollout_id", "reward", "reward_components", "ending", "group_id", "group_index", "group_size", "step",
    "run", "task", "task_id", "tools", "metrics", "stop_condition",
})


@dataclass
class _Defaults:
    """What an enclosing wrapper says about the records inside it."""

    case: Any = None
    group_id: str | None = None
    group_index: int | None = None
    group_size: int | None = None
    step: int | None = None
    run: str | None = None
    wrapper: dict = field(default_factory=dict)


# --- detection -----------------------------------------------------------------------------

def sniff(source: Source) -> bool:
    """True for the shapes in the module docstring. Never claims native (`schema:
    rollscope/...`) or Tunix files (Trajectory/Token dicts, step lists, lists of TrajectoryItem
    lists, and bare message lists whose assistant content contains `<end_of_turn>`)."""
    if source.kind not in ("json", "jsonl"):
        return False
    return _claims(source.first)


def _claims(value: Any) -> bool:
    if isinstance(value, dict):
        d = _strip_case(value)
        if _is_native(d):
            return False
        return _is_tau(d) or _is_wrapper(d, strict=True) or _is_record(d, strict=True) or _is_variants(d)
    if isinstance(value, list) and value:
        first = value[0]
        if not isinstance(first, dict):
            return False  # lists of lists: Tunix TrajectoryItem groups
        first = _strip_case(first)
        if _is_native(first):
            return False
        if _is_tau(first):
            return True
        if _is_message_list(value):
            return not _has_tunix_turn_marker(value)
        return _is_record(first, strict=True)
    return False


def _strip_case(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "_case"} if "_case" in d else d


def _is_native(d: dict) -> bool:
    return str(d.get("schema", "")).startswith("rollscope/")


def _is_tau(d: dict) -> bool:
    return "task_id" in d and isinstance(d.get("traj"), list) and "pair_index" not in d


def _is_wrapper(d: dict, strict: bool = False) -> bool:
    rollouts = d.get("rollouts")
    if not isinstance(rollouts, list) or "messages" in d:
        return False
    if not strict:
        return True
    items = [_strip_case(r) for r in rollouts if isinstance(r, dict)]
    return bool(items) and len(items) == len(rollouts) and not any(_is_native(r) for r in items) and all(
        _is_record(r, strict=False) for r in items)


def _is_message_list(value: list) -> bool:
    return bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and not _is_record(m, strict=False)
        for m in value)


def _has_tunix_turn_marker(messages: list) -> bool:
    for m in messages:
        if m.get("role") == "assistant":
            content = m.get("content")
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            if "<end_of_turn>" in text:
                return True
    return False


def _is_logprobs_shape(d: dict) -> bool:
    lp = d.get("logprobs")
    if isinstance(lp, dict):
        return isinstance(lp.get("content"), list)
    if isinstance(lp, list) and lp:
        return isinstance(lp[0], dict) and ("logprob" in lp[0] or "token" in lp[0])
    return False


def _is_record(d: dict, strict: bool) -> bool:
    msgs = d.get("messages")
    if isinstance(msgs, list):
        # Atropos ScoredDataGroup: `messages` is a list of lists, beside tokens/masks/scores.
        if msgs and not isinstance(msgs[0], dict):
            return False
        if {"tokens", "masks", "scores"} <= d.keys():
            return False
        return True
    if any(isinstance(d.get(k), list) for k in TOKEN_KEYS):
        return True
    if _is_logprobs_shape(d) and not isinstance(d.get("response"), dict):
        return True
    return not strict and any(k in d for k in LENIENT_KEYS)


def _is_variants(d: dict) -> bool:
    values = list(d.values())
    return bool(values) and all(
        isinstance(v, dict) and not _is_native(v) and _is_record(_strip_case(v), strict=True) for v in values)


# --- reading -------------------------------------------------------------------------------

def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    stem = source.path.stem
    if source.kind == "jsonl":
        for lineno, value in source.lines():
            if isinstance(value, RecordError):
                yield value
                continue
            yield from _read_value(value, source, ctx, lineno, "", f"{stem}#{lineno - 1}", _Defaults(), top=False)
    else:
        yield from _read_value(source.document, source, ctx, None, "", stem, _Defaults(), top=True)


def _join(prefix: str, sub: str | None) -> str | None:
    if not sub:
        return prefix or None
    if not prefix:
        return sub
    return prefix + sub if sub.startswith("[") else f"{prefix}.{sub}"


def _read_value(value: Any, source: Source, ctx: ReadContext, line: int | None, prefix: str, base_id: str,
                defaults: _Defaults, top: bool) -> Iterator[Rollout | RecordError]:
    """Dispatch one JSON value. `base_id` is the default rollout id (a single record) or the
    stem that list/wrapper positions are appended to (`<base>#<i>` at the top of a JSON
    document, `<base>.<i>` inside a JSONL line)."""
    def child_id(i: Any) -> str:
        return f"{base_id}#{i}" if top else f"{base_id}.{i}"

    file = source.name
    if isinstance(value, list):
        if _is_message_list(value):
            yield _record(source, ctx, {"messages": value}, line, prefix,
                          child_id(0) if top else base_id, defaults)
            return
        for i, item in enumerate(value):
            where = _join(prefix, f"[{i}]") or ""
            if not isinstance(item, dict):
                yield RecordError(file, line, where, f"expected a JSON object, got {type(item).__name__}")
                continue
            yield from _read_dict(item, source, ctx, line, where, child_id(i), defaults)
        return
    if not isinstance(value, dict):
        yield RecordError(file, line, prefix or None, f"expected a JSON object or array, got {type(value).__name__}")
        return
    d = _strip_case(value)
    if _is_wrapper(d):
        case = value.get("_case", defaults.case)
        rollouts = d["rollouts"]
        wrapper = {k: v for k, v in d.items() if k not in ("rollouts", "group_id", "step", "run")}
        gid = d.get("group_id")
        for i, item in enumerate(rollouts):
            where = _join(prefix, f"rollouts[{i}]") or ""
            if not isinstance(item, dict):
                yield RecordError(file, line, where, f"expected a JSON object, got {type(item).__name__}")
                continue
            sub = _Defaults(
                case=case,
                group_id=str(gid) if gid is not None else defaults.group_id,
                group_index=i if gid is not None else defaults.group_index,
                group_size=len(rollouts) if gid is not None else defaults.group_size,
                step=d.get("step") if isinstance(d.get("step"), int) else defaults.step,
                run=_run_id(d.get("run")) or defaults.run,
                wrapper={**defaults.wrapper, **wrapper},
            )
            yield from _read_dict(item, source, ctx, line, where, child_id(i), sub)
        return
    if not _is_tau(d) and not _is_record(d, strict=False) and _is_variants(d):
        case = value.get("_case", defaults.case)
        for key, item in d.items():
            sub = _Defaults(**{**defaults.__dict__, "case": case})
            yield from _read_dict(item, source, ctx, line, _join(prefix, key) or "", child_id(key), sub,
                                  variant=key)
        return
    yield from _read_dict(value, source, ctx, line, prefix, child_id(0) if top else base_id, defaults)


def _read_dict(value: dict, source: Source, ctx: ReadContext, line: int | None, prefix: str, default_id: str,
               defaults: _Defaults, variant: str | None = None) -> Iterator[Rollout | RecordError]:
    d = _strip_case(value)
    if _is_native(d):
        yield RecordError(source.name, line, _join(prefix, "schema"),
                          "a native rollscope record inside a chat file; read it with the native reader")
        return
    if _is_tau(d):
        yield _tau_record(source, ctx, value, line, prefix, defaults)
        return
    if _is_wrapper(d) or (not _is_record(d, strict=False) and _is_variants(d)):
        yield from _read_value(value, source, ctx, line, prefix, default_id, defaults, top=False)
        return
    if not _is_record(d, strict=False):
        yield RecordError(source.name, line, prefix or None,
                          "not a chat record: expected messages, turns, turn_tokens, completion_ids, "
                          "logprobs, traj or rollouts")
        return
    yield _record(source, ctx, value, line, prefix, default_id, defaults, variant=variant)


def _error(source: Source, line: int | None, prefix: str, exc: Exception) -> RecordError:
    if isinstance(exc, FieldError):
        return RecordError(source.name, line, _join(prefix, exc.field), exc.message)
    assert isinstance(exc, ValidationError)
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    return RecordError(source.name, line, _join(prefix, loc), err["msg"])


# --- one chat record -----------------------------------------------------------------------

def _record(source: Source, ctx: ReadContext, value: dict, line: int | None, prefix: str, default_id: str,
            defaults: _Defaults, variant: str | None = None) -> Rollout | RecordError:
    try:
        return _build_record(source, ctx, value, line, prefix, default_id, defaults, variant)
    except (FieldError, ValidationError) as exc:
        return _error(source, line, prefix, exc)
    except Exception as exc:  # one odd record must not stop the file
        return RecordError(source.name, line, prefix or None, f"cannot read record: {type(exc).__name__}: {exc}")


def _build_record(source: Source, ctx: ReadContext, value: dict, line: int | None, prefix: str,
                  default_id: str, defaults: _Defaults, variant: str | None) -> Rollout:
    rec = _strip_case(value)
    case = value.get("_case", defaults.case)
    nodes: list[Node] = []
    calls: list[Call] = []
    extra: dict[str, Any] = {}

    used = set(_ENVELOPE)
    msgs = rec.get("messages")
    if msgs is not None:
        if not isinstance(msgs, list):
            raise FieldError("messages", f"expected a list of messages, got {type(msgs).__name__}")
        _append_messages(nodes, calls, msgs, "messages")
        used.add("messages")

    for key in ("turns", "turn_tokens"):
        if rec.get(key) is None:
            continue
        turns = _turn_list(rec[key], key)
        if msgs is not None:
            _align_turns(nodes, turns, key, extra)
        else:
            _chain_turns(nodes, calls, turns, extra)
        used.add(key)

    if rec.get("completion_ids") is not None:
        keys = ("prompt_ids", "prompt_pieces", "completion_ids", "completion_pieces", "logprobs", "finish_reason")
        parsed = _turn_list([{k: rec[k] for k in keys if k in rec}], "")[0]
        used.update(keys)
        assistants = [i for i, n in enumerate(nodes) if n.message.role == "assistant"]
        if assistants:
            _apply_completion(nodes[assistants[-1]], parsed)
        else:
            content = rec.get("response") if isinstance(rec.get("response"), str) else None
            if content is not None:
                used.add("response")
            _chain_turns(nodes, calls, [parsed], extra, content=content, top_level=True)
    elif _is_logprobs_shape(rec):
        _append_openai_logprobs(nodes, calls, rec)
        used.update(("logprobs", "response", "finish_reason"))

    rollout_id = rec.get("rollout_id")
    if rollout_id is not None and (not isinstance(rollout_id, (str, int)) or isinstance(rollout_id, bool)):
        raise FieldError("rollout_id", "expected a string")
    group = _group(rec, defaults)
    task = None
    if rec.get("task") is not None or rec.get("task_id") is not None:
        task = Task(key=str(rec["task_id"]) if rec.get("task_id") is not None else None, data=rec.get("task"))
    extra.update({k: v for k, v in rec.items() if k not in used})

    rollout = _assemble(source, ctx, rec, str(rollout_id) if rollout_id is not None else default_id,
                        nodes, calls, extra, group, task, defaults, line, prefix, case, variant)
    if rec.get("ending") is not None:
        rollout.ending, errors = _ending(rec["ending"], "ending")
        rollout.errors.extend(errors)
    endings.derive(rollout)
    endings.fill_evidence(rollout)
    return rollout


def _assemble(source: Source, ctx: ReadContext, rec: dict, rollout_id: str, nodes: list[Node], calls: list[Call],
              extra: dict, group: GroupRef | None, task: Task | None, defaults: _Defaults, line: int | None,
              prefix: str, case: Any, variant: str | None) -> Rollout:
    """The envelope fields shared by chat and tau-bench records."""
    reward = _reward(rec.get("reward"), "reward")
    metrics: dict[str, float | None] = {}
    if rec.get("metrics") is not None:
        if not isinstance(rec["metrics"], dict):
            raise FieldError("metrics", "expected an object")
        for k, v in rec["metrics"].items():
            if is_number_or_none(v):
                metrics[str(k)] = None if v is None else float(v)
            else:
                extra.setdefault("metrics", {})[k] = v
    components = rec.get("reward_components")
    if components is not None:
        extra["reward_components"] = components
        if isinstance(components, dict):
            for k, v in components.items():
                if is_number_or_none(v):
                    metrics[f"reward_components.{k}"] = None if v is None else float(v)
    tools = rec.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        extra["tools"] = tools
        tools = None
    stop_condition = rec.get("stop_condition")
    if stop_condition is not None and not isinstance(stop_condition, str):
        raise FieldError("stop_condition", "expected a string")
    step = rec.get("step") if isinstance(rec.get("step"), int) and not isinstance(rec.get("step"), bool) else None
    if rec.get("step") is not None and step is None:
        raise FieldError("step", "expected an integer training step")
    if case is not None:
        extra["_case"] = case
    if variant is not None:
        extra["variant"] = variant
    if defaults.wrapper:
        extra["wrapper"] = defaults.wrapper
    run_id = ctx.run_for(source, _run_id(rec.get("run")) or defaults.run)
    source_info: dict[str, Any] = {"format": NAME, "file": source.name, "line": line}
    if prefix:
        source_info["path"] = prefix
    return Rollout(
        id=rollout_id,
        run=RunRef(id=run_id),
        step=step if step is not None else (defaults.step if defaults.step is not None else ctx.step),
        group=group,
        task=task,
        tools=tools or [],
        nodes=nodes,
        calls=calls,
        reward=reward,
        metrics=metrics,
        stop_condition=stop_condition,
        extra=extra,
        source=source_info,
    )


def _run_id(run: Any) -> str | None:
    if isinstance(run, str) and run:
        return run
    if isinstance(run, dict) and isinstance(run.get("id"), (str, int)):
        return str(run["id"])
    return None


def _group(rec: dict, defaults: _Defaults) -> GroupRef | None:
    gid = rec.get("group_id")
    if gid is None and defaults.group_id is None:
        return None
    if gid is not None and not isinstance(gid, (str, int)):
        raise FieldError("group_id", "expected a string or integer")
    index = rec.get("group_index", defaults.group_index)
    size = rec.get("group_size", defaults.group_size)
    for name, v in (("group_index", index), ("group_size", size)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise FieldError(name, "expected an integer")
    return GroupRef(id=str(gid) if gid is not None else defaults.group_id, index=index, size=size)


def _reward(v: Any, path: str) -> float | None:
    """The reward as given: None stays None, NaN/Infinity stay non-finite (reward_status()
    classifies them). Booleans count as 0/1."""
    if v is None:
        return None
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    raise FieldError(path, f"expected a number or null, got {type(v).__name__}")


def _ending(v: Any, path: str) -> tuple[EndingInfo, list[Error]]:
    """`"reason"` or `{"reason", "message", "error_type", ...}` → EndingInfo (+ an Error when
    the ending is an error). The raw reason is `detail`; unknown reasons stay `unknown`."""
    if isinstance(v, str):
        info = EndingInfo(type=endings.from_reason(v), detail=v)
        return info, ([Error(type="error")] if info.type == Ending.error else [])
    if not isinstance(v, dict):
        raise FieldError(path, f"expected a string or an object, got {type(v).__name__}")
    reason, message, error_type = v.get("reason"), v.get("message"), v.get("error_type")
    for name, x in (("reason", reason), ("message", message), ("error_type", error_type)):
        if x is not None and not isinstance(x, str):
            raise FieldError(f"{path}.{name}", "expected a string")
    kind = endings.from_reason(reason)
    if reason is None and error_type:
        kind = Ending.error
    info = EndingInfo(type=kind, detail=reason if reason is not None else error_type, message=message,
                      extra={k: x for k, x in v.items() if k not in ("reason", "message")})
    errors = [Error(type=error_type or "error", message=message or "")] if kind == Ending.error else []
    return info, errors


# --- messages ------------------------------------------------------------------------------

def _append_messages(nodes: list[Node], calls: list[Call], msgs: list, path: str) -> None:
    for i, m in enumerate(msgs):
        p = f"{path}[{i}]"
        message, timestamp, finish = _message(m, p)
        idx = len(nodes)
        node = Node(parent=idx - 1 if nodes else None, message=message,
                    sampled=message.role == "assistant", timestamp=timestamp)
        nodes.append(node)
        if finish is not None:
            calls.append(_call(idx, finish))


def _message(m: Any, path: str) -> tuple[Message, float | None, str | None]:
    """One OpenAI-shaped message → (Message, timestamp, finish_reason)."""
    if not isinstance(m, dict):
        raise FieldError(path, f"expected a message object, got {type(m).__name__}")
    if "role" not in m or m["role"] is None:
        raise FieldError(f"{path}.role", "message has no role")
    role = m["role"]
    if not isinstance(role, str):
        raise FieldError(f"{path}.role", f"role must be a string, got {type(role).__name__}")
    key = role.strip().lower()
    mapped = key if key in CORE_ROLES else ROLE_MAP.get(key, "user")
    extra = {k: v for k, v in m.items()
             if k not in ("role", "content", "tool_calls", "function_call", "tool_call_id", "name",
                          "reasoning_content", "timestamp", "finish_reason")}
    if mapped != role:
        extra["source_role"] = role

    tool_calls = _tool_calls(m, path)
    tool_call_id = m.get("tool_call_id")
    if tool_call_id is not None:
        if isinstance(tool_call_id, int) and not isinstance(tool_call_id, bool):
            tool_call_id = str(tool_call_id)
        elif not isinstance(tool_call_id, str):
            raise FieldError(f"{path}.tool_call_id", "expected a string")
    name = m.get("name")
    if name is not None and not isinstance(name, str):
        raise FieldError(f"{path}.name", "expected a string")
    reasoning = m.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        raise FieldError(f"{path}.reasoning_content", "expected a string")
    timestamp = m.get("timestamp")
    if not is_number_or_none(timestamp):
        extra["timestamp"] = timestamp
        timestamp = None
    finish = m.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        extra["finish_reason"] = finish
        finish = None
    message = Message(role=mapped, content=_content(m.get("content"), f"{path}.content"),
                      reasoning_content=reasoning, tool_calls=tool_calls or None, tool_call_id=tool_call_id,
                      name=name, extra=extra)
    return message, timestamp, finish


def _content(content: Any, path: str) -> str | list[dict] | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if isinstance(part, dict):
                parts.append(part)
            elif isinstance(part, str):
                parts.append({"type": "text", "text": part})
            else:
                raise FieldError(f"{path}[{k}]", f"expected a content part object, got {type(part).__name__}")
        return parts
    raise FieldError(path, f"expected a string, a list of parts or null, got {type(content).__name__}")


def _tool_calls(m: dict, path: str) -> list[ToolCall]:
    out: list[ToolCall] = []
    raw = m.get("tool_calls")
    if raw is not None:
        if not isinstance(raw, list):
            raise FieldError(f"{path}.tool_calls", f"expected a list, got {type(raw).__name__}")
        for j, tc in enumerate(raw):
            out.append(_tool_call(tc, f"{path}.tool_calls[{j}]"))
    legacy = m.get("function_call")
    if legacy is not None:
        if not isinstance(legacy, dict):
            raise FieldError(f"{path}.function_call", "expected an object")
        name = legacy.get("name")
        if not isinstance(name, str) or not name:
            raise FieldError(f"{path}.function_call.name", "tool call has no function name")
        out.append(ToolCall(id=None, name=name, arguments=_arguments(legacy.get("arguments")),
                            extra={"source_field": "function_call"}))
    return out


def _tool_call(tc: Any, path: str) -> ToolCall:
    if not isinstance(tc, dict):
        raise FieldError(path, f"expected a tool call object, got {type(tc).__name__}")
    extra = {k: v for k, v in tc.items() if k not in ("id", "type", "function", "name", "arguments")}
    if tc.get("type") not in (None, "function"):
        extra["type"] = tc["type"]
    fn = tc.get("function")
    if fn is not None:
        if not isinstance(fn, dict):
            raise FieldError(f"{path}.function", f"expected an object, got {type(fn).__name__}")
        name, args, name_path = fn.get("name"), fn.get("arguments"), f"{path}.function.name"
        extra.update({f"function.{k}": v for k, v in fn.items() if k not in ("name", "arguments")})
        if args is not None and not isinstance(args, str):
            # OpenAI's wire shape carries `function.arguments` as a JSON string; an object here is
            # the server's bug (ml-explore/mlx-lm#1065), reported by malformed_tool_arguments.
            extra["arguments_source_type"] = "object" if isinstance(args, dict) else type(args).__name__
    else:
        name, args, name_path = tc.get("name"), tc.get("arguments"), f"{path}.name"
    if not isinstance(name, str) or not name:
        raise FieldError(name_path, "tool call has no function name")
    cid = tc.get("id")
    if cid is not None:
        if isinstance(cid, int) and not isinstance(cid, bool):
            cid = str(cid)
        elif not isinstance(cid, str):
            raise FieldError(f"{path}.id", "expected a string")
    return ToolCall(id=cid, name=name, arguments=_arguments(args), extra=extra)


def _arguments(args: Any) -> str:
    """The raw argument string; a dict (Inspect, Tunix) is serialised, malformed JSON kept."""
    if args is None:
        return ""
    if isinstance(args, str):
        return args
    return json.dumps(args, ensure_ascii=False)


def _call(node: int, raw: str | None, usage: Usage | None = None) -> Call:
    finish = FINISH_REASONS.get(raw.strip().lower()) if raw else None
    return Call(node=node, finish_reason=finish, finish_reason_raw=raw, usage=usage)


# --- tokens --------------------------------------------------------------------------------

def piece_hex(piece: Any) -> str | None:
    """One token's source text as lowercase hex of its bytes. Text is UTF-8 encoded (lone
    surrogates via `surrogatepass`, so this never raises); a list of ints is taken as bytes;
    OpenAI-style `bytes:\\xf0\\x9f` / `\\xf0\\x9f` escape strings are decoded to those bytes."""
    if piece is None:
        return None
    if isinstance(piece, (bytes, bytearray)):
        return bytes(piece).hex()
    if isinstance(piece, list):
        if not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255 for b in piece):
            raise ValueError("byte values must be integers 0-255")
        return bytes(piece).hex()
    if isinstance(piece, str):
        m = _HEX_ESCAPES.match(piece)
        if m:
            return m.group(1).replace("\\x", "").lower()
        return piece.encode("utf-8", "surrogatepass").hex()
    raise ValueError(f"expected text or a list of bytes, got {type(piece).__name__}")


def _pieces(v: Any, path: str) -> list[str | None] | None:
    if v is None:
        return None
    if not isinstance(v, list):
        raise FieldError(path, f"expected a list of token pieces, got {type(v).__name__}")
    out = []
    for k, p in enumerate(v):
        try:
            out.append(piece_hex(p))
        except ValueError as exc:
            raise FieldError(f"{path}[{k}]", str(exc)) from None
    return out


@dataclass
class _Turn:
    prompt_ids: list[int] | None
    prompt_hex: list[str | None] | None
    completion_ids: list[int] | None
    completion_hex: list[str | None] | None
    logprobs: list[float | None] | None
    finish_reason: str | None
    rest: dict


def _turn_list(v: Any, path: str) -> list[_Turn]:
    if not isinstance(v, list):
        raise FieldError(path, f"expected a list of turns, got {type(v).__name__}")
    out = []
    for t, turn in enumerate(v):
        p = _join(path, f"[{t}]") if path else ""
        if not isinstance(turn, dict):
            raise FieldError(p, f"expected a turn object, got {type(turn).__name__}")
        sub = (lambda name: _join(p, name)) if p else (lambda name: name)
        finish = turn.get("finish_reason")
        if finish is not None and not isinstance(finish, str):
            raise FieldError(sub("finish_reason"), "expected a string")
        out.append(_Turn(
            prompt_ids=ints(turn.get("prompt_ids"), sub("prompt_ids")),
            prompt_hex=_pieces(turn.get("prompt_pieces"), sub("prompt_pieces")),
            completion_ids=ints(turn.get("completion_ids"), sub("completion_ids")),
            completion_hex=_pieces(turn.get("completion_pieces"), sub("completion_pieces")),
            logprobs=floats(turn.get("logprobs"), sub("logprobs")),
            finish_reason=finish,
            rest={k: x for k, x in turn.items() if k not in (
                "prompt_ids", "prompt_pieces", "completion_ids", "completion_pieces", "logprobs", "finish_reason")},
        ))
    return out


def _set_tokens(node: Node, ids: list[int], *, sampled: bool, logprobs: list[float | None] | None,
                hexes: list[str | None] | None) -> Node:
    node.token_ids = list(ids)
    fill_node(node, mask=[sampled] * len(ids), logprobs=logprobs)
    if hexes is not None:
        node.extra["token_bytes"] = fit(node, "token_bytes", hexes)
    return node


def _apply_completion(node: Node, turn: _Turn) -> None:
    """Put one turn's completion tokens on `node` (sampled: mask 1, logprobs fitted)."""
    if turn.completion_ids is not None:
        _set_tokens(node, turn.completion_ids, sampled=True, logprobs=turn.logprobs, hexes=turn.completion_hex)
    elif turn.logprobs is not None:
        node.extra["logprobs_without_tokens"] = turn.logprobs
    if turn.rest:
        node.extra["turn_fields"] = turn.rest


def _align_turns(nodes: list[Node], turns: list[_Turn], path: str, extra: dict) -> None:
    """Token data per assistant message, in order: turn k → k-th assistant node. Surplus turns
    are kept in `rollout.extra["unaligned_<path>"]`; prompt ids are checked for drift."""
    assistants = [i for i, n in enumerate(nodes) if n.message.role == "assistant"]
    for k, turn in enumerate(turns):
        if k >= len(assistants):
            extra.setdefault(f"unaligned_{path}", []).append(k)
            continue
        node = nodes[assistants[k]]
        _apply_completion(node, turn)
        if turn.prompt_ids is not None:  # the request's context; message nodes carry no prompt tokens
            node.extra["prompt_ids"] = turn.prompt_ids
            if turn.prompt_hex is not None:
                node.extra["prompt_bytes"] = turn.prompt_hex
        if k > 0:
            drift = _drift(turns[k - 1], turn, k)
            if drift:
                node.extra["token_drift"] = drift
                extra["token_drift"] = True
    if len(turns) != len(assistants):
        extra[f"{path}_count_mismatch"] = {"assistant_messages": len(assistants), path: len(turns)}


def _first_divergence(expected: list[int], found: list[int]) -> tuple[int, int, int | None] | None:
    for i, e in enumerate(expected):
        if i >= len(found):
            return i, e, None
        if found[i] != e:
            return i, e, found[i]
    return None


def _drift(prev: _Turn, turn: _Turn, t: int) -> dict | None:
    if prev.prompt_ids is None or turn.prompt_ids is None:
        return None
    expected = prev.prompt_ids + (prev.completion_ids or [])
    div = _first_divergence(expected, turn.prompt_ids)
    if div is None:
        return None
    i, e, f = div
    return {"turn": t, "index": i, "expected": e, "found": f}


def _chain_turns(nodes: list[Node], calls: list[Call], turns: list[_Turn], extra: dict,
                 content: str | None = None, top_level: bool = False) -> None:
    """prompt → completion per turn, one branch while each prompt extends the previous prompt +
    completion; a new root (full prompt, `extra.token_drift`) where it does not."""
    last: int | None = len(nodes) - 1 if nodes else None
    prev: _Turn | None = None
    for t, turn in enumerate(turns):
        parent = last
        prompt_len = None
        if turn.prompt_ids is not None:
            prompt_len = len(turn.prompt_ids)
            ids, hexes, drift = turn.prompt_ids, turn.prompt_hex, None
            if prev is not None and prev.prompt_ids is not None:
                drift = _drift(prev, turn, t)
                if drift is None:
                    cut = len(prev.prompt_ids) + len(prev.completion_ids or [])
                    ids = turn.prompt_ids[cut:]
                    hexes = turn.prompt_hex[cut:] if turn.prompt_hex is not None else None
                else:
                    parent = None  # re-tokenization drift: a new branch holding the full prompt
            if ids or drift or parent is None:
                node = Node(parent=parent, message=Message(role="user"), extra={"segment": "prompt", "turn": t})
                if drift:
                    node.extra["token_drift"] = drift
                    extra["token_drift"] = True
                _set_tokens(node, ids, sampled=False, logprobs=None, hexes=hexes)
                _text_from_pieces(node)
                nodes.append(node)
                parent = len(nodes) - 1
        elif prev is not None:
            extra.setdefault("prompt_ids_missing", []).append(t)
        if turn.completion_ids is not None or turn.logprobs is not None:
            node = Node(parent=parent, message=Message(role="assistant", content=content), sampled=True,
                        extra={} if top_level else {"turn": t})
            _apply_completion(node, turn)
            _text_from_pieces(node)
            nodes.append(node)
            parent = len(nodes) - 1
            if prompt_len is not None or turn.finish_reason is not None:
                usage = Usage(input_tokens=prompt_len, output_tokens=len(turn.completion_ids or []))
                calls.append(_call(parent, turn.finish_reason, usage))
        last = parent
        prev = turn


def _text_from_pieces(node: Node) -> None:
    """A token-only node has no message text; when the source gave every token's piece, the
    text is those bytes decoded (U+FFFD where they are not valid UTF-8), marked as derived."""
    hexes = node.extra.get("token_bytes")
    if node.message.content is not None or not hexes or "token_bytes" in node.extra.get("source_lengths", {}):
        return
    if any(h is None for h in hexes):
        return
    node.message.content = bytes.fromhex("".join(hexes)).decode("utf-8", "replace")
    node.extra["content_from"] = "token_bytes"


def _append_openai_logprobs(nodes: list[Node], calls: list[Call], rec: dict) -> None:
    """`{response, logprobs: {content: [...]} | [...]}` → one sampled assistant node."""
    lp = rec["logprobs"]
    entries, base = (lp["content"], "logprobs.content") if isinstance(lp, dict) else (lp, "logprobs")
    response = rec.get("response")
    if response is not None and not isinstance(response, str):
        raise FieldError("response", "expected a string")
    texts, hexes, values, tops, ids = [], [], [], [], []
    for k, e in enumerate(entries):
        p = f"{base}[{k}]"
        if not isinstance(e, dict):
            raise FieldError(p, f"expected a token object, got {type(e).__name__}")
        token = e.get("token")
        if token is not None and not isinstance(token, str):
            raise FieldError(f"{p}.token", "expected a string")
        if not is_number_or_none(e.get("logprob")):
            raise FieldError(f"{p}.logprob", "expected a number or null")
        raw_bytes = e.get("bytes")
        try:
            hexes.append(piece_hex(raw_bytes) if raw_bytes is not None else piece_hex(token))
        except ValueError as exc:
            raise FieldError(f"{p}.bytes", str(exc)) from None
        texts.append(token)
        values.append(None if e.get("logprob") is None else float(e["logprob"]))
        tops.append(e.get("top_logprobs"))
        tid = e.get("token_id", e.get("id"))
        ids.append(tid if isinstance(tid, int) and not isinstance(tid, bool) else None)
    node = Node(parent=len(nodes) - 1 if nodes else None, message=Message(role="assistant", content=response),
                sampled=True)
    # OpenAI gives no token ids. None are invented: an unrecorded id is -1 (docs/trace-format.md),
    # which keeps mask, logprobs and the source's bytes in lockstep per position.
    known = bool(entries) and all(i is not None for i in ids)
    _set_tokens(node, ids if known else [-1] * len(entries), sampled=True, logprobs=values, hexes=hexes)
    node.extra["token_text"] = texts
    if any(t for t in tops):
        node.extra["top_logprobs"] = tops
    nodes.append(node)
    finish = rec.get("finish_reason")
    if isinstance(finish, str):
        calls.append(_call(len(nodes) - 1, finish))


# --- tau-bench -----------------------------------------------------------------------------

def _tau_record(source: Source, ctx: ReadContext, value: dict, line: int | None, prefix: str,
                defaults: _Defaults) -> Rollout | RecordError:
    try:
        rec = _strip_case(value)
        info = rec.get("info") or {}
        if not isinstance(info, dict):
            raise FieldError("info", "expected an object")
        traj = rec["traj"]
        nodes: list[Node] = []
        calls: list[Call] = []
        _append_messages(nodes, calls, traj, "traj")
        task_id, trial = rec.get("task_id"), rec.get("trial")
        if not isinstance(task_id, (str, int)) or isinstance(task_id, bool):
            raise FieldError("task_id", "expected an integer or string")
        if trial is not None and (not isinstance(trial, int) or isinstance(trial, bool)):
            raise FieldError("trial", "expected an integer")
        rid = f"task{task_id}-trial{trial}" if trial is not None else f"task{task_id}"
        extra = {k: v for k, v in rec.items() if k not in ("traj", "task_id", "trial", "reward")}
        group = GroupRef(id=str(task_id), index=trial)
        task = Task(type="tau-bench", key=str(task_id), data=info.get("task"))
        fields = {"reward": rec.get("reward")}
        rollout = _assemble(source, ctx, fields, rid, nodes, calls, extra, group, task, defaults, line, prefix,
                            value.get("_case", defaults.case), None)
        rollout.ending, errors = _tau_ending(info, traj)
        rollout.errors.extend(errors)
        endings.fill_evidence(rollout)
        return rollout
    except (FieldError, ValidationError) as exc:
        return _error(source, line, prefix, exc)
    except Exception as exc:  # one odd record must not stop the file
        return RecordError(source.name, line, prefix or None, f"cannot read record: {type(exc).__name__}: {exc}")


def _tau_ending(info: dict, traj: list) -> tuple[EndingInfo, list[Error]]:
    """tau-bench writes no ending; its code decides (envs/base.py `Env.step`, agents'
    `solve` loop, run.py):

    - `info.error` (run.py caught an exception; traj is empty) → error.
    - `info.source` is a terminate tool (`transfer_to_human_agents`: the env sets done) →
      submitted: the agent ended the episode itself; tau-bench scores it normally.
    - the last message is the user simulator's and contains `###STOP###` (the env sets
      `done = "###STOP###" in observation`, `info.source = "user"`) → submitted: the
      conversation finished and is scored normally (tau2 calls this `user_stop`, which
      endings.REASONS also maps to submitted).
    - otherwise, with a non-empty trajectory → truncated: the solve loop only stops on done or
      after `max_num_steps` (default 30), so without a done marker the step budget ran out.
    - an empty trajectory without an error → unknown.
    """
    if info.get("error") is not None:
        message = str(info["error"])
        tb = info.get("traceback")
        return (EndingInfo(type=Ending.error, detail="error", message=message),
                [Error(type="error", message=message, traceback=tb if isinstance(tb, str) else None)])
    source = info.get("source")
    if source in TAU_TERMINATE_TOOLS:
        return EndingInfo(type=Ending.submitted, detail=str(source),
                          message=f"the agent called the terminate tool {source}; tau-bench set done"), []
    last = traj[-1] if traj else None
    if isinstance(last, dict) and last.get("role") == "user":
        content = last.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        if TAU_STOP in text:
            return EndingInfo(type=Ending.submitted, detail=TAU_STOP,
                              message=f"the user simulator ended the conversation (info.source={source})"), []
    if not traj:
        return EndingInfo(type=Ending.unknown, detail=None if source is None else f"info.source={source}"), []
    return EndingInfo(type=Ending.truncated, detail=f"not done (info.source={source})",
                      message="no ###STOP### and no terminate tool: tau-bench's solve loop ran out of "
                              "max_num_steps"), []

