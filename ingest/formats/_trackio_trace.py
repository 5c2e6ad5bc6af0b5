"""One Trackio trace (a `traces` row, a Parquet row or an inline payload, as a dict) → one
Rollout: the OpenAI-style messages through `_openai`, the spans through `_trackio_spans`, the RL
fields of the free `metadata` dict mapped by the common key names (the rest kept in
`extra.metadata`), the scalars logged beside the trace as metrics. docs/formats-trackio.md.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ingest import endings
from ingest.fields import FieldError
from ingest.formats import _openai
from ingest.formats._build import RolloutBuilder, breakdown_components
from ingest.formats._trackio_spans import (
    ERROR_STATUSES,
    FINISH_KEYS,
    apply_spans,
    from_spans,
    ordered,
    span_time,
    stamp,
)
from ingest.formats.base import ReadContext, id_text, json_type
from ingest.schema import Ending, EndingInfo, Error, GroupRef, Rollout, RunRef, Task
from ingest.source import Source, loads

FORMAT = "trackio"
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}

# metadata keys mapped to Rollscope fields (the first present wins); the rest stays in extra
REWARD_KEYS = ("reward", "score")
COMPONENT_KEYS = ("rewards", "reward_components", "reward_breakdown")
ADVANTAGE_KEYS = ("advantage", "advantages")
GROUP_KEYS = ("group_id", "group", "uid", "group_uid")
GROUP_INDEX_KEYS = ("group_index", "sample_index", "rollout_index", "sample_idx")
GROUP_SIZE_KEYS = ("group_size",)
POLICY_KEYS = ("policy_version", "weight_version", "model_version", "policy_step")
ENDING_KEYS = ("ending", "termination_reason", "stop_condition")
TASK_KEYS = ("task_id", "prompt_id", "example_id", "problem_id", "question_id", "instance_id", "task")
# logged scalars whose names Rollscope reads as per-rollout facts (ingest/metrics.py, advantages.py):
# a batch-level value under that name is kept in `extra.logged_metrics`, not in `metrics`
RESERVED_METRICS = frozenset({"tool_errors", "advantage"})


def decode(value: Any, path: str) -> Any:
    """A JSON column as trackio writes it: orjson bytes in a BLOB, text in a TEXT column or a
    Parquet string, or (inline payloads) the value itself."""
    if isinstance(value, memoryview):
        value = value.tobytes()
    if isinstance(value, (bytes, bytearray, str)):
        try:
            return loads(bytes(value) if not isinstance(value, str) else value)
        except (ValueError, UnicodeDecodeError) as exc:
            raise FieldError(path, f"invalid JSON: {exc}") from None
    return value


def _finite(value: Any) -> Any:
    """Trackio's spelling of a non-finite number ("NaN", "Infinity") → the float."""
    return _NON_FINITE.get(value, value) if isinstance(value, str) else value


def _number(value: Any, path: str, *, allow_bool: bool = True) -> float | None:
    value = _finite(value)
    if value is None:
        return None
    if isinstance(value, bool):
        if allow_bool:
            return float(value)
        raise FieldError(path, "expected a number, got boolean")
    if isinstance(value, (int, float)):
        return float(value)
    raise FieldError(path, f"expected a number or null, got {json_type(value)}")


def _first(meta: dict, keys: tuple[str, ...]) -> tuple[str | None, Any]:
    for k in keys:
        if k in meta and meta[k] is not None:
            return k, meta[k]
    return None, None


