"""`POST /v1/traces`: the standard OTLP/HTTP traces endpoint, so an OpenTelemetry Collector's
`otlphttp` exporter, or an app instrumented with the OpenTelemetry / OpenLLMetry / OpenInference
SDKs, can send straight to Rollscope.

Protocol (open-telemetry/opentelemetry-proto `docs/specification.md`, "OTLP/HTTP"): the body is an
`ExportTraceServiceRequest`, binary protobuf (`Content-Type: application/x-protobuf`) or JSON
(`application/json`), optionally `Content-Encoding: gzip`. Success is 200 with an
`ExportTraceServiceResponse` in the request's encoding; traces that could not become rollouts
are counted in `partialSuccess.rejectedSpans` (and quarantined with the reason). A body that is
not OTLP is 400, another media type 415.

Writing needs a write token (`Authorization: Bearer ...`). This module only receives: it checks
the request, reads the body (app/receivers/body.py: gzip, size limit), decodes the spans
(`ingest/otel/wire.py`) and hands them to the app's `TraceIntake` (app/worker/trace_intake.py), which
spools them (fsynced before the 200), assembles traces and stores each finished one as a rollout.
Backpressure, as for HTTP ingest: more than `worker.otlp_max_pending_spans` spans waiting → 429, the
database unavailable → 503, both with `Retry-After`; spans are never dropped silently (a trace
that could not be stored is kept and retried; a resent span replaces its copy).
"""
from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DBAPIError, OperationalError

from app.deps import WriteToken
from app.receivers.body import BodyError, read_body
from app.worker.trace_intake import RETRY_DOWN, intake
from ingest.otel.wire import OtlpError, SpanRecord, decode_json, decode_protobuf

PROTOBUF, JSON = "application/x-protobuf", "application/json"
MAX_BODY = 64 << 20  # bytes, after decompression


@asynccontextmanager
async def _lifespan(app):
    """On start-up, rebuild the waiting traces from the spool (a trace whose root is already
    there is stored at once); on shutdown, store every trace still waiting (its root may never
    come)."""
    rec = intake(app)
    try:
        await run_in_threadpool(rec.restore)
        rec.start()
    except (OperationalError, DBAPIError):
        pass  # the database is down: the first request or idle pass tries again
    yield
    if rec.task is not None:
        rec.task.cancel()
    try:
        await run_in_threadpool(rec.flush, everything=True)
    except (OperationalError, DBAPIError):
        pass  # the database is gone: nothing more can be done here


router = APIRouter(tags=["receive"], lifespan=_lifespan)


def _error(status: int, message: str, retry: int | None = None) -> Response:
    headers = {"Retry-After": str(retry)} if retry is not None else None
    return JSONResponse({"code": status, "message": message}, status_code=status, headers=headers)


@router.post("/v1/traces", include_in_schema=False)  # OTLP/HTTP, specified upstream (docs/formats-otlp.md)
async def receive_traces(request: Request, _: WriteToken) -> Response:
    """Take an OTLP `ExportTraceServiceRequest` (protobuf or JSON, gzip allowed).

    200: `ExportTraceServiceResponse` (`partialSuccess.rejectedSpans` counts spans of traces that
    could not become rollouts); 400: not OTLP (the message names the field); 413: body above
    64 MiB; 415: not protobuf or JSON; 429 (`Retry-After: 1`): too many spans waiting;
    503 (`Retry-After: 5`): the database is unavailable. 401/403 without a write token.
    """
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in (PROTOBUF, JSON):
        return _error(415, f"Content-Type must be {PROTOBUF} or {JSON}, got {media or 'none'!r}")
    try:
        body = await read_body(request, limit=MAX_BODY)
    except BodyError as exc:
        return _error(exc.status, exc.message)
    try:
        spans: list[SpanRecord] = decode_protobuf(body) if media == PROTOBUF else decode_json(body)
    except OtlpError as exc:
        return _error(400, str(exc))
    rec = intake(request.app)
    rec.start()
    try:
        refused = await run_in_threadpool(rec.accept, spans)
        if refused is not None:
            return _error(*refused)
        rejected, reason = await run_in_threadpool(rec.flush)
    except (OperationalError, DBAPIError) as exc:
        return _error(503, f"the database is unavailable ({type(exc).__name__}); the spans are kept, retry later",
                      RETRY_DOWN)
    return _success(media, rejected, reason)


def _success(media: str, rejected: int, reason: str | None) -> Response:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    if media == PROTOBUF:
        resp = ExportTraceServiceResponse()
        if rejected:
            resp.partial_success.rejected_spans = rejected
            resp.partial_success.error_message = reason or ""
        return Response(resp.SerializeToString(), media_type=PROTOBUF)
    body = {"partialSuccess": {"rejectedSpans": str(rejected), "errorMessage": reason or ""}} if rejected else {}
    return JSONResponse(body)
