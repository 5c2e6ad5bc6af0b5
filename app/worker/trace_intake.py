"""Behind the OTLP receiver (app/receivers/otlp.py): the spans it took become rollouts here.

Spans of one trace may come in several requests; `ingest/otel/assembler.py` holds them until the
root span arrives or the trace has been idle `worker.otlp_idle_seconds`, then the trace is
stored as one rollout (`ingest/otel/read.py`). Before the receiver answers 200, `accept` has
appended and fsynced the spans to the spool (app/worker/trace_spool.py, in
`worker.otlp_spool_dir`); `restore` rebuilds the assembler from it at start-up, and a finished
trace's rows and its spool offset are committed together (`TraceSpool.commit`), so a killed
server loses no accepted span and stores no trace twice. A trace that could not be stored is
put back and retried; a trace that is not GenAI, or that the mapping refuses, is quarantined, one
entry per trace (ingest/otel/rejection.py).
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import NamedTuple

from fastapi.concurrency import run_in_threadpool
from sqlalchemy.exc import DBAPIError, OperationalError

from app.db.engine import writes
from app.store.quarantine import http_source
from app.worker.trace_spool import TraceSpool
from ingest.errors import RecordError
from ingest.otel.assembler import TraceAssembler
from ingest.otel.read import rollout_from_spans
from ingest.otel.rejection import RECEIVER, trace_rejection
from ingest.otel.semconv import is_genai_trace
from ingest.otel.wire import SpanRecord
from ingest.schema import Rollout

log = logging.getLogger("rollscope.otlp")
RETRY_FULL, RETRY_DOWN = 1, 5  # Retry-After seconds for 429 and 503
PRUNE_EVERY = 60.0  # seconds between sweeps of stored traces' spool files


class Refusal(NamedTuple):
    """Why spans cannot be taken: the HTTP status (413 more spans in one request than may ever
    wait, 429 too many waiting now, 503 the spool cannot be written), a message, and the
    `Retry-After` seconds (None: retrying the same request cannot help)."""

    status: int
    message: str
    retry_after: int | None


class Outcome(NamedTuple):
    """A quarantined trace, as the requests that sent spans of it are told: the flush's sequence
    number (`TraceIntake.seq`), the ids of the spans rejected, and why."""

    seq: int
    span_ids: frozenset[str]
    reason: str


class TraceIntake:
    """The app's one assembler, its spool, its lock and its idle flusher (`app.state.otlp_receiver`)."""

    def __init__(self, app) -> None:
        s = app.state.settings
        self.app = app
        self.assembler = TraceAssembler(idle=s.worker.otlp_idle_seconds)
        self.max_pending = s.worker.otlp_max_pending_spans
        self.spool = TraceSpool(writes(app.state.engine), s.worker.otlp_spool_dir)  # its writes lock at BEGIN
        self.ends: dict[str, int] = {}  # trace id → end of its spool bytes the assembler holds
        # trace id → the name of the token that last sent spans of it (a rejected trace's quarantine
        # source, `http:<name>`); not kept across a restart: a trace restored from the spool is `http`
        self.senders: dict[str, str | None] = {}
        # trace id → its last quarantine (`rejections`), newest last, bounded like the assembler's `done`
        self.outcomes: OrderedDict[str, Outcome] = OrderedDict()
        self.seq = 0  # outcomes recorded so far: a request reads it before its spans are taken
        self.restored = False
        self.lock = threading.Lock()
        # one flush at a time: a request's flush waits for the idle loop's, so the outcome of a
        # trace the idle loop took is known before the request answers
        self.flushing = threading.Lock()
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

    def accept(self, spans: list[SpanRecord], token_name: str | None = None) -> Refusal | None:
        """Spool and hold one request's spans, sent with the token named `token_name`; a 429 or
        503 refusal when they cannot be taken."""
        self.restore()
        if len(spans) > self.max_pending:  # never takeable: a 429 would be retried for ever
            return Refusal(413, f"{len(spans)} spans in one request, more than the {self.max_pending} that may wait "
                           "to be stored (worker.otlp_max_pending_spans): send them in smaller requests", None)
        with self.lock:
            if self.assembler.pending_spans + len(spans) > self.max_pending and spans:
                return Refusal(429, f"{self.assembler.pending_spans} spans are waiting to be stored; retry later",
                               RETRY_FULL)
            try:
                appended = self.spool.append(spans)
            except OSError as exc:
                return Refusal(503, f"the spool cannot be written ({exc.strerror}); retry later", RETRY_DOWN)
            now = time.monotonic()
            for a in appended:
                if a.start and a.trace_id not in self.assembler.open and a.trace_id not in self.assembler.done:
                    # a late span of a trace stored before a restart: assemble it again with the rest
                    self.assembler.add(self.spool.read(a.trace_id, a.start)[0], now)
                self.ends[a.trace_id] = max(self.ends.get(a.trace_id, 0), a.end)
                self.senders[a.trace_id] = token_name
            self.assembler.add(spans, now)
        return None

    def flush(self, *, everything: bool = False) -> tuple[int, str | None]:
        """Store every finished trace: (spans rejected, first reason), over every trace this call
        stored. Raises the database's error after putting the traces back."""
        with self.flushing:
            return self._flush(everything)

    def rejections(self, spans: Iterable[SpanRecord], since: int) -> tuple[int, str | None]:
        """(spans rejected, first reason): the spans of `spans` (one request's) in a trace that a
        flush quarantined after `since` (the request's reading of `seq` before `accept`). What
        the request reports as its `partial_success`, whichever flush (its own or the idle loop's)
        took the trace, and whatever other requests carried spans of it: each request is told of
        its own spans, every request that sent a rejected span is told."""
        rejected, reason = 0, None
        with self.lock:
            for s in spans:
                got = self.outcomes.get(s.trace_id)
                if got is not None and got.seq > since and s.span_id in got.span_ids:
                    rejected += 1
                    reason = reason or got.reason
        return rejected, reason

    def _flush(self, everything: bool) -> tuple[int, str | None]:
        with self.lock:
            ready = self.assembler.take_finished(time.monotonic(), everything=everything)
            ends = {tid: self.ends.pop(tid, None) for tid, _ in ready}
        if not ready:
            return 0, None
        items: list[tuple[str, Rollout | RecordError, int | None]] = []
        refused: dict[str, tuple[frozenset[str], str]] = {}
        for tid, spans in ready:
            if ends[tid] is not None:  # spooled: the file holds every span taken for it, by any process
                got, end = self.spool.read(tid)
                if got:
                    spans, ends[tid] = got, end
            err = _rollout_or_rejection(tid, spans)
            if isinstance(err, Rollout):
                items.append((tid, err, ends[tid]))
                continue
            err.source = http_source(self.senders.get(tid))  # type: ignore[attr-defined]  # quarantine_many
            items.append((tid, err, ends[tid]))
            refused[tid] = (frozenset(s.span_id for s in spans), err.message)
        try:
            self.spool.commit(items)
        except (OperationalError, DBAPIError):
            with self.lock:
                self.assembler.put_back(ready, time.monotonic())
                for tid, end in ends.items():
                    if end is not None:
                        self.ends[tid] = max(self.ends.get(tid, 0), end)
            raise
        with self.lock:
            for tid, _ in ready:
                self.senders.pop(tid, None)
            for tid, (span_ids, why) in refused.items():
                self.seq += 1
                self.outcomes.pop(tid, None)
                self.outcomes[tid] = Outcome(self.seq, span_ids, why)
            while len(self.outcomes) > self.assembler.keep_max:
                self.outcomes.popitem(last=False)
        first = next(iter(refused.values()), (None, None))[1]
        return sum(len(ids) for ids, _ in refused.values()), first

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


