"""OpenTelemetry spans in, spans out: OTLP/JSON and OTLP/protobuf decoding into plain span
records, and the encoding of span records back into OTLP/JSON.

Wire formats (open-telemetry/opentelemetry-proto `opentelemetry/proto/trace/v1/trace.proto`,
`collector/trace/v1/trace_service.proto`, and the OTLP/JSON rules of the same repository's
`docs/specification.md`): an `ExportTraceServiceRequest` `{resourceSpans: [{resource:
{attributes}, scopeSpans: [{scope: {name, version}, spans: [Span]}]}]}`. In JSON, `traceId` and
`spanId` are hex strings, 64-bit integers may be strings, enums may be numbers or names, and keys
may be lowerCamelCase or snake_case. Protobuf is parsed with the `opentelemetry-proto` package.

This module knows nothing of GenAI semantics; `ingest/otel/read.py` and `write.py` turn span records of one
trace into a rollout and back. No database, no web (the `/v1/traces` receiver lives in
`app/receivers/otlp.py`).
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from ingest.jsonio import loads

SPAN_KINDS = {"SPAN_KIND_UNSPECIFIED": 0, "SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2, "SPAN_KIND_CLIENT": 3,
              "SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5}
STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
STATUS_ERROR = 2


class OtlpError(ValueError):
    """A request or file that is not OTLP: `field` is the path of the first bad field."""

    def __init__(self, field: str | None, message: str):
        super().__init__(f"{field}: {message}" if field else message)
        self.field, self.message = field, message


@dataclass
class SpanRecord:
    """One span, decoded. Times are Unix nanoseconds (exact); ids are lowercase hex."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: int = 0
    start_ns: int | None = None
    end_ns: int | None = None
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)  # {name, time_ns, attributes}
    status_code: int = 0
    status_message: str = ""
    resource: dict[str, Any] = field(default_factory=dict)
    scope: str | None = None

    @property
    def start(self) -> float | None:
        return self.start_ns / 1e9 if self.start_ns is not None else None

    @property
    def end(self) -> float | None:
        return self.end_ns / 1e9 if self.end_ns is not None else None


# --- JSON ----------------------------------------------------------------------------------

def _get(d: dict, camel: str, snake: str | None = None) -> Any:
    if camel in d:
        return d[camel]
    return d.get(snake) if snake else None


def _hex_id(value: Any, size: int, path: str, required: bool = True) -> str | None:
    if value in (None, ""):
        if required:
            raise OtlpError(path, "missing")
        return None
    if not isinstance(value, str):
        raise OtlpError(path, f"expected a hex string, got {type(value).__name__}")
    text = value.strip().lower()
    if len(text) != size * 2 or any(c not in "0123456789abcdef" for c in text):
        try:  # protobuf's JSON mapping writes bytes as base64
            raw = base64.b64decode(value, validate=True)
        except ValueError:
            raw = b""
        if len(raw) != size:
            raise OtlpError(path, f"expected {size * 2} hex digits, got {value!r}")
        text = raw.hex()
    if set(text) == {"0"}:
        if required:
            raise OtlpError(path, "an all-zero id is invalid")
        return None
    return text


