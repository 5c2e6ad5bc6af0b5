"""Inspect AI eval logs (UKGovernmentBEIS/inspect_ai), in both forms:

- `.json`: one `EvalLog` document `{version, status, eval, plan, results, stats, samples: [...]}`
  (`src/inspect_ai/log/_log.py`, written by `log/_recorders/json.py`);
- `.eval`: a zip with `header.json` (or `_journal/start.json` while running), one
  `samples/{id}_epoch_{epoch}.json` per sample, `summaries.json`, `reductions.json`
  (`log/_recorders/eval.py`).

One `EvalSample` is one rollout, read one at a time: each zip member is parsed on its own, and a
`.json` log whose `samples` the source has not already parsed is streamed with ijson, so a large
log never sits whole in memory.

Mapping (docs/formats.md, "Inspect"):
- rollout id `{task}:{sample id}:{epoch}`; run = `--run`, else `eval.run_id`; group = the sample
  (`{task}:{sample id}`) with the epoch as its index (epochs count from 1, group indices from 0:
  epoch N is index N-1; the epoch itself stays in `extra.epoch`) and `config.epochs` as its size.
- `messages` → nodes in order (system, user, assistant, tool; `ChatMessage*` in
  `model/_chat_message.py`). Content parts: `text` kept, `reasoning` → `reasoning_content`
  (`redacted: true` shown as redacted), image / audio / video / document parts → typed media
  placeholders by the one normaliser (`_openai.normalize_parts`: the bytes of a `data:` URL are
  stored once by sha256), other parts (data, tool_use) kept as they are.
  Tool calls `{id, function, arguments: dict}` → raw argument string; a call Inspect could not
  parse (`arguments: {}`, `parse_error`) → the raw text its `parse_error` quotes; a tool message's
  `error` stays in the message's `extra`.
- `attachment://<hash>` strings anywhere in a sample are replaced by `sample.attachments[hash]`
  (Inspect moves long strings there; `log/_condense.py`).
- `model` events → calls (model, config, usage, stop reason, start `timestamp` and `completed`
  times, error), tied to the assistant node whose message id the output carries. A call that
  failed has finish reason `error`: the output Inspect records for it is a placeholder (`stop`).
- `tool` events → the tool message's `extra.timing` (`start`, `end`, `working_time`) and its
  timestamp (the completion time), found by the event's `message_id` (else its call id).
- run name: the task's name.
- `scores` → named rewards (reward components), each with its scorer's `explanation` (a dict
  value: one per key, `scorer.key`; a list value: one per item, `scorer[i]`). A score value that
  is a letter maps as Inspect's `value_to_float`
  (`scorer/_metric.py`): C → 1, P → 0.5, I and N → 0, yes/true → 1, no/false → 0, numeric
  strings and numbers as they are; a string value is also kept as the reward's `extra.label`. A value
  `value_to_float` cannot read (Inspect logs a warning and uses 0) is kept as a label with score
  null. `reward` is the first scorer's value.
- Ending: `sample.error` → error; `sample.limit` (or a `sample_limit` event) → truncated with
  detail `{type}_limit` (`message_limit`, `token_limit`, `time_limit`, `working_limit`, ...), an
  `operator` limit → error; otherwise the output's `stop_reason`: `stop` → submitted,
  `content_filter` → error, others unknown. `max_tokens` and `model_length` with no limit and no
  error: the sample completed and was scored, so Inspect claims it finished (detail `completed,
  stop_reason=max_tokens`); the shared normalisation (ingest/endings.py `correct_silent_truncation`)
  makes it `length_cut` and keeps the claim, so `silent_truncation` reports it (issue 20).
- Timestamps with offsets (`-04:00`) are converted to UTC epoch seconds.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ingest.errors import RecordError
from ingest.formats._harness import Chain, documents, openai_tool_call, to_epoch, usage_from
from ingest.formats._openai import MEDIA_PARTS, finish_reason, normalize_parts
from ingest.formats.base import ReadContext, record_error
from ingest.schema import (
    Call,
    Ending,
    EndingInfo,
    Error,
    GroupRef,
    Message,
    Reward,
    Rollout,
    RunRef,
    Span,
    Task,
)
from ingest.source import Source

EXPECTS = ("Inspect eval log: a .json EvalLog {version, status, eval: {task, ...}, samples} "
           "or a zipped .eval with header.json")
NAME = "inspect"
ATTACHMENT = "attachment://"
LIMIT_ERROR_TYPES = frozenset({"operator"})
STOP_ENDINGS = {
    "stop": Ending.submitted, "max_tokens": Ending.length_cut, "model_length": Ending.length_cut,
    "content_filter": Ending.error,
}


# --- detection -----------------------------------------------------------------------------

def _is_log(d: Any) -> bool:
    return (isinstance(d, dict) and isinstance(d.get("eval"), dict) and "task" in d["eval"]
            and ("samples" in d or "results" in d or "status" in d))


def sniff(source: Source) -> bool:
    """An EvalLog JSON document, or a zip holding `header.json` / `_journal/start.json`."""
    if source.kind in ("json", "jsonl"):
        return _is_log(source.first)
    if source.kind == "zip":
        names = source.first or []
        return "header.json" in names or "_journal/start.json" in names
    return False


# --- reading -------------------------------------------------------------------------------

def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    if source.kind == "zip":
        yield from _read_zip(source, ctx)
        return
    if source.kind == "json" and source.document is None:
        yield from _read_streamed(source, ctx)
        return
    for line, doc in documents(source):
        if isinstance(doc, RecordError):
            yield doc
            continue
        if not _is_log(doc):
            yield RecordError(source.name, line, None, "not an Inspect eval log (no `eval.task`)")
            continue
        header = {k: v for k, v in doc.items() if k != "samples"}
        samples = doc.get("samples")
        if samples is None:
            continue
        if not isinstance(samples, list):
            yield RecordError(source.name, line, "samples", f"expected a list, got {type(samples).__name__}")
            continue
        for i, sample in enumerate(samples):
            yield _guarded(sample, header, source.name, f"samples[{i}]", ctx, source, line)


def _read_streamed(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    """A `.json` log the source did not parse: the header and then each sample, parsed one at a
    time with ijson (memory bounded by the largest sample)."""
    import ijson

    try:
        with source.open() as f:
            header = {"eval": next(ijson.items(f, "eval", use_float=True), {})}
        with source.open() as f:
            header["status"] = next(ijson.items(f, "status"), None)
        with source.open() as f:
            for i, sample in enumerate(ijson.items(f, "samples.item", use_float=True)):
                yield _guarded(sample, header, source.name, f"samples[{i}]", ctx, source, None)
    except ijson.JSONError as exc:
        yield RecordError(source.name, None, None, f"invalid JSON: {exc}")


def _read_zip(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    names = source.first or []
    head_name = "header.json" if "header.json" in names else "_journal/start.json"
    try:
        header = _member_doc(source.open_member(head_name))
    except RecordError as exc:
        yield exc
        return
    if not isinstance(header, dict):
        yield RecordError(f"{source.name}!{head_name}", None, None, "expected the eval log header object")
        return
    for name in (n for n in names if n.startswith("samples/") and n.endswith(".json")):
        try:
            member = source.open_member(name)  # one sample in memory at a time
        except RecordError as exc:
            yield exc
            continue
        yield _guarded(_member_doc(member), header, member.name, None, ctx, source, None)


def _member_doc(member: Source):
    """A zip member's one JSON value (Inspect writes compact one-line JSON, which the source
    opens as a one-record JSONL)."""
    return member.document if member.kind == "json" else member.first


def _guarded(sample: Any, header: dict, file: str, path: str | None, ctx: ReadContext,
             source: Source, line: int | None) -> Rollout | RecordError:
    try:
        return _sample(sample, header, file, path, ctx, source, line)
    except Exception as exc:  # noqa: BLE001 - one odd sample never stops the log
        return record_error(file, line, path, exc)


def _sample(sample: Any, header: dict, file: str, path: str | None, ctx: ReadContext,
            source: Source, line: int | None) -> Rollout | RecordError:
    def err(field: str | None, msg: str) -> RecordError:
        return RecordError(file, line, ".".join(x for x in (path, field) if x) or None, msg)

    if not isinstance(sample, dict):
        return err(None, f"expected a sample object, got {type(sample).__name__}")
    sample = resolve_attachments(sample, sample.get("attachments") or {})
    ev = header.get("eval") or {}
    task = str(ev.get("task") or "task")
    sid, epoch = sample.get("id"), sample.get("epoch", 1)
    if sid is None:
        return err("id", "sample has no id")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
        return err("epoch", f"expected a whole number, got {epoch!r}")
    assumed = False

    chain = Chain()
    by_msg_id: dict[str, int] = {}
    tool_of_call: dict[str, int] = {}  # tool call id → its tool message
    msgs = sample.get("messages") or []
    if not isinstance(msgs, list):
        return err("messages", f"expected a list, got {type(msgs).__name__}")
    for k, m in enumerate(msgs):
        if not isinstance(m, dict):
            return err(f"messages[{k}]", f"expected a message object, got {type(m).__name__}")
        try:
            message = _message(m)
        except ValueError as exc:
            return err(f"messages[{k}]", str(exc))
        idx = chain.add(message)
        if isinstance(m.get("id"), str):
            by_msg_id[m["id"]] = idx
        if message.role == "tool" and message.tool_call_id is not None:
            tool_of_call.setdefault(message.tool_call_id, idx)  # the first result of a call, as the scan found

    events = sample.get("events") or []
    limit = sample.get("limit") if isinstance(sample.get("limit"), dict) else None
    times: list[float] = []
    tools: list = []
    for e in events if isinstance(events, list) else []:
        if not isinstance(e, dict):
            continue
        t, a = to_epoch(e.get("timestamp"))
        assumed |= a
        if t is not None:
            times.append(t)
        if e.get("event") == "sample_limit" and limit is None:
            limit = {"type": e.get("type"), "limit": e.get("limit"), "message": e.get("message")}
        if e.get("event") == "tool":
            _tool_timing(chain, by_msg_id, tool_of_call, e, t)
            continue
        if e.get("event") != "model":
            continue
        out = e.get("output") or {}
        choice = (out.get("choices") or [{}])[0] if isinstance(out, dict) else {}
        mid = ((choice or {}).get("message") or {}).get("id")
        end, a = to_epoch(e.get("completed"))
        assumed |= a
        raw_stop = (choice or {}).get("stop_reason")
        error = e.get("error")
        if error:  # Inspect's output of a failed call is a placeholder (`stop`, no content): not the model's
            raw_stop = None
        chain.calls.append(Call(
            node=by_msg_id.get(mid), model=e.get("model"), sampling=e.get("config") or None,
            finish_reason="error" if error else finish_reason(raw_stop), finish_reason_raw=raw_stop,
            usage=usage_from(out.get("usage") if isinstance(out, dict) else None),
            time=Span(start=t, end=end), error=Error(type="model_error", message=str(error)) if error else None,
            extra={"working_time": e["working_time"]} if "working_time" in e else {}))
        if isinstance(e.get("tools"), list) and e["tools"]:
            tools = e["tools"]
    if not chain.calls:  # logs without events: one call per assistant message
        for i, n in enumerate(chain.nodes):
            if n.message.role == "assistant":
                chain.calls.append(Call(node=i, model=n.message.extra.get("model")))
    out = sample.get("output") if isinstance(sample.get("output"), dict) else {}
    last_choice = (out.get("choices") or [{}])[0] if out.get("choices") else {}
    stop = (last_choice or {}).get("stop_reason") or out.get("stop_reason")
    if stop and chain.calls and chain.calls[-1].finish_reason_raw is None and chain.calls[-1].error is None:
        chain.calls[-1].finish_reason_raw = stop
        chain.calls[-1].finish_reason = finish_reason(stop)

    rewards, labels = _scores(sample.get("scores"))
    first = next(iter(rewards.values()), None)
    ending, errors = _ending(sample, limit, stop)

    start = end = None
    for key in ("started_at", "completed_at"):
        t, a = to_epoch(sample.get(key))
        assumed |= a
        if t is not None:
            start, end = (t, end) if key == "started_at" else (start, t)
    if times:
        start = start if start is not None else min(times)
        end = end if end is not None else max(times)
    timing: dict[str, Any] = {}
    if start is not None:
        timing["start"] = start
    if end is not None:
        timing["end"] = end
    for key in ("total_time", "working_time"):
        if isinstance(sample.get(key), (int, float)):
            timing[key] = sample[key]

    config = ev.get("config") or {}
    epochs = config.get("epochs") if isinstance(config.get("epochs"), int) and config.get("epochs") > 0 else None
    run_id = ctx.run_id or (str(ev["run_id"]) if ev.get("run_id") else None) or ctx.run_for(source)
    extra: dict[str, Any] = {"eval": {k: ev.get(k) for k in ("eval_id", "task_id", "model", "created") if ev.get(k)},
                             "log_status": header.get("status"), "epoch": epoch}
    for key in ("uuid", "model_usage", "store", "error_retries", "metadata", "retries", "sandbox"):
        if sample.get(key):
            extra[key] = sample[key]
    if labels:
        extra["score_labels"] = labels
    if assumed:
        extra["timestamps_assumed_utc"] = True
    try:
        return chain.finish(Rollout(
            id=f"{task}:{sid}:{epoch}", run=RunRef(id=run_id, name=task, type="eval"),
            group=GroupRef(id=f"{task}:{sid}", index=epoch - 1 if epoch >= 1 else 0, size=epochs),
            task=Task(type=task, key=str(sid), data={"input": sample.get("input"), "target": sample.get("target")}),
            tools=tools, nodes=chain.nodes, calls=chain.calls, rewards=rewards,
            reward=first.score if first is not None else None,
            ending=ending, errors=errors, timing=timing, extra=extra,
            source={"format": NAME, "file": file, "line": line, **({"path": path} if path else {})}))
    except ValueError as exc:
        return err(None, str(exc))


def _tool_timing(chain: Chain, by_msg_id: dict[str, int], tool_of_call: dict[str, int], e: dict,
                 start: float | None) -> None:
    """A `tool` event's times on the tool message it produced (`message_id`, else the call id):
    `extra.timing = {start, end, working_time}` (epoch seconds; working time in seconds, Inspect's
    time net of waits), and the node's timestamp the completion time when the message has none."""
    idx = by_msg_id.get(e.get("message_id")) if isinstance(e.get("message_id"), str) else None
    if idx is None and isinstance(e.get("id"), str):
        idx = tool_of_call.get(e["id"])
    if idx is None:
        return
    end, _ = to_epoch(e.get("completed"))
    timing = {k: v for k, v in (("start", start), ("end", end), ("working_time", e.get("working_time")))
              if isinstance(v, (int, float)) and not isinstance(v, bool)}
    node = chain.nodes[idx]
    if timing:
        node.message.extra["timing"] = timing
    if node.timestamp is None and end is not None:
        node.timestamp = end


