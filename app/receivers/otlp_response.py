"""The answers of `POST /v1/traces`, as the OTLP/HTTP specification words them
(open-telemetry/opentelemetry-proto `docs/specification.md`, "OTLP/HTTP Response"): in the
request's encoding, `Content-Type: application/x-protobuf` for a protobuf request and
`application/json` (the proto3 JSON mapping) for a JSON one.

- Success ("Full Success"): 200 with an `ExportTraceServiceResponse`, its `partial_success`
  unset; "Partial Success": 200 with `partial_success {rejected_spans, error_message}`.
- "Failures": 4xx/5xx with a `google.rpc.Status` body (`code`, a `google.rpc.Code` the
  specification leaves to the server and clients must not act on; `message`, for a developer).
  "Bad Data" (400) carries a `google.rpc.BadRequest` naming the field when it is known;
  "Throttling" (429, 503) carries the `Retry-After` header and the same delay as a
  `google.rpc.RetryInfo`.

A request in neither encoding (415) is answered in JSON: there is no encoding of its own to
answer in.
"""
from __future__ import annotations

from fastapi.responses import Response
from google.protobuf import json_format
from google.protobuf.any_pb2 import Any
from google.protobuf.duration_pb2 import Duration
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from starlette.requests import Request

PROTOBUF, JSON = "application/x-protobuf", "application/json"

# HTTP status → google.rpc.Code, by the mapping google/rpc/code.proto documents for each code
# (413 as gRPC answers a message over its size limit: RESOURCE_EXHAUSTED; 408, a body that stopped
# arriving, as a deadline passed: DEADLINE_EXCEEDED).
CODES = {400: code_pb2.INVALID_ARGUMENT, 401: code_pb2.UNAUTHENTICATED, 403: code_pb2.PERMISSION_DENIED,
         404: code_pb2.NOT_FOUND, 405: code_pb2.UNIMPLEMENTED, 408: code_pb2.DEADLINE_EXCEEDED,
         413: code_pb2.RESOURCE_EXHAUSTED, 415: code_pb2.INVALID_ARGUMENT, 429: code_pb2.RESOURCE_EXHAUSTED,
         500: code_pb2.INTERNAL, 503: code_pb2.UNAVAILABLE}


def media_type(request: Request) -> str | None:
    """The request's `Content-Type` without parameters, lowercased: PROTOBUF, JSON, or None for
    anything else."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return media if media in (PROTOBUF, JSON) else None


def _encode(message, media: str, status: int, headers: dict[str, str] | None = None) -> Response:
    if media == PROTOBUF:
        return Response(message.SerializeToString(), status_code=status, media_type=PROTOBUF, headers=headers)
    body = json_format.MessageToJson(message, indent=None)
    return Response(body, status_code=status, media_type=JSON, headers=headers)


def success(media: str, rejected: int = 0, reason: str | None = None) -> Response:
    """200 with an `ExportTraceServiceResponse`; `partial_success` set only when spans were
    rejected (`rejected` of them, `reason` the first reason)."""
    resp = ExportTraceServiceResponse()
    if rejected:
        resp.partial_success.rejected_spans = rejected
        resp.partial_success.error_message = reason or "spans rejected"
    return _encode(resp, media, 200)


def failure(media: str | None, status: int, message: str, *, field: str | None = None,
            retry_after: int | None = None, headers: dict[str, str] | None = None) -> Response:
    """`status` with a `google.rpc.Status` body in `media` (JSON when None): `message`; a
    `BadRequest` naming `field` on a 400; a `RetryInfo` and `Retry-After: retry_after` on a 429
    or 503. `headers` are added (`WWW-Authenticate` on a 401)."""
    st = status_pb2.Status(code=CODES.get(status, code_pb2.UNKNOWN), message=message)
    if status == 400 and field:
        detail = error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=field, description=message)])
        st.details.append(_any(detail))
    headers = dict(headers or {})
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
        st.details.append(_any(error_details_pb2.RetryInfo(retry_delay=Duration(seconds=retry_after))))
    return _encode(st, media or JSON, status, headers)


def _any(message) -> Any:
    packed = Any()
    packed.Pack(message)
    return packed
