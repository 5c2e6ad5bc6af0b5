"""`POST /v1/traces`: the standard OTLP/HTTP traces endpoint, so an OpenTelemetry Collector's
`otlphttp` exporter, or an app instrumented with the OpenTelemetry / OpenLLMetry / OpenInference
SDKs, can send straight to Rollscope.

Protocol (open-telemetry/opentelemetry-proto `docs/specification.md`, "OTLP/HTTP"): the body is an
`ExportTraceServiceRequest`, binary protobuf (`Content-Type: application/x-protobuf`) or JSON
(`application/json`), optionally `Content-Encoding: gzip`. Success is 200 with an
`ExportTraceServiceResponse` in the request's encoding; traces that could not become rollouts
are counted in `partialSuccess.rejectedSpans` (and quarantined with the reason). A body that is
not OTLP is 400, another media type 415.

Writing needs a write token (`Authorization: Bearer ...`). Spans of one trace may come in several
requests; `ingest/otel/assembler.py` holds them until the root span arrives or the trace has been
idle `worker.otlp_idle_seconds`, then the trace is stored as one rollout (`ingest/otel/read.py`).
Before a request is answered 200 its spans are appended and fsynced to the receiver's spool
(app/worker/trace_spool.py, in `worker.otlp_spool_dir`); at start-up the assembler is rebuilt
from it, and a finished trace's rows and its spool offset are committed together, so a killed
server loses no accepted span and stores no trace twice.
Backpressure, as for HTTP ingest: more than `worker.otlp_max_pending_spans` spans waiting → 429, the
database unavailable → 503, both with `Retry-After`; spans are never dropped silently (a trace
that could not be stored is kept and retried; a resent span replaces its copy).
"""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
import gzip
import threading
import time
import zlib
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DBAPIError, OperationalError

from app.auth import TokenInfo, require
from app.worker.trace_spool import TraceSpool
from ingest.formats.base import record_error
from ingest.otel.wire import OtlpError, SpanRecord, decode_json, decode_protobuf
from ingest.otel.assembler import TraceAssembler
from ingest.otel.read import rollout_from_spans
from ingest.otel.semconv import is_genai_trace
from ingest.schema import Rollout
from ingest.errors import RecordError



@asynccontextmanager
async def _lifespan(app):
    """On start-up, rebuild the waiting traces from the spool (a trace whose root is already
    there is stored at once); on shutdown, store every trace still waiting (its root may never
    come)."""
    if getattr(app.state, "otlp_receiver", None) is None:
        app.state.otlp_receiver = Receiver(app)
    rec = app.state.otlp_receiver
    try:
        await run_in_threadpool(rec.restore)
        rec.start()
    except (OperationalError, DBAPIError):
        pass  # the database is down: the first request or idle pass tries again
    yield
    if rec is not None:
        if rec.task is not None:
            rec.task.cancel()
        try:
            await run_in_threadpool(rec.flush, everything=True)
        except (OperationalError, DBAPIError):
            pass  # the database is gone: nothing more can be done here


router = APIRouter(tags=["receive"], lifespan=_lifespan)
_require_write = require("write")


def write_token(request: Request) -> TokenInfo:
    """The project's write-token check (app/auth.py); a database too broken to look the token up
    is a 503 with Retry-After, like any other write that cannot be stored now."""
    try:
        return _require_write(request)
    except (OperationalError, DBAPIError):
        raise HTTPException(503, "the database is unavailable; retry later",
                            headers={"Retry-After": str(RETRY_DOWN)}) from None


WriteToken = Annotated[TokenInfo, Depends(write_token)]

PROTOBUF, JSON = "application/x-protobuf", "application/json"
MAX_BODY = 64 << 20  # bytes, after decompression
RETRY_FULL, RETRY_DOWN = 1, 5  # Retry-After seconds for 429 and 503
PRUNE_EVERY = 60.0  # seconds between sweeps of stored traces' spool files