def resolve_attachments(value: Any, attachments: dict) -> Any:
    """Replace every `attachment://<hash>` string by its text in `attachments` (recursively).
    An unknown hash is left as written."""
    if isinstance(value, str):
        if value.startswith(ATTACHMENT):
            return attachments.get(value[len(ATTACHMENT):], value)
        return value
    if isinstance(value, list):
        return [resolve_attachments(v, attachments) for v in value]
    if isinstance(value, dict):
        return {k: (v if k == "attachments" else resolve_attachments(v, attachments)) for k, v in value.items()}
    return value


def _message(m: dict) -> Message:
    role = m.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        raise ValueError(f"role: unknown role {role!r}")
    content = m.get("content")
    reasoning: list[str] = []
    extra = {k: v for k, v in m.items() if k not in ("role", "content", "tool_calls", "tool_call_id", "function")}
    if isinstance(content, list):
        parts = []
        for p in content:
            if not isinstance(p, dict):
                parts.append({"type": "text", "text": str(p)})
            elif p.get("type") == "reasoning":
                if p.get("redacted"):
                    reasoning.append("[redacted reasoning]")
                    extra.setdefault("redacted_reasoning", []).append(p.get("reasoning"))
                else:
                    reasoning.append(str(p.get("reasoning") or ""))
                if p.get("signature"):
                    extra.setdefault("reasoning_signatures", []).append(p["signature"])
            elif p.get("type") in MEDIA_PARTS:  # ContentImage/Audio/Video/Document: the one normaliser
                placeholder, notes = normalize_parts([p], "content")
                parts += placeholder
                if notes.get("media"):
                    extra.setdefault("media", {}).update(notes["media"])
            else:
                parts.append(p)
        content = parts
    elif content is not None and not isinstance(content, str):
        raise ValueError(f"content: expected a string or a list of parts, got {type(content).__name__}")
    tool_calls = None
    if m.get("tool_calls"):
        tool_calls = []
        for tc in m["tool_calls"]:
            if not isinstance(tc, dict):
                raise ValueError("tool_calls: expected objects")
            flat = {"id": tc.get("id"), "name": tc.get("function"), "arguments": sampled_arguments(tc),
                    **{k: v for k, v in tc.items() if k not in ("id", "function", "arguments", "type")}}
            tool_calls.append(openai_tool_call(flat))
    return Message(role=role, content=content, reasoning_content="\n\n".join(reasoning) if reasoning else None,
                   tool_calls=tool_calls, tool_call_id=m.get("tool_call_id"),
                   name=m.get("function") if role == "tool" else None, extra=extra)