def rollout_of(source: Source, ctx: ReadContext, t: dict, line: int, project: str, scalars: dict | None,
             runs: dict, sizes: dict, *, table: str, group_fallback: str | None = None) -> Rollout:
    trace_id = id_text(t.get("id"), "id", required=True)
    step = t.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise FieldError("step", f"expected a training step (an integer ≥ 0), got {step!r}")
    messages = decode(t.get("messages"), "messages")
    metadata = decode(t.get("metadata"), "metadata")
    spans = decode(t.get("spans"), "spans") if t.get("spans") is not None else []
    if messages is None:
        messages = []
    if not isinstance(messages, list):
        raise FieldError("messages", f"expected an array of messages, got {json_type(messages)}")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise FieldError("metadata", f"expected an object, got {json_type(metadata)}")
    if not isinstance(spans, list):
        raise FieldError("spans", f"expected an array of spans, got {json_type(spans)}")
    meta = {k: _finite(v) for k, v in metadata.items()}  # as trackio's own reader gives them back
    used: set[str] = set()

    def take(keys: tuple[str, ...]) -> tuple[str | None, Any]:
        k, v = _first(meta, keys)
        if k is not None:
            used.add(k)
        return k, v

    pk, pv = take(POLICY_KEYS)
    policy = pv if isinstance(pv, int) and not isinstance(pv, bool) and pv >= 0 else None
    if pk is not None and policy is None:
        used.discard(pk)  # not a version number: kept as written
    b = RolloutBuilder(policy_version=policy)
    for i, span in enumerate(spans):
        if not isinstance(span, dict):
            raise FieldError(f"spans[{i}]", f"expected a span object, got {json_type(span)}")
    generations = ordered(spans, "generation")
    tool_spans = ordered(spans, "tool")
    errors: list[Error] = []
    if messages:
        _openai.add_messages(b, messages, "messages")
        apply_spans(b, messages, generations, tool_spans, spans, errors)
    else:
        from_spans(b, spans, errors)

    rk, rv = take(REWARD_KEYS)
    reward = _number(rv, f"metadata.{rk}") if rk else None
    metrics: dict[str, float | None] = {}
    extra: dict[str, Any] = {}
    ck, cv = take(COMPONENT_KEYS)
    if isinstance(cv, dict):
        for name, v in cv.items():
            v = _finite(v)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                metrics[f"reward_components.{name}"] = float(v) if math.isfinite(v) else None
        extra["reward_components"] = cv
    elif ck is not None:
        used.discard(ck)
    ak, av = take(ADVANTAGE_KEYS)
    if ak is not None:
        if isinstance(av, list):  # per-token or per-turn advantages: kept as written
            used.discard(ak)
        else:
            adv = _number(av, f"metadata.{ak}", allow_bool=False)
            if adv is not None:
                extra["advantage"] = adv
    group = _group(t, meta, take, sizes, group_fallback)
    task = _task(meta, take)
    fk, fv = take(FINISH_KEYS)
    if fk is not None:
        if not isinstance(fv, str):
            raise FieldError(f"metadata.{fk}", f"expected a string, got {json_type(fv)}")
        _finish_reason(b, fv)
    ending = EndingInfo()
    stop_condition = None
    ek, ev = take(ENDING_KEYS)
    if ek is not None:
        if not isinstance(ev, str):
            raise FieldError(f"metadata.{ek}", f"expected a string, got {json_type(ev)}")
        if ek == "stop_condition":
            stop_condition = ev
        else:
            ending = EndingInfo(type=endings.from_reason(ev), detail=ev)
    status = meta.get("status")
    if isinstance(status, str) and status.strip().lower() in ERROR_STATUSES:
        errors.append(Error(type="trace_status", message=str(meta.get("error") or status)))
        if ending.type == Ending.unknown:
            ending = EndingInfo(type=Ending.error, detail=f"status={status}")
    if ending.type == Ending.error and not errors:
        errors.append(Error(type=ending.detail or "error"))

    logged = _scalars(scalars, extra)
    tk, tv = take(("tool_errors", "num_tool_errors"))  # the trace's own count (ingest/metrics.py reads it)
    if tk is not None:
        metrics["tool_errors"] = _number(tv, f"metadata.{tk}", allow_bool=False)
    metrics = {**logged, **metrics}
    rest = {k: v for k, v in metadata.items() if k not in used}
    if rest:
        extra["metadata"] = rest
    extra["trackio"] = {k: v for k, v in (("run_id", t.get("run_id")), ("key", t.get("key")),
                                          ("trace_index", t.get("trace_index")), ("log_id", t.get("log_id")),
                                          ("timestamp", t.get("timestamp"))) if v is not None}
    others = [s for s in spans if str(s.get("kind") or "").lower() not in ("generation", "tool")]
    if others:
        extra["trackio"]["spans"] = others
    run_name = t.get("run_name")
    record_run = runs.get((t.get("run_id"), run_name)) or (run_name if isinstance(run_name, str) and run_name else None)
    run_id = ctx.run_for(source, record_run)
    timing = _timing(spans, t, meta)
    # where it came from (not content: the same trace read from the .db, its Parquet copy or a
    # fragment is the same rollout); a static export does not name its project
    src: dict[str, Any] = {"format": FORMAT, "file": source.name, "line": line, "table": table}
    if project:
        src["project"] = project
    rollout = Rollout(
        id=trace_id,
        run=RunRef(id=run_id, name=run_name if isinstance(run_name, str) else None),
        step=step if step is not None else ctx.step,
        group=group,
        task=task,
        nodes=b.nodes,
        calls=b.calls,
        reward=reward,
        rewards=breakdown_components(cv),
        metrics=metrics,
        stop_condition=stop_condition,
        ending=ending,
        errors=errors,
        timing=timing,
        extra=extra,
        source=src,
    )
    endings.derive(rollout)
    return b.finish(rollout)


