"""OTLP/JSON trace files: one `ExportTraceServiceRequest` document, or JSON Lines of them (what
the OpenTelemetry Collector's `file` exporter writes). Spans are grouped by trace id; each trace
that carries GenAI or OpenInference spans becomes one rollout (`ingest/otel/read.py` has the
mapping; `ingest/otel/wire.py` the wire format). A trace with no GenAI span is rejected by name.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

from ingest.errors import RecordError
from ingest.formats._harness import documents
from ingest.formats.base import ReadContext, json_line, record_error
from ingest.otel.read import rollout_from_spans
from ingest.otel.semconv import is_genai_trace
from ingest.otel.wire import OtlpError, SpanRecord, decode_json, encode_json, is_otlp_json
from ingest.otel.write import spans_from_rollout
from ingest.schema import Rollout
from ingest.source import Source

NAME = "otlp"
EXPECTS = "OTLP/JSON ExportTraceServiceRequest {resourceSpans: [...]} (a document or JSON Lines) with GenAI spans"


def sniff(source: Source) -> bool:
    return source.kind in ("json", "jsonl") and is_otlp_json(source.first)


def read(source: Source, ctx: ReadContext) -> Iterator[Rollout | RecordError]:
    traces: dict[str, list[SpanRecord]] = {}
    first_line: dict[str, int | None] = {}
    for line, doc in documents(source):
        if isinstance(doc, RecordError):
            yield doc
            continue
        try:
            spans = decode_json(doc)
        except OtlpError as exc:
            yield RecordError(source.name, line, exc.field, exc.message)
            continue
        for s in spans:
            traces.setdefault(s.trace_id, []).append(s)
            first_line.setdefault(s.trace_id, line)
    for trace_id, spans in traces.items():
        line = first_line[trace_id]
        if not is_genai_trace(spans):
            yield RecordError(source.name, line, f"trace {trace_id}",
                              "no GenAI or OpenInference span (no gen_ai.operation.name, openinference.span.kind "
                              "or message attributes)")
            continue
        try:
            yield rollout_from_spans(spans, run_id=ctx.run_id,
                                     source={"format": NAME, "file": source.name, "line": line})
        except Exception as exc:  # noqa: BLE001 - one odd trace never stops the file
            yield record_error(source.name, line, f"trace {trace_id}", exc)


def write(rollouts: Iterable[Rollout]) -> Iterator[tuple[bytes, int]]:
    """OTLP/JSON JSON Lines: one ExportTraceServiceRequest line per rollout, each an
    `invoke_agent` trace with `chat` and `execute_tool` spans and the RL fields as `rollscope.*`
    attributes (`ingest/otel/write.py` `spans_from_rollout`)."""
    for r in rollouts:
        yield json_line(encode_json(spans_from_rollout(r))), 1
