"""`POST /v1/traces`: the standard OTLP/HTTP traces endpoint, so an OpenTelemetry Collector's
`otlphttp` exporter, or an app instrumented with the OpenTelemetry / OpenLLMetry / OpenInference
SDKs, can send straight to Rollscope.

Protocol (open-telemetry/opentelemetry-proto `docs/specification.md`, "OTLP/HTTP"): the body is an
`ExportTraceServiceRequest`, binary protobuf (`Content-Type: application/x-protobuf`) or JSON
(`application/json`), optionally `Content-Encoding: gzip`. Every answer is in the request's
encoding (app/receivers/otlp_response.py): 200 with an `ExportTraceServiceResponse`, traces that
could not become rollouts counted in `partial_success.rejected_spans` (and quarantined with the
reason); every failure a `google.rpc.Status`, the token's 401 and 403 included. A body that is not
OTLP is 400, one over `api.max_body_bytes` 413, another media type 415.

Writing needs a write token (`Authorization: Bearer ...`). This module only receives: it checks
the request, reads the body (app/receivers/body.py: gzip, size limit, bounded memory), decodes
the spans (`ingest/otel/wire.py`) and hands them to the app's `TraceIntake`
(app/worker/trace_intake.py), which spools them (fsynced before the 200), assembles traces and
stores each finished one as a rollout. Backpressure ("OTLP/HTTP Throttling"), as for HTTP ingest:
more than `worker.otlp_max_pending_spans` spans waiting → 429, the database unavailable or the
process's body memory spent → 503, each with `Retry-After`; spans are never dropped silently (a
trace that could not be stored is kept and retried; a resent span replaces its copy).
"""
from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from fastapi.routing import APIRoute
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException

from app.deps import WriteToken
from app.receivers.body import BodyError, budget, read_body
from app.receivers.otlp_response import JSON, PROTOBUF, failure, media_type, success
from app.worker.trace_intake import RETRY_DOWN, intake
from ingest.otel.wire import OtlpError, SpanRecord, decode_json, decode_protobuf

log = logging.getLogger("rollscope.otlp")


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


class OtlpRoute(APIRoute):
    """A route whose every failure is an OTLP one: the HTTP errors its dependencies raise (the
    write token's 401 and 403, its 503 when the database cannot look the token up) and anything
    unexpected (500, logged) become a `google.rpc.Status` in the request's encoding, where the
    app's handlers (app/errors.py) would answer Rollscope's own JSON error shape."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def otlp_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except HTTPException as exc:
                headers = dict(exc.headers or {})
                retry = headers.pop("Retry-After", None)
                return failure(media_type(request), exc.status_code, str(exc.detail), headers=headers,
                               retry_after=int(retry) if retry and retry.isdigit() else None)
            except Exception as exc:  # noqa: BLE001 - an OTLP client is owed a Status, not a page
                log.exception("unexpected error on POST %s", request.url.path)
                return failure(media_type(request), 500, f"internal error ({type(exc).__name__})")

        return otlp_handler


def _decode_json_request(body: bytes) -> list[SpanRecord]:
    """The spans of an OTLP/JSON request. `{}` is the empty request (proto3 JSON: every field at
    its default), a success as an empty protobuf body is; a file of `{}` is no OTLP file, so this
    is the receiver's rule, not `decode_json`'s."""
    if body.strip() == b"{}":
        return []
    return decode_json(body)


# the BadRequest's field when the body as a whole is at fault (not JSON, not protobuf, does not inflate)
WHOLE_REQUEST = "ExportTraceServiceRequest"

router = APIRouter(tags=["receive"], lifespan=_lifespan, route_class=OtlpRoute)


@router.post("/v1/traces", include_in_schema=False)  # OTLP/HTTP, specified upstream (docs/formats-otlp.md)
async def receive_traces(request: Request, _: WriteToken) -> Response:
    """Take an OTLP `ExportTraceServiceRequest` (protobuf or JSON, gzip allowed); answer in the
    request's encoding (app/receivers/otlp_response.py).

    200: `ExportTraceServiceResponse` (`partial_success.rejected_spans` counts this request's own
    spans in traces quarantined by the time it answers, whichever flush took them:
    `TraceIntake.rejections`). Failures, each a `google.rpc.Status`: 400 not OTLP (a `BadRequest`
    names the field, `ExportTraceServiceRequest` for a body that is not JSON or protobuf at all)
    or gzip/deflate that does not inflate; 413 body above `api.max_body_bytes` (64 MiB
    after inflating); 408 (`Connection: close`) no bytes of the body for `api.body_timeout_seconds`
    (30 s); 415 not protobuf or JSON (answered in JSON), or an encoding other than gzip;
    429 (`Retry-After: 1`) too many spans waiting; 503 (`Retry-After`) the database is unavailable
    (5 s) or the process holds `api.body_memory_bytes` of bodies (1 s); 401/403 without a write
    token.
    """
    media = media_type(request)
    if media is None:
        got = request.headers.get("content-type", "").split(";")[0].strip() or "none"
        return failure(JSON, 415, f"Content-Type must be {PROTOBUF} or {JSON}, got {got!r}")
    try:
        async with read_body(request, limit=request.app.state.settings.api.max_body_bytes,
                             budget=budget(request.app)) as body:
            decode = decode_protobuf if media == PROTOBUF else _decode_json_request
            spans: list[SpanRecord] = await run_in_threadpool(decode, body)
    except BodyError as exc:
        headers = {k: v for k, v in exc.headers().items() if k != "Retry-After"}
        return failure(media, exc.status, exc.message, retry_after=exc.retry_after, headers=headers,
                       field=WHOLE_REQUEST)
    except OtlpError as exc:
        return failure(media, 400, str(exc), field=exc.field or WHOLE_REQUEST)
    rec = intake(request.app)
    rec.start()
    try:
        since = rec.seq  # before the spans are taken: a rejection after it may be of this request's spans
        refused = await run_in_threadpool(rec.accept, spans, getattr(request.state, "token_name", None))
        if refused is not None:
            return failure(media, refused.status, refused.message, retry_after=refused.retry_after)
        await run_in_threadpool(rec.flush)
        # this request's spans only, whichever flush stored their trace (the idle loop may have taken it)
        rejected, reason = rec.rejections(spans, since)
    except (OperationalError, DBAPIError) as exc:
        return failure(media, 503, f"the database is unavailable ({type(exc).__name__}); the spans are kept, "
                       "retry later", retry_after=RETRY_DOWN)
    return success(media, rejected, reason)