class Receiver:
    """The app's one assembler, its lock and its idle flusher."""

    def __init__(self, app) -> None:
        s = app.state.settings
        self.app = app
        self.assembler = TraceAssembler(idle=s.worker.otlp_idle_seconds)
        self.max_pending = s.worker.otlp_max_pending_spans
        self.spool = TraceSpool(app.state.engine, s.worker.otlp_spool_dir)
        self.ends: dict[str, int] = {}  # trace id → end of its spool bytes the assembler holds
        self.restored = False
        self.lock = threading.Lock()
        self.task: asyncio.Task | None = None
        self.pruned_at = 0.0

    def restore(self) -> None:
        """Rebuild the assembler from the spool (once): every trace with spans not yet stored,
        idle since its file last changed. Raises the database's error."""
        with self.lock:
            if self.restored:
                return
            now, wall = time.monotonic(), time.time()
            for p in self.spool.pending():
                self.assembler.add(p.spans, now - max(0.0, wall - p.mtime))
                self.ends[p.trace_id] = max(self.ends.get(p.trace_id, 0), p.end)
            self.restored = True
        self.flush()

    def accept(self, spans: list[SpanRecord]) -> Response | None:
        """Spool and hold one request's spans; a 429/503 response when they cannot be taken."""
        self.restore()
        with self.lock:
            if self.assembler.pending_spans + len(spans) > self.max_pending and spans:
                return _error(429, f"{self.assembler.pending_spans} spans are waiting to be stored; retry later",
                              RETRY_FULL)
            try:
                appended = self.spool.append(spans)
            except OSError as exc:
                return _error(503, f"the spool cannot be written ({exc.strerror}); retry later", RETRY_DOWN)
            now = time.monotonic()
            for a in appended:
                if a.start and a.trace_id not in self.assembler.open and a.trace_id not in self.assembler.done:
                    # a late span of a trace stored before a restart: assemble it again with the rest
                    self.assembler.add(self.spool.read(a.trace_id, a.start)[0], now)
                self.ends[a.trace_id] = max(self.ends.get(a.trace_id, 0), a.end)
            self.assembler.add(spans, now)
        return None

    def flush(self, *, everything: bool = False) -> tuple[int, str | None]:
        """Store every finished trace: (spans rejected, first reason). Raises the database's
        error after putting the traces back."""
        with self.lock:
            ready = self.assembler.take_finished(time.monotonic(), everything=everything)
            ends = {tid: self.ends.pop(tid, None) for tid, _ in ready}
        if not ready:
            return 0, None
        items: list[tuple[str, Rollout | RecordError, int | None]] = []
        rejected, reason = 0, None
        for tid, spans in ready:
            if ends[tid] is not None:  # spooled: the file holds every span taken for it, by any process
                got, end = self.spool.read(tid)
                if got:
                    spans, ends[tid] = got, end
            if not is_genai_trace(spans):
                err = RecordError("/v1/traces", None, f"trace {tid}", "no GenAI or OpenInference span")
            else:
                try:
                    items.append((tid, rollout_from_spans(spans, source={"format": "otlp", "file": "/v1/traces",
                                                                         "line": None, "trace_id": tid}), ends[tid]))
                    continue
                except Exception as exc:  # noqa: BLE001 - one odd trace is quarantined, never a 500
                    err = record_error("/v1/traces", None, f"trace {tid}", exc)
            items.append((tid, err, ends[tid]))
            rejected += len(spans)
            reason = reason or err.message
        try:
            self.spool.commit(items)
        except (OperationalError, DBAPIError):
            with self.lock:
                self.assembler.put_back(ready, time.monotonic())
                for tid, end in ends.items():
                    if end is not None:
                        self.ends[tid] = max(self.ends.get(tid, 0), end)
            raise
        return rejected, reason

    def prune(self) -> None:
        """Now and then, delete spool files of traces stored longer ago than the assembler keeps them."""
        if time.monotonic() - self.pruned_at < PRUNE_EVERY:
            return
        self.pruned_at = time.monotonic()
        with self.lock:
            self.spool.prune(self.assembler.keep)

    def start(self) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._idle_loop())

    async def _idle_loop(self) -> None:
        period = max(0.2, min(5.0, self.assembler.idle / 2))
        while True:
            await asyncio.sleep(period)
            try:
                await run_in_threadpool(self.restore)
                await run_in_threadpool(self.flush)
                await run_in_threadpool(self.prune)
            except (OperationalError, DBAPIError):
                pass  # kept; tried again next period


def receiver(request: Request) -> Receiver:
    app = request.app
    if getattr(app.state, "otlp_receiver", None) is None:
        app.state.otlp_receiver = Receiver(app)
    return app.state.otlp_receiver


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
    body = await request.body()
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding == "gzip":
        try:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            body = d.decompress(body, MAX_BODY + 1)
        except (zlib.error, EOFError, gzip.BadGzipFile) as exc:
            return _error(400, f"Content-Encoding gzip: body does not decompress: {exc}")
    elif encoding not in ("", "identity"):
        return _error(415, f"Content-Encoding {encoding!r} is not supported (gzip or none)")
    if len(body) > MAX_BODY:
        return _error(413, f"body larger than {MAX_BODY} bytes")
    try:
        spans: list[SpanRecord] = decode_protobuf(body) if media == PROTOBUF else decode_json(body)
    except OtlpError as exc:
        return _error(400, str(exc))
    rec = receiver(request)
    rec.start()
    try:
        refused = await run_in_threadpool(rec.accept, spans)
        if refused is not None:
            return refused
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
