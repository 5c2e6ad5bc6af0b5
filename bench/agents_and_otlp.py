"""Figures for the agent-harness readers and the OTLP receiver (issue 8), on a real SQLite file.

Prints: each agent reader's throughput (MB/s of source read into native rollouts, no database)
on the real files of tests/fixtures/realdata, repeated to a few MB; OTLP/JSON decode + mapping
throughput (spans/s); the OTLP export of case 17 (5,000 turns, 10,002 nodes: size against the
native export, write and read-back time, exactness); and `POST /v1/traces` over real HTTP
(uvicorn on a free port, the SDK's own protobuf exporter, one request per batch of spans) in
spans/s and rollouts/s, stored.
Run: `.venv/bin/python bench/agents_and_otlp.py` (also part of `make bench`).
"""
from __future__ import annotations

import hashlib
import json
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import uvicorn  # noqa: E402

from app.config import Settings  # noqa: E402
from app.main import create_app  # noqa: E402
from ingest.formats import registry  # noqa: E402
from ingest.formats.base import ReadContext  # noqa: E402
from ingest.otel.read import rollout_from_spans  # noqa: E402
from ingest.otel.wire import (
    decode_json,  # noqa: E402
    encode_json,  # noqa: E402
)
from ingest.otel.write import spans_from_rollout  # noqa: E402
from ingest.source import open_source  # noqa: E402

REAL = ROOT / "tests" / "fixtures" / "realdata"
FILES = ["swe-agent/pydicom__pydicom-1458.traj",
         "swe-agent/marshmallow-code__marshmallow-1867.function_calling_replace.traj",
         "mini-swe-agent/github_issue.traj.json", "openhands/basic.json", "inspect_ai/log_read_sample.eval",
         "inspect_ai/log_tool_call_error.json"]


def reader_throughput() -> None:
    for rel in FILES:
        path = REAL / rel
        size = path.stat().st_size
        reps = max(1, int(4e6 // size))
        start = time.perf_counter()
        n = 0
        for _ in range(reps):
            src = open_source(path)
            reader = registry.detect(src)
            n += sum(1 for _ in reader.read(src, ReadContext(run_id="bench")))
        dt = time.perf_counter() - start
        print(f"  {reader.NAME:15s} {rel:75s} {size * reps / dt / 1e6:7.1f} MB/s  ({n} rollouts)")


def otlp_mapping() -> None:
    src = open_source(REAL / FILES[1])
    [r] = list(registry.detect(src).read(src, ReadContext(run_id="bench")))
    doc = json.dumps(encode_json(spans_from_rollout(r)))
    reps = 200
    start = time.perf_counter()
    spans = 0
    for _ in range(reps):
        s = decode_json(doc)
        rollout_from_spans(s)
        spans += len(s)
    dt = time.perf_counter() - start
    print(f"  OTLP/JSON decode + GenAI mapping: {spans / dt:,.0f} spans/s ({len(doc) * reps / dt / 1e6:.1f} MB/s)")


def otlp_export_size(turns: int = 5000) -> None:
    """Case 17 of tests/fixtures/cases, generated: `otlp.write` and reading the file back (what
    `rollscope export --format otlp` and `rollscope ingest` do around the database)."""
    import os
    import subprocess

    from ingest.export import Export
    from ingest.formats import native, otlp

    script = ROOT.parent / "shared" / "cases" / "15-17-make-large-cases.py"
    if not script.exists():
        script = ROOT / "tests" / "fixtures" / "cases" / "15-17-make-large-cases.py"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, str(script), tmp, "0.001", str(turns)], check=True, capture_output=True)
        src = open_source(Path(tmp) / "17-many-turns.json")
        [r] = list(registry.detect(src).read(src, ReadContext(run_id="bench")))
        size_native = len(native.write_line(r))
        start = time.perf_counter()
        data = b"".join(Export([r], "otlp"))
        t_write = time.perf_counter() - start
        out = Path(tmp) / "case17.otlp.jsonl"
        out.write_bytes(data)
        start = time.perf_counter()
        back = open_source(out)
        [again] = list(otlp.read(back, ReadContext()))
        t_read = time.perf_counter() - start
        a, b = r.to_json_dict(), again.to_json_dict()
        a.pop("source"), b.pop("source")
        print(f"  OTLP export of case 17 ({turns:,} turns, {len(r.nodes):,} nodes): {len(data) / 1e6:.1f} MB "
              f"({len(data) / size_native:.1f}x native {size_native / 1e6:.1f} MB), write {t_write:.2f} s, "
              f"read back {t_read:.2f} s, exact: {a == b}  (load {os.getloadavg()})")


def receiver() -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import set_span_in_context

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Settings(database_url=f"sqlite:///{tmp}/bench.db"))
        app.state.write_token_hashes = {hashlib.sha256(b"bench").hexdigest()}
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        th = threading.Thread(target=srv.run, daemon=True)
        th.start()
        while not srv.started:
            time.sleep(0.05)
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces",
                                    headers={"Authorization": "Bearer bench"})
        provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=200_000, max_export_batch_size=512,
                                                       schedule_delay_millis=50))
        tracer = provider.get_tracer("bench")
        history = [{"role": "user", "parts": [{"type": "text", "content": "task"}]}]
        n_traces, turns = 300, 8
        start = time.perf_counter()
        for t in range(n_traces):
            root = tracer.start_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent",
                                                                   "rollscope.run": "bench", "rollscope.reward": 1.0})
            ctx = set_span_in_context(root)
            msgs = list(history)
            for k in range(turns):
                out = {"role": "assistant", "parts": [{"type": "tool_call", "id": f"c{k}", "name": "bash",
                                                       "arguments": {"command": f"ls {t} {k}"}}]}
                sp = tracer.start_span("chat m", context=ctx, attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(msgs),
                    "gen_ai.output.messages": json.dumps([out])})
                sp.end()
                tool = {"role": "tool", "parts": [{"type": "tool_call_response", "id": f"c{k}", "response": "x" * 200}]}
                ts = tracer.start_span("execute_tool bash", context=ctx, attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": f"c{k}",
                    "gen_ai.tool.call.result": "x" * 200})
                ts.end()
                msgs += [out, tool]
            root.end()
        provider.force_flush()
        dt = time.perf_counter() - start
        provider.shutdown()
        n_spans = n_traces * (1 + 2 * turns)
        srv.should_exit = True
        th.join(10)
        import sqlalchemy as sa

        with app.state.engine.connect() as c:
            stored = c.execute(sa.text("select count(*) from rollout where run_id = 'bench'")).scalar()
        app.state.engine.dispose()
        print(f"  POST /v1/traces (protobuf, SDK BatchSpanProcessor, SQLite): {n_spans / dt:,.0f} spans/s, "
              f"{stored / dt:,.1f} rollouts/s stored ({stored}/{n_traces} traces, {turns} turns each)")


if __name__ == "__main__":
    print("agent-harness readers (no database):")
    reader_throughput()
    print("OTLP:")
    otlp_mapping()
    otlp_export_size()
    receiver()