def _scalars(scalars: dict | None, extra: dict) -> dict[str, float | None]:
    """The numbers logged beside the traces (the same for every trace of that `log()` call)."""
    out: dict[str, float | None] = {}
    for k, v in (scalars or {}).items():
        v = _finite(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if k in RESERVED_METRICS:
            extra.setdefault("logged_metrics", {})[k] = v
            continue
        out[str(k)] = float(v) if math.isfinite(v) else None
    return out


def _group(t: dict, meta: dict, take: Callable, sizes: dict, fallback: str | None) -> GroupRef | None:
    gk, gv = take(GROUP_KEYS)
    ik, iv = take(GROUP_INDEX_KEYS)
    sk, sv = take(GROUP_SIZE_KEYS)
    for key, v in ((ik, iv), (sk, sv)):
        if key is not None and (isinstance(v, bool) or not isinstance(v, int) or v < (1 if key == sk else 0)):
            raise FieldError(f"metadata.{key}", f"expected an integer, got {json_type(v)}")
    if gk is not None:
        return GroupRef(id=id_text(gv, f"metadata.{gk}"), index=iv, size=sv)
    index = t.get("trace_index")
    if index is None:
        return None
    log_id = t.get("log_id")
    size = sizes.get((log_id, t.get("key")))
    gid = f"{log_id}:{t.get('key')}" if log_id is not None else fallback
    if gid is None:
        return None
    return GroupRef(id=gid, index=iv if iv is not None else index, size=sv or size)


def _task(meta: dict, take: Callable) -> Task | None:
    tk, tv = take(TASK_KEYS)
    if tk is None:
        return None
    if isinstance(tv, dict):
        key = tv.get("id") if isinstance(tv.get("id"), (str, int)) and not isinstance(tv.get("id"), bool) else None
        return Task(key=id_text(key, f"metadata.{tk}.id"), data=tv)
    if isinstance(tv, (str, int)) and not isinstance(tv, bool):
        return Task(key=id_text(tv, f"metadata.{tk}"))
    raise FieldError(f"metadata.{tk}", f"expected a string or integer id, got {json_type(tv)}")


def _finish_reason(b: RolloutBuilder, raw: str) -> None:
    """The trace's finish reason: the last model call's, when the spans did not say."""
    last_node = next((i for i in range(len(b.nodes) - 1, -1, -1) if b.nodes[i].sampled), None)
    call = next((c for c in reversed(b.calls) if c.node is not None and c.node == last_node), None)
    if call is None:
        b.call(last_node, raw).extra["finish_reason_from"] = "metadata"
    elif call.finish_reason_raw is None:
        call.finish_reason, call.finish_reason_raw = _openai.finish_reason(raw), raw
        call.extra["finish_reason_from"] = "metadata"


# --- spans -----------------------------------------------------------------------------------


def _timing(spans: list[dict], t: dict, meta: dict) -> dict:
    out: dict[str, Any] = {}
    times = [span_time(s) for s in spans]
    starts = [s for s, _ in times if s is not None]
    ends = [e for _, e in times if e is not None]
    if starts:
        out["start"] = min(starts)
    if ends:
        out["end"] = max(ends)
    logged = stamp(t.get("timestamp"), "timestamp")
    if logged is not None:
        out["logged_at"] = logged
    for k in ("duration_ms", "latency_ms"):
        v = meta.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out["duration"] = v / 1000
            break
    return out