def _rollout_or_rejection(tid: str, spans: list[SpanRecord]) -> Rollout | RecordError:
    """One finished trace as a rollout, or as the RecordError that quarantines it: not GenAI, or
    refused by the mapping. Never raises: a trace that cannot even be described is quarantined
    with the reason, since a raise here would be a 500, and at start-up (`restore` flushes) a
    server that cannot start."""
    try:
        if not is_genai_trace(spans):
            return trace_rejection(tid, spans, "no GenAI or OpenInference span")
        try:
            return rollout_from_spans(spans, source={"format": "otlp", "file": RECEIVER, "line": None,
                                                     "trace_id": tid})
        except Exception as exc:  # noqa: BLE001 - one odd trace is quarantined, never a 500
            return trace_rejection(tid, spans, exc)
    except Exception as exc:  # noqa: BLE001 - nor a server that cannot start
        log.exception("trace %s could not be read or described", tid)
        return RecordError(RECEIVER, None, None, f"the trace could not be read ({type(exc).__name__}: {exc})"[:500],
                           key=tid)


def intake(app) -> TraceIntake:
    """The app's one TraceIntake (`app.state.otlp_receiver`), made on first use."""
    if getattr(app.state, "otlp_receiver", None) is None:
        app.state.otlp_receiver = TraceIntake(app)
    return app.state.otlp_receiver