def _int(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise OtlpError(path, "expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise OtlpError(path, f"expected an integer, got {value!r}")


def _enum(value: Any, names: dict[str, int], path: str) -> int:
    if value is None:
        return 0
    if isinstance(value, str) and value in names:
        return names[value]
    v = _int(value, path)
    return v or 0


def any_value(v: Any, path: str) -> Any:
    """An OTLP/JSON `AnyValue` → a Python value (int64 strings → int, kvlist → dict)."""
    if not isinstance(v, dict):
        raise OtlpError(path, f"expected an AnyValue object, got {type(v).__name__}")
    if not v:
        return None
    key, val = next(iter(v.items()))
    if key in ("stringValue", "string_value"):
        return val
    if key in ("boolValue", "bool_value"):
        return bool(val)
    if key in ("intValue", "int_value"):
        return _int(val, path)
    if key in ("doubleValue", "double_value"):
        return float(val)
    if key in ("arrayValue", "array_value"):
        return [any_value(x, f"{path}[{i}]") for i, x in enumerate((val or {}).get("values") or [])]
    if key in ("kvlistValue", "kvlist_value"):
        return attributes((val or {}).get("values") or [], path)
    if key in ("bytesValue", "bytes_value"):
        return val  # base64 text, kept as written
    raise OtlpError(path, f"unknown AnyValue kind {key!r}")


def attributes(kvs: Any, path: str) -> dict[str, Any]:
    if kvs is None:
        return {}
    if not isinstance(kvs, list):
        raise OtlpError(path, f"expected a list of key-value pairs, got {type(kvs).__name__}")
    out = {}
    for i, kv in enumerate(kvs):
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise OtlpError(f"{path}[{i}]", "expected {key, value}")
        out[kv["key"]] = any_value(kv.get("value") or {}, f"{path}[{i}].value")
    return out


def is_otlp_json(doc: Any) -> bool:
    """True for an ExportTraceServiceRequest in JSON form."""
    return isinstance(doc, dict) and isinstance(_get(doc, "resourceSpans", "resource_spans"), list)


def decode_json(data: bytes | str | dict) -> list[SpanRecord]:
    """Spans of one OTLP/JSON `ExportTraceServiceRequest`. Raises OtlpError naming the field."""
    if isinstance(data, (bytes, str)):
        try:
            data = loads(data)
        except ValueError as exc:
            raise OtlpError(None, f"invalid JSON: {exc}") from None
    if not is_otlp_json(data):
        raise OtlpError("resourceSpans", "missing: not an OTLP ExportTraceServiceRequest")
    out: list[SpanRecord] = []
    for r, rs in enumerate(_get(data, "resourceSpans", "resource_spans")):
        rp = f"resourceSpans[{r}]"
        try:
            out += _resource_spans(rs, rp)
        except OtlpError:
            raise
        except (TypeError, AttributeError, ValueError, OverflowError) as exc:
            raise OtlpError(rp, f"unexpected shape: {type(exc).__name__}: {exc}") from None
    return out


def _resource_spans(rs: Any, rp: str) -> list[SpanRecord]:
    if not isinstance(rs, dict):
        raise OtlpError(rp, "expected an object")
    out = []
    resource = attributes((rs.get("resource") or {}).get("attributes"), f"{rp}.resource.attributes")
    for s, ss in enumerate(_get(rs, "scopeSpans", "scope_spans") or _get(rs, "instrumentationLibrarySpans") or []):
        sp = f"{rp}.scopeSpans[{s}]"
        if not isinstance(ss, dict):
            raise OtlpError(sp, "expected an object")
        scope = (ss.get("scope") or ss.get("instrumentationLibrary") or {}).get("name")
        for k, span in enumerate(ss.get("spans") or []):
            out.append(_span_json(span, f"{sp}.spans[{k}]", resource, scope))
    return out


def _span_json(span: Any, path: str, resource: dict, scope: str | None) -> SpanRecord:
    if not isinstance(span, dict):
        raise OtlpError(path, "expected a span object")
    status = span.get("status") or {}
    events = []
    for e, ev in enumerate(span.get("events") or []):
        events.append({"name": ev.get("name", ""),
                       "time_ns": _int(_get(ev, "timeUnixNano", "time_unix_nano"), f"{path}.events[{e}].timeUnixNano"),
                       "attributes": attributes(ev.get("attributes"), f"{path}.events[{e}].attributes")})
    return SpanRecord(
        trace_id=_hex_id(_get(span, "traceId", "trace_id"), 16, f"{path}.traceId"),
        span_id=_hex_id(_get(span, "spanId", "span_id"), 8, f"{path}.spanId"),
        parent_span_id=_hex_id(_get(span, "parentSpanId", "parent_span_id"), 8, f"{path}.parentSpanId", required=False),
        name=str(span.get("name") or ""),
        kind=_enum(span.get("kind"), SPAN_KINDS, f"{path}.kind"),
        start_ns=_int(_get(span, "startTimeUnixNano", "start_time_unix_nano"), f"{path}.startTimeUnixNano"),
        end_ns=_int(_get(span, "endTimeUnixNano", "end_time_unix_nano"), f"{path}.endTimeUnixNano"),
        attributes=attributes(span.get("attributes"), f"{path}.attributes"),
        events=events,
        status_code=_enum(status.get("code"), STATUS_CODES, f"{path}.status.code"),
        status_message=str(status.get("message") or ""),
        resource=resource, scope=scope)


# --- protobuf ------------------------------------------------------------------------------

def _pb_value(v) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_pb_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _pb_value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return getattr(v, kind)


def decode_protobuf(data: bytes) -> list[SpanRecord]:
    """Spans of one binary `ExportTraceServiceRequest`. Raises OtlpError when it does not parse."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(data)
    except DecodeError as exc:
        raise OtlpError(None, f"not an OTLP protobuf ExportTraceServiceRequest: {exc}") from None
    out = []
    for r, rs in enumerate(req.resource_spans):
        resource = {kv.key: _pb_value(kv.value) for kv in rs.resource.attributes}
        for s, ss in enumerate(rs.scope_spans):
            for k, span in enumerate(ss.spans):
                path = f"resourceSpans[{r}].scopeSpans[{s}].spans[{k}]"
                if len(span.trace_id) != 16 or not any(span.trace_id):
                    raise OtlpError(f"{path}.traceId", "expected 16 bytes, not all zero")
                if len(span.span_id) != 8 or not any(span.span_id):
                    raise OtlpError(f"{path}.spanId", "expected 8 bytes, not all zero")
                out.append(SpanRecord(
                    trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex() if any(span.parent_span_id) else None,
                    name=span.name, kind=int(span.kind),
                    start_ns=span.start_time_unix_nano or None, end_ns=span.end_time_unix_nano or None,
                    attributes={kv.key: _pb_value(kv.value) for kv in span.attributes},
                    events=[{"name": e.name, "time_ns": e.time_unix_nano or None,
                             "attributes": {kv.key: _pb_value(kv.value) for kv in e.attributes}} for e in span.events],
                    status_code=int(span.status.code), status_message=span.status.message,
                    resource=resource, scope=ss.scope.name or None))
    return out


# --- encoding ------------------------------------------------------------------------------

def to_any_value(v: Any) -> dict:
    """A Python value as an OTLP/JSON AnyValue (ints as strings, as the spec writes int64)."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [to_any_value(x) for x in v]}}
    if isinstance(v, dict):
        return {"kvlistValue": {"values": [{"key": str(k), "value": to_any_value(x)} for k, x in v.items()]}}
    return {"stringValue": "" if v is None else str(v)}


def encode_json(spans: list[SpanRecord]) -> dict:
    """An OTLP/JSON ExportTraceServiceRequest holding `spans`, grouped by resource and scope."""
    groups: dict[tuple, dict[str | None, list[SpanRecord]]] = {}
    resources: dict[tuple, dict] = {}
    for s in spans:
        key = tuple(sorted((k, repr(v)) for k, v in s.resource.items()))
        resources[key] = s.resource
        groups.setdefault(key, {}).setdefault(s.scope, []).append(s)
    out = []
    for key, scopes in groups.items():
        out.append({
            "resource": {"attributes": [{"key": k, "value": to_any_value(v)} for k, v in resources[key].items()]},
            "scopeSpans": [{"scope": {"name": scope or "rollscope"}, "spans": [_span_to_json(s) for s in ss]}
                           for scope, ss in scopes.items()]})
    return {"resourceSpans": out}


def _span_to_json(s: SpanRecord) -> dict:
    d: dict[str, Any] = {"traceId": s.trace_id, "spanId": s.span_id, "name": s.name, "kind": s.kind}
    if s.parent_span_id:
        d["parentSpanId"] = s.parent_span_id
    if s.start_ns is not None:
        d["startTimeUnixNano"] = str(s.start_ns)
    if s.end_ns is not None:
        d["endTimeUnixNano"] = str(s.end_ns)
    d["attributes"] = [{"key": k, "value": to_any_value(v)} for k, v in s.attributes.items()]
    if s.events:
        d["events"] = [{"name": e["name"], **({"timeUnixNano": str(e["time_ns"])} if e.get("time_ns") else {}),
                        "attributes": [{"key": k, "value": to_any_value(v)} for k, v in e["attributes"].items()]}
                       for e in s.events]
    if s.status_code or s.status_message:
        d["status"] = {"code": s.status_code, **({"message": s.status_message} if s.status_message else {})}
    return d
