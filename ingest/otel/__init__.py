"""OpenTelemetry traces ↔ rollouts; no database, no web (the `/v1/traces` receiver is in `app/`).

- `wire.py`: OTLP/JSON and OTLP/protobuf ↔ plain span records (`SpanRecord`), no semantics.
- `semconv.py`: the GenAI and OpenInference conventions: span roles, messages from attributes,
  the `rollscope.*` attribute names.
- `read.py`: one trace's spans → one rollout (`rollout_from_spans`).
- `write.py`: one rollout → spans (`spans_from_rollout`), read back into the same rollout.
- `assembler.py`: a trace's spans gathered over several requests (`TraceAssembler`).

The file format that uses them is `ingest/formats/otlp.py`.
"""