PARSE_ERROR_HEAD = "Error parsing the following tool call arguments:\n\n"
PARSE_ERROR_TAIL = "\n\nError details: "


def sampled_arguments(tc: dict) -> Any:
    """The arguments the model sampled for an Inspect `ToolCall`. When Inspect could not parse them
    (`parse_tool_call`, model/_call_tools.py) it records `arguments: {}` and the raw text inside
    `parse_error` ("Error parsing the following tool call arguments:\\n\\n{raw}\\n\\nError details:
    ..."): the raw text is returned (middle-truncated past 16 KiB as Inspect shows it), else the whole
    `parse_error`, so the call reads as the malformed call it was, never as `{}`."""
    err = tc.get("parse_error")
    if not isinstance(err, str) or not err or tc.get("arguments") not in ({}, None):
        return tc.get("arguments")
    if err.startswith(PARSE_ERROR_HEAD) and PARSE_ERROR_TAIL in err:
        return err[len(PARSE_ERROR_HEAD):err.rindex(PARSE_ERROR_TAIL)]
    return err


def value_to_float(value: Any) -> float | None:
    """Inspect's `value_to_float` (scorer/_metric.py) with its default letters; None where
    Inspect would warn and fall back to 0 (an unreadable value is missing, not 0)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        return None
    if value == "C":
        return 1.0
    if value == "P":
        return 0.5
    if value in ("I", "N"):
        return 0.0
    low = value.lower()
    if low in ("yes", "true"):
        return 1.0
    if low in ("no", "false"):
        return 0.0
    try:
        return float(value)
    except ValueError:
        return None


def _scores(scores: Any) -> tuple[dict[str, Reward], dict[str, Any]]:
    """Inspect's `sample.scores` ({scorer name: Score{value, answer, explanation, metadata}},
    inspect_ai `scorer/_metric.py`) as reward components (weight 1: Inspect records no weights),
    and the labels of word-valued scores. A dict value (a scorer scoring several things) is one
    component per key, `<scorer>.<key>`; a list value one per item, `<scorer>[i]`. The scorer's
    `explanation` (a judge's rationale for model-graded scorers) is each component's
    `explanation`; `answer` and `metadata` stay in its `extra`."""
    rewards: dict[str, Reward] = {}
    labels: dict[str, Any] = {}
    if not isinstance(scores, dict):
        return rewards, labels
    for name, s in scores.items():
        if not isinstance(s, dict):
            continue
        value = s.get("value")
        extra = {k: s[k] for k in ("answer", "metadata") if s.get(k) is not None}
        expl = s.get("explanation")
        if expl is not None and not isinstance(expl, str):
            extra["explanation"] = expl  # not text: kept as written
            expl = None
        parts = ([(f"{name}.{k}", v) for k, v in value.items()] if isinstance(value, dict)  # one reward per key
                 else [(f"{name}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, list) else None)
        if parts is not None:
            for key, v in parts:
                rewards[key] = Reward(score=value_to_float(v), weight=1.0, explanation=expl,
                                      extra={"label": v, **extra})
            continue
        if isinstance(value, str):  # a letter or word is a label; a number is only a score
            labels[name] = value
            extra = {"label": value, **extra}
        rewards[name] = Reward(score=value_to_float(value), weight=1.0, explanation=expl, extra=extra)
    return rewards, labels


def _ending(sample: dict, limit: dict | None, stop: Any) -> tuple[EndingInfo, list[Error]]:
    error = sample.get("error")
    if error:
        msg = error.get("message") if isinstance(error, dict) else str(error)
        tb = error.get("traceback") if isinstance(error, dict) else None
        return (EndingInfo(type=Ending.error, detail="error", message=msg),
                [Error(type="sample_error", message=str(msg or ""), traceback=tb)])
    if limit:
        kind = str(limit.get("type") or "limit")
        detail = kind if kind.endswith("_limit") else f"{kind}_limit"
        typ = Ending.error if kind in LIMIT_ERROR_TYPES else Ending.truncated
        msg = limit.get("message") or (f"limit {limit['limit']}" if limit.get("limit") is not None else None)
        return EndingInfo(type=typ, detail=detail, message=msg), []
    if stop:
        typ = STOP_ENDINGS.get(str(stop), Ending.unknown)
        if typ == Ending.length_cut:  # scored as a finished sample: Inspect took the cut output as the answer
            return EndingInfo(type=Ending.submitted, detail=f"completed, stop_reason={stop}"), []
        return EndingInfo(type=typ, detail=f"stop_reason={stop}"), []
    return EndingInfo(type=Ending.unknown, detail="no output recorded"), []
