"""Assembling the spans of one trace that arrive over several OTLP requests.

An OpenTelemetry SDK exports each span when it ends, in batches, so a trace reaches the receiver
in pieces and its root span (which ends last) usually comes last. A trace is finished when its
root span (a span with no parent) has arrived, or when no span of it has arrived for `idle`
seconds. Spans are keyed by span id, so a client that resends a batch after a 429/503 changes
nothing. A trace flushed on idle that later receives its root is assembled again from all its
spans (kept for `keep` seconds after the flush), and the store replaces the earlier rollout.

No clock of its own: callers pass `now` (seconds), so tests drive time explicitly. Not thread
safe: the receiver calls it under one lock.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from ingest.otel.wire import SpanRecord


@dataclass
class _Trace:
    spans: dict[str, SpanRecord] = field(default_factory=dict)
    last_seen: float = 0.0
    root_seen: bool = False


class TraceAssembler:
    """Spans in, finished traces out. `pending_spans` is what backpressure is measured on."""

    def __init__(self, *, idle: float = 30.0, keep: float = 600.0, keep_max: int = 10_000):
        self.idle, self.keep, self.keep_max = idle, keep, keep_max
        self.open: dict[str, _Trace] = {}
        self.done: OrderedDict[str, tuple[float, dict[str, SpanRecord]]] = OrderedDict()
        self.pending_spans = 0

    def add(self, spans: list[SpanRecord], now: float) -> None:
        """Add spans (a resent span replaces its earlier copy)."""
        for s in spans:
            t = self.open.get(s.trace_id)
            if t is None:
                t = self.open[s.trace_id] = _Trace()
                late = self.done.pop(s.trace_id, None)
                if late is not None:  # a span after the flush: assemble the whole trace again
                    t.spans.update(late[1])
                    self.pending_spans += len(late[1])
            if s.span_id not in t.spans:
                self.pending_spans += 1
            t.spans[s.span_id] = s
            t.last_seen = now
            if s.parent_span_id is None:
                t.root_seen = True

    def take_finished(self, now: float, *, everything: bool = False) -> list[tuple[str, list[SpanRecord]]]:
        """Remove and return (trace id, spans) of every finished trace (all of them when
        `everything`, e.g. at shutdown)."""
        out = []
        for tid in [tid for tid, t in self.open.items()
                    if everything or t.root_seen or now - t.last_seen >= self.idle]:
            t = self.open.pop(tid)
            self.pending_spans -= len(t.spans)
            out.append((tid, list(t.spans.values())))
            self.done[tid] = (now, t.spans)
        while self.done and (len(self.done) > self.keep_max or now - next(iter(self.done.values()))[0] > self.keep):
            self.done.popitem(last=False)
        return out

    def put_back(self, traces: list[tuple[str, list[SpanRecord]]], now: float) -> None:
        """Return traces that could not be stored (the database was down): they are finished
        again on the next call, nothing is lost."""
        for tid, spans in traces:
            self.done.pop(tid, None)
            self.add(spans, now)
