"""OpenAI-style chat transcripts, with or without token data (docs/formats-chat.md).

The generic reader: the registry tries it last, so it never needs to know other formats. It
claims a file only by the chat shapes below. Shapes read (a `_case` key, as in tests/fixtures/cases,
is dropped before parsing and kept in `rollout.extra["_case"]`):

1. Chat records: `{messages: [...], rollout_id?, reward?, reward_components?, ending?,
   group_id?, ...}` as one JSON object, a JSON array of them, JSONL (one per line; a bad line is
   a RecordError with its line number and the lines around it are still read), a
   `{rollouts: [...], group_id?}` wrapper, or a bare message list `[{role, content}, ...]`.
   `ending` is `{"reason", "message", "error_type"}` (or `{type, detail}`) or a string; it and the
   record's `stop_condition`, `termination_reason`, `stop_reason`, `finish_reason` go through the
   one endings table, the first known word deciding (`_stated_ending`), kept as `ending.detail`.
2. Token-level records:
   - `turns: [{prompt_ids, completion_ids, logprobs, prompt_pieces?, completion_pieces?}]`:
     a chain of prompt node (mask 0) → completion node (sampled, mask 1). Turn t+1's prompt
     holds only the delta when it starts with prompt[t] + completion[t]; otherwise (token
     drift) a new root node holds the full prompt and `extra["token_drift"]` records the first
     divergence `{turn, index, expected, found}`. Nothing is repaired; both sequences are kept
     (`_build.RolloutBuilder.token_turn`).
   - top-level `completion_ids` + `logprobs` (+ `completion_pieces`, `prompt_ids`): one turn.
   - `turn_tokens: [{completion_ids, logprobs, completion_pieces?}]` aligned, in order, to the
     assistant messages of `messages` (so are `turns` when `messages` is also given).
   - a turn may also say what the chat completion response said of its choice (issue 20):
     `logprobs` as OpenAI `{content: [{token, logprob, bytes}]}` entries (values and bytes),
     `finish_reason`, `usage` and the request's `max_tokens`, which go on the message's Call
     (`_chat_tokens.token_turns`, `align_turns`).
   - OpenAI logprobs: `{response: str, logprobs: {content: [{token, logprob, bytes,
     top_logprobs?}]} | [...]}`. OpenAI gives no token ids, so none are invented: each token's
     id is -1 ("not recorded"), with its bytes in `node.extra["token_bytes"]`, its logprob in
     `logprobs` and `mask` 1, unless every entry carries an integer `token_id`.
   - An object whose every value is one of the records above (`{variant_a: {...}, ...}`)
     gives one rollout per key.

Source-supplied token text (pieces, OpenAI `bytes`) becomes `node.extra["token_bytes"]`: one
lowercase hex string per token. Every per-token array is fitted through `ingest.align` so a
length mismatch is recorded in `node.extra["source_lengths"]`.

Messages, tool calls, finish reasons and logprobs are converted by `_openai` (one node per
message, chained by `parent`; assistant messages are `sampled`).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ingest import endings
from ingest.errors import RecordError
from ingest.fields import FieldError, is_number_or_none
from ingest.formats import _openai
from ingest.formats._build import RolloutBuilder, apply_completion, breakdown_components
from ingest.formats._chat_tokens import align_turns, append_openai_logprobs, token_turns
from ingest.formats.base import ReadContext, guarded, id_text, json_type, shape_error
from ingest.formats.base import join_path as _join
from ingest.schema import Ending, EndingInfo, Error, GroupRef, Rollout, RunRef, Task
from ingest.source import Source

NAME = "chat"
EXPECTS = ("OpenAI-style chat records (`messages`, `turns`, `turn_tokens`, `completion_ids` or a "
           "`logprobs.content` list), a `{rollouts: [...]}` wrapper, or a bare `[{role, content}]` list")

# Keys that make a dict a chat record for `sniff` (strict) ...
TOKEN_KEYS = ("turns", "turn_tokens", "completion_ids")
# ... and the looser set accepted once a file has been claimed (e.g. case 10's reward-only rows).
LENIENT_KEYS = ("rollout_id", "reward", "ending")


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
    """True for the shapes in the module docstring (first record, or the whole document)."""
    if source.kind not in ("json", "jsonl"):
        return False
    return _claims(source.first)


def _claims(value: Any) -> bool:
    if isinstance(value, dict):
        d = _strip_case(value)
        return _is_wrapper(d, strict=True) or _is_record(d, strict=True) or _is_variants(d)
    if isinstance(value, list) and value:
        first = value[0]
        if not isinstance(first, dict):
            return False
        if _is_message_list(value):
            return True
        return _is_record(_strip_case(first), strict=True)
    return False


def _strip_case(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "_case"} if "_case" in d else d

def _is_wrapper(d: dict, strict: bool = False) -> bool:
    rollouts = d.get("rollouts")
    if not isinstance(rollouts, list) or "messages" in d:
        return False
    if not strict:
        return True
    items = [_strip_case(r) for r in rollouts if isinstance(r, dict)]
    return bool(items) and len(items) == len(rollouts) and all(
        _is_record(r, strict=False) for r in items)


def _is_message_list(value: list) -> bool:
    return bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and not _is_record(m, strict=False)
        for m in value)

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
        return not msgs or isinstance(msgs[0], dict)  # a list of message objects
    if any(isinstance(d.get(k), list) for k in TOKEN_KEYS):
        return True
    if _is_logprobs_shape(d) and not isinstance(d.get("response"), dict):
        return True
    return not strict and any(k in d for k in LENIENT_KEYS)


def _is_variants(d: dict) -> bool:
    values = list(d.values())
    return bool(values) and all(isinstance(v, dict) and _is_record(_strip_case(v), strict=True) for v in values)


# --- reading -------------------------------------------------------------------------------

def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    stem = ctx.source_key(source)
    if source.kind == "jsonl":
        for lineno, value in source.lines():
            if isinstance(value, RecordError):
                yield value
                continue
            yield from _read_value(value, source, ctx, lineno, "", f"{stem}#{lineno - 1}", _Defaults(), top=False)
    elif source.streamed:  # a top-level array too big to load: its records one at a time
        if _is_message_list(source.first):
            yield RecordError(source.name, None, None, f"one conversation of {source.size} bytes is more than "
                                                       "is read at once: split it into records")
            return
        yield from _read_items(source.elements(), source, ctx, None, "", lambda i: f"{stem}#{i}", _Defaults())
    else:
        yield from _read_value(source.document, source, ctx, None, "", stem, _Defaults(), top=True)


def _read_items(items: Iterator[tuple[int, Any]], source: Source, ctx: ReadContext, line: int | None, prefix: str,
                child_id: Any, defaults: _Defaults) -> Iterator[Rollout | RecordError]:
    """The records of a list, each at `prefix[i]` with default id `child_id(i)`."""
    for i, item in items:
        where = _join(prefix, f"[{i}]") or ""
        if isinstance(item, RecordError):
            yield item
        elif not isinstance(item, dict):
            yield RecordError(source.name, line, where, f"expected a JSON object, got {type(item).__name__}")
        else:
            yield from _read_dict(item, source, ctx, line, where, child_id(i), defaults)


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
        yield from _read_items(enumerate(value), source, ctx, line, prefix, child_id, defaults)
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
    if not _is_record(d, strict=False) and _is_variants(d):
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
    if _is_wrapper(d) or (not _is_record(d, strict=False) and _is_variants(d)):
        yield from _read_value(value, source, ctx, line, prefix, default_id, defaults, top=False)
        return
    if not _is_record(d, strict=False):
        yield _not_a_record(d, source.name, line, prefix)
        return
    yield _record(source, ctx, value, line, prefix, default_id, defaults, variant=variant)


def _not_a_record(d: dict, file: str, line: int | None, prefix: str) -> RecordError:
    """Why `d` is not a chat record, naming the field: `messages` of the wrong type or holding
    something other than message objects, a token key that is not an array, `logprobs` of no
    known shape, else `messages` missing."""
    msgs = d.get("messages")
    if isinstance(msgs, list) and msgs and not isinstance(msgs[0], dict):
        return RecordError(file, line, _join(prefix or None, "messages[0]"),
                           f"must be a message object ({{role, content}}), got {json_type(msgs[0])}")
    if "logprobs" in d and not any(k in d for k in ("messages", *TOKEN_KEYS, "rollouts")):
        return RecordError(file, line, _join(prefix or None, "logprobs"),
                           "expected {content: [...]} or an array of {token, logprob}, got "
                           f"{json_type(d['logprobs'])}")
    return shape_error(file, line, prefix, d, "chat record", (
        ("messages", "array"), ("turns", "array"), ("turn_tokens", "array"), ("completion_ids", "array"),
        ("logprobs", "any"), ("rollouts", "array")), one_of=True)


# --- one chat record -----------------------------------------------------------------------

def _record(source: Source, ctx: ReadContext, value: dict, line: int | None, prefix: str, default_id: str,
            defaults: _Defaults, variant: str | None = None) -> Rollout | RecordError:
    return guarded(source.name, line, prefix,
                   lambda: _build_record(source, ctx, value, line, prefix, default_id, defaults, variant))


def _build_record(source: Source, ctx: ReadContext, value: dict, line: int | None, prefix: str,
                  default_id: str, defaults: _Defaults, variant: str | None) -> Rollout:
    rec = _strip_case(value)
    case = value.get("_case", defaults.case)
    b = RolloutBuilder()
    extra: dict[str, Any] = {}

    used = set(_ENVELOPE)
    msgs = rec.get("messages")
    if msgs is not None:
        if not isinstance(msgs, list):
            raise FieldError("messages", f"expected a list of messages, got {type(msgs).__name__}")
        _openai.add_messages(b, msgs, "messages")
        used.add("messages")

    for key in ("turns", "turn_tokens"):
        if rec.get(key) is None:
            continue
        turns = token_turns(rec[key], key)
        if msgs is not None:
            align_turns(b, turns, key, extra)
        else:
            for t, turn in enumerate(turns):
                b.token_turn(turn, t)
        used.add(key)

    if rec.get("completion_ids") is not None:
        keys = ("prompt_ids", "prompt_pieces", "completion_ids", "completion_pieces", "logprobs", "finish_reason")
        parsed = token_turns([{k: rec[k] for k in keys if k in rec}], "")[0]
        used.update(keys)
        assistants = b.assistants()
        if assistants:
            apply_completion(assistants[-1], parsed)
        else:
            content = rec.get("response") if isinstance(rec.get("response"), str) else None
            if content is not None:
                used.add("response")
            b.token_turn(parsed, 0, content=content, turn_extra=False)
    elif _is_logprobs_shape(rec):
        append_openai_logprobs(b, rec)
        used.update(("logprobs", "response", "finish_reason"))

    rollout_id = id_text(rec.get("rollout_id"), "rollout_id")
    group = _group(rec, defaults)
    task = None
    if rec.get("task") is not None or rec.get("task_id") is not None:
        task = Task(key=id_text(rec.get("task_id"), "task_id"), data=rec.get("task"))
    extra.update({k: v for k, v in rec.items() if k not in used})

    rollout = _assemble(source, ctx, rec, str(rollout_id) if rollout_id is not None else default_id,
                        b, extra, group, task, defaults, line, prefix, case, variant)
    rollout.ending, errors = _stated_ending(rec)
    rollout.errors.extend(errors)
    endings.derive(rollout)
    return b.finish(rollout)


def _assemble(source: Source, ctx: ReadContext, rec: dict, rollout_id: str, b: RolloutBuilder,
              extra: dict, group: GroupRef | None, task: Task | None, defaults: _Defaults, line: int | None,
              prefix: str, case: Any, variant: str | None) -> Rollout:
    """The envelope fields of a chat record."""
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
        nodes=b.nodes,
        calls=b.calls,
        reward=reward,
        rewards=breakdown_components(components),
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
    gid = id_text(rec.get("group_id"), "group_id")
    if gid is None and defaults.group_id is None:
        return None
    index = rec.get("group_index", defaults.group_index)
    size = rec.get("group_size", defaults.group_size)
    for name, v in (("group_index", index), ("group_size", size)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise FieldError(name, "expected an integer")
    return GroupRef(id=gid if gid is not None else defaults.group_id, index=index, size=size)


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


# A chat record's own ending fields, in the order they are consulted (docs/formats-chat.md,
# "Endings"): the `ending` field, then the episode's reasons, then the last generation's.
REASON_FIELDS = ("stop_condition", "termination_reason", "stop_reason", "finish_reason")
# Inside an `ending` object: its `reason`, Rollscope's own `{type, detail}`, then the same names.
ENDING_KEYS = ("reason", "type", "termination_reason", "stop_reason", "finish_reason")


def _stated_ending(rec: dict) -> tuple[EndingInfo, list[Error]]:
    """The ending a chat record states, through the one table (`endings.first_known`): the
    `ending` field (`_ending`), then the record's `REASON_FIELDS`. A word the table does not know
    never hides a later field it knows; the deciding word is `detail`, unread words are kept in
    `ending.extra["not_in_table"]`. Nothing stated: unknown, left to `endings.derive`."""
    info, errors = (_ending(rec["ending"], "ending") if rec.get("ending") is not None else (EndingInfo(), []))
    if info.type != Ending.unknown:
        return info, errors
    words = [(k, rec.get(k)) for k in REASON_FIELDS if isinstance(rec.get(k), str) and rec[k].strip()]
    kind, _ = endings.first_known((k, w) for k, w in words)
    if kind == Ending.unknown:
        if info.detail is None and words:
            info.detail = words[0][1]
        return info, errors
    key, word = next((k, w) for k, w in words if endings.from_reason(w) == kind)
    unread = ([f"ending={info.detail}"] if info.detail is not None else []) + [
        f"{k}={w}" for k, w in words if endings.from_reason(w) == Ending.unknown]
    extra = {**info.extra, **({"not_in_table": unread} if unread else {})}
    info = EndingInfo(type=kind, detail=word, message=info.message or f"{key} = {word!r}", extra=extra)
    return info, ([Error(type=word, message=info.message or "")] if kind == Ending.error else [])


def _ending(v: Any, path: str) -> tuple[EndingInfo, list[Error]]:
    """`"reason"` or `{"reason", "message", "error_type", ...}` → EndingInfo (+ an Error when
    the ending is an error). The reason is the first of `ENDING_KEYS` the table knows (`type`
    with its `detail`: Rollscope's own shape); the raw reason is `detail`; unknown reasons stay
    `unknown`."""
    if isinstance(v, str):
        info = EndingInfo(type=endings.from_reason(v), detail=v)
        return info, ([Error(type="error")] if info.type == Ending.error else [])
    if not isinstance(v, dict):
        raise FieldError(path, f"expected a string or an object, got {type(v).__name__}")
    message, error_type = v.get("message"), v.get("error_type")
    for name in (*ENDING_KEYS, "message", "error_type", "detail"):
        x = v.get(name)
        if x is not None and not isinstance(x, str):
            raise FieldError(f"{path}.{name}", "expected a string")
    kind, key = endings.first_known((k, v.get(k)) for k in ENDING_KEYS)
    reason = v.get(key) if key is not None else None
    detail = v.get("detail") or reason if key == "type" else reason
    if reason is None and error_type:
        kind = Ending.error
    info = EndingInfo(type=kind, detail=detail if detail is not None else error_type, message=message,
                      extra={k: x for k, x in v.items() if k not in ("reason", "message")})
    errors = [Error(type=error_type or "error", message=message or "")] if kind == Ending.error else []
    return info, errors
