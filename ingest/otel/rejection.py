"""A trace the OTLP receiver cannot store, as a RecordError that locates it: the trace id is the
record's key (`RecordError.key`: one quarantine entry per trace, `/v1/traces` holding many), the
field is the span attribute the value came from (`attributes["rollscope.step"]`,
`resource.attributes["service.name"]`), not the native path it was mapped to, the run is the
trace's own (`rollscope.run`, else `service.name`) and the raw text is the trace's spans as JSON."""
from __future__ import annotations

import json

import orjson

from ingest.errors import RecordError
from ingest.formats.base import record_error
from ingest.otel.wire import SpanRecord

RECEIVER = "/v1/traces"  # the quarantine's file of every rejected trace
RAW_LIMIT = 4096  # the quarantine keeps the first 4 KB of `raw`

# native field (its first parts) → the span attribute `ingest/otel/read.py` reads it from
ATTRIBUTE = {"id": "rollscope.rollout_id", "run.id": "rollscope.run", "run": "rollscope.run",
             "step": "rollscope.step", "attempt": "rollscope.attempt", "reward": "rollscope.reward",
             "rewards": "rollscope.rewards", "group.id": "rollscope.group", "group.index": "rollscope.group.index",
             "group.size": "rollscope.group.size", "group": "rollscope.group", "task": "rollscope.task",
             "ending": "rollscope.ending"}


def trace_run(spans: list[SpanRecord]) -> str | None:
    """The run a trace names, as `rollout_from_spans` reads it: `rollscope.run` (the root's wins),
    else the resource's `service.name`; None when neither is there."""
    root = next((s for s in spans if not s.parent_span_id), spans[0] if spans else None)
    run = None
    for s in sorted(spans, key=lambda s: s is root):
        run = s.attributes.get("rollscope.run", run)
    if run is None and root is not None:
        run = root.resource.get("service.name")
    return None if run is None else str(run)


def attribute_field(native: str | None, spans: list[SpanRecord]) -> str | None:
    """The span attribute a native field path (`run.id`, `step`, `group.index`) was read from;
    the path itself when it maps to none (the messages' nodes)."""
    if not native:
        return native
    if native.startswith("attributes[") or native.startswith("resource."):
        return native
    for k in sorted(ATTRIBUTE, key=len, reverse=True):
        if native == k or native.startswith(k + ".") or native.startswith(k + "["):
            attr = ATTRIBUTE[k]
            if attr == "rollscope.run" and not any(attr in s.attributes for s in spans):
                return 'resource.attributes["service.name"]'
            if attr == "rollscope.rollout_id" and not any(attr in s.attributes for s in spans):
                return "traceId"
            return f'attributes["{attr}"]'
    return native


def raw_trace(trace_id: str, spans: list[SpanRecord]) -> str:
    """The trace as JSON, trace id first (what the quarantine shows of it), cut to `RAW_LIMIT`."""
    body = {"trace_id": trace_id, "spans": [
        {"span_id": s.span_id, "parent_span_id": s.parent_span_id, "name": s.name, "attributes": s.attributes,
         "resource": s.resource} for s in spans]}
    try:
        raw = orjson.dumps(body, default=str)
    except TypeError:  # an integer attribute past 64 bits, which orjson refuses: every digit kept
        raw = json.dumps(body, default=str, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return raw[:RAW_LIMIT].decode("utf-8", "replace")


def trace_rejection(trace_id: str, spans: list[SpanRecord], exc: BaseException | str) -> RecordError:
    """The RecordError of a trace that cannot be stored: `exc` the mapping's error, or the reason."""
    if isinstance(exc, str):
        err = RecordError(RECEIVER, None, None, exc)
    else:
        err = record_error(RECEIVER, None, None, exc)
        err.field = attribute_field(err.field, spans)
    err.raw = raw_trace(trace_id, spans)
    err.run = err.run or trace_run(spans)
    err.key = trace_id
    return err
