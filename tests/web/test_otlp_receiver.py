"""`POST /v1/traces` over real HTTP: the spans of one real agent run (SWE-agent's marshmallow-1867
trajectory, tests/fixtures/realdata/swe-agent) replayed through the OpenTelemetry SDK as an
instrumented agent would emit them, sent by the SDK's own OTLP exporters (protobuf and JSON), one
span per request, assembled into one rollout."""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from google.rpc import status_pb2

from app.auth import issue
from app.config import Settings
from app.main import create_app
from ingest.formats import swe_agent
from ingest.formats.base import ReadContext
from ingest.otel.wire import decode_json
from ingest.source import open_source
from tests.conftest import data_path
from tests.helpers import http, serving

RUN_FILE = data_path("realdata", "swe-agent", "marshmallow-code__marshmallow-1867.function_calling_replace.traj")



@contextmanager
def serve(db_url: str, tmp: Path, **settings):
    """The app in a thread, its OTLP spool under `tmp`."""
    worker = {"otlp_spool_dir": tmp / "otlp-spool", **settings.pop("worker", {})}
    app = create_app(Settings(database_url=db_url, worker=worker, **settings))
    app.state.write_token, _ = issue(app.state.engine, "write", name="otlp test")
    with serving(app) as base:
        yield base, app


def real_run():
    src = open_source(Path(RUN_FILE))
    [r] = list(swe_agent.read(src, ReadContext(run_id="x")))
    return r


def _genai(m) -> dict:
    """A message as the GenAI `gen_ai.input.messages` JSON writes it (what an instrumentation does)."""
    if m.role == "tool":
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": m.tool_call_id, "response": m.text()}]}
    parts = [{"type": "text", "content": m.text()}] if m.text() else []
    parts += [{"type": "tool_call", "id": c.id, "name": c.name, "arguments": json.loads(c.arguments)}
              for c in m.tool_calls or []]
    return {"role": m.role, "parts": parts}


def replay(run, exporter, *, run_id: str, with_root: bool = True) -> None:
    """Emit the run as an instrumented agent would: invoke_agent → chat per model turn →
    execute_tool per result, each span exported (one request) when it ends."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import set_span_in_context

    provider = TracerProvider(resource=Resource.create({"service.name": "swe-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("replay")
    t = 1_738_000_000_000_000_000
    root = tracer.start_span("invoke_agent swe-agent", start_time=t, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "swe-agent",
        "rollscope.run": run_id, "rollscope.rollout_id": run.id, "rollscope.step": 3,
        "rollscope.group": "marshmallow-1867", "rollscope.group.index": 0, "rollscope.reward": 1.0,
        "rollscope.ending": "submitted", "rollscope.ending.detail": "submitted"})
    ctx = set_span_in_context(root)
    msgs = [n.message for n in run.nodes]
    for i, m in enumerate(msgs):
        t += 1_000_000
        if m.role == "assistant":
            span = tracer.start_span("chat gpt-4o", context=ctx, start_time=t, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": json.dumps([_genai(x) for x in msgs[:i]]),
                "gen_ai.output.messages": json.dumps([_genai(m)]),
                "gen_ai.response.finish_reasons": ["tool_calls"],
                "gen_ai.usage.input_tokens": 100 + i, "gen_ai.usage.output_tokens": 10 + i})
            span.end(end_time=t + 500_000)
        elif m.role == "tool":
            span = tracer.start_span(f"execute_tool {m.name}", context=ctx, start_time=t, attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": m.name or "",
                "gen_ai.tool.call.id": m.tool_call_id or "", "gen_ai.tool.call.result": m.text()})
            span.end(end_time=t + 500_000)
    if with_root:
        root.end(end_time=t + 1_000_000)
    provider.shutdown()


def exporter(kind: str, base: str, token: str):
    headers = {"Authorization": f"Bearer {token}"}
    if kind == "protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter(endpoint=f"{base}/v1/traces", headers=headers)


@pytest.mark.parametrize("kind", ["protobuf", "json"])
def test_sdk_exporter_sends_one_real_run(db_url, tmp_path, kind):
    run = real_run()
    with serve(db_url, tmp_path) as (base, app):
        replay(run, exporter(kind, base, app.state.write_token), run_id=f"otlp-{kind}")
        d = http.get(f"{base}/runs/otlp-{kind}/rollouts/{run.id}.json").json()
    # 24 messages, 11 tool calls each answered (hand count in tests/formats/test_agent_harnesses.py)
    assert [m["role"] for m in d["messages"]] == [n.message.role for n in run.nodes]
    assert len(d["messages"]) == 24
    calls = [c for m in d["messages"] for c in m["tool_calls"]]
    assert len(calls) == 11 and all(c["result_node"] is not None for c in calls)
    assert [c["name"] for c in calls][:3] == ["create", "insert", "bash"]
    assert d["ending"]["type"] == "submitted" and d["reward"] == 1.0
    assert d["rollout"]["step"] == 3
    assert len(d["calls"]) == 12 - 1  # one chat span per assistant turn
    assert d["calls"][0]["usage"] == {"input_tokens": 102, "output_tokens": 12}


def test_requires_a_write_token(db_url, tmp_path):
    with serve(db_url, tmp_path) as (base, app):
        body = json.dumps({"resourceSpans": []})
        r = http.post(f"{base}/v1/traces", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
        # a google.rpc.Status in the request's encoding (tests/api/test_otlp_spec.py has every failure)
        assert r.headers["Content-Type"] == "application/json"
        assert r.json()["message"].startswith("this needs a write token") and r.json()["code"] == 16  # UNAUTHENTICATED
        r = http.post(f"{base}/v1/traces", content=b"", headers={"Content-Type": "application/x-protobuf"})
        assert r.status_code == 401 and r.headers["Content-Type"] == "application/x-protobuf"
        assert status_pb2.Status.FromString(r.content).message.startswith("this needs a write token")
        r = http.post(f"{base}/v1/traces", content=body, headers={"Content-Type": "application/json",
                                                                   "Authorization": "Bearer rs_wrong"})
        assert r.status_code == 401
        read, _ = issue(app.state.engine, "read")
        r = http.post(f"{base}/v1/traces", content=body, headers={"Content-Type": "application/json",
                                                                   "Authorization": f"Bearer {read}"})
        assert r.status_code == 403 and r.json()["code"] == 7  # PERMISSION_DENIED
        r = http.post(f"{base}/v1/traces", content=body, headers={"Content-Type": "application/json",
                                                                   "Authorization": f"Bearer {app.state.write_token}"})
        assert r.status_code == 200


def _span_json(trace: str, span: str, parent: str | None, name: str, attrs: dict, t: int) -> dict:
    d = {"traceId": trace, "spanId": span, "name": name, "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + 10),
         "attributes": [{"key": k, "value": {"stringValue": v} if isinstance(v, str) else {"intValue": str(v)}}
                        for k, v in attrs.items()]}
    if parent:
        d["parentSpanId"] = parent
    return d


def _post(base, spans, token, **headers):
    body = json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": spans}]}]})
    return http.post(f"{base}/v1/traces", content=body, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {token}", **headers})


CHAT = {"gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "hello"}],
                                               "finish_reason": "stop"}])}


def test_idle_trace_is_stored_and_backpressure(db_url, tmp_path):
    trace = "ab" * 16
    with serve(db_url, tmp_path, worker={"otlp_idle_seconds": 3, "otlp_max_pending_spans": 3}) as (base, app):
        # a trace whose root never comes: held (not stored), then stored once idle
        r = _post(base, [_span_json(trace, "01" * 8, "02" * 8, "chat m", CHAT, 1000)], app.state.write_token)
        assert r.status_code == 200 and r.json() == {}
        assert app.state.otlp_receiver.assembler.pending_spans == 1
        for _ in range(200):
            time.sleep(0.1)
            got = http.get(f"{base}/runs/otel/rollouts/{trace}.json")
            if got.status_code == 200:
                break
        assert got.status_code == 200 and [m["role"] for m in got.json()["messages"]] == ["user", "assistant"]
        assert got.json()["ending"]["type"] == "submitted"
        # too many spans waiting: 429 with Retry-After, nothing taken
        spans = [_span_json("cd" * 16, f"{k + 1:016x}", "ff" * 8, "chat m", CHAT, 1000 + k) for k in range(4)]
        assert _post(base, spans[:2], app.state.write_token).status_code == 200  # they wait for their root
        r = _post(base, spans[2:], app.state.write_token)
        assert r.status_code == 429 and r.headers["Retry-After"] == "1"
        assert app.state.otlp_receiver.assembler.pending_spans == 2


def test_bad_bodies(db_url, tmp_path):
    with serve(db_url, tmp_path) as (base, app):
        r = _post(base, [{"traceId": "xyz", "spanId": "01" * 8, "name": "a"}], app.state.write_token)
        assert r.status_code == 400 and "traceId" in r.json()["message"]
        r = http.post(f"{base}/v1/traces", content=b"x", headers={"Content-Type": "text/plain",
                                                                    "Authorization": f"Bearer {app.state.write_token}"})
        assert r.status_code == 415
        r = http.post(f"{base}/v1/traces", content=b"\xff\x00garbage", headers={
            "Content-Type": "application/x-protobuf", "Authorization": f"Bearer {app.state.write_token}"})
        assert r.status_code == 400
        # a trace with no GenAI span: taken, counted as rejected, quarantined
        r = _post(base, [_span_json("ee" * 16, "01" * 8, None, "GET /", {"http.method": "GET"}, 5)],
                  app.state.write_token)
        assert r.status_code == 200 and r.json()["partialSuccess"]["rejectedSpans"] == "1"
        q = http.get(f"{base}/quarantine.json").json()
        assert "no GenAI" in json.dumps(q)


def test_database_down_is_503_and_nothing_is_lost(tmp_path):
    db = tmp_path / "rollscope.db"
    url = f"sqlite:///{db}"
    trace = "12" * 16
    root = _span_json(trace, "0a" * 8, None, "invoke_agent a", {"gen_ai.operation.name": "invoke_agent"}, 1)
    chat = _span_json(trace, "0b" * 8, "0a" * 8, "chat m", CHAT, 2)
    with serve(url, tmp_path) as (base, app):
        token = app.state.write_token
        app.state.engine.dispose()
        db.rename(tmp_path / "away.db")  # the database disappears: nothing can be read or written
        db.mkdir()  # and it cannot be re-created as a file
        r = _post(base, [chat, root], token)
        assert r.status_code == 503 and r.headers["Retry-After"] == "5"
        # spans taken before the database failed are kept and stored later, never dropped
        rec = app.state.otlp_receiver if getattr(app.state, "otlp_receiver", None) else None
        from app.worker.trace_intake import TraceIntake
        from ingest.otel.wire import decode_json

        rec = rec or TraceIntake(app)
        rec.assembler.add(decode_json(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [chat, root]}]}]})), 0.0)
        with pytest.raises(Exception):
            rec.flush()
        assert rec.assembler.pending_spans == 2
        db.rmdir()
        (tmp_path / "away.db").rename(db)
        app.state.engine.dispose()
        assert rec.flush() == (0, None) and rec.assembler.pending_spans == 0
        r = _post(base, [chat, root], token)  # the client's retry: the same spans, nothing doubled
        assert r.status_code == 200
        got = http.get(f"{base}/runs/otel/rollouts/{trace}.json").json()
        assert [m["role"] for m in got["messages"]] == ["user", "assistant"]


def test_clean_shutdown_stores_unfinished_traces(db_url, tmp_path):
    trace = "34" * 16
    with serve(db_url, tmp_path, worker={"otlp_idle_seconds": 3600}) as (base, app):
        assert _post(base, [_span_json(trace, "0c" * 8, "0d" * 8, "chat m", CHAT, 3)],
                     app.state.write_token).status_code == 200
        assert app.state.otlp_receiver.assembler.pending_spans == 1
    with serve(db_url, tmp_path) as (base, app):
        got = http.get(f"{base}/runs/otel/rollouts/{trace}.json")
        assert got.status_code == 200 and len(got.json()["messages"]) == 2


def _plain_root(trace: str) -> dict:
    """A finished trace of one plain HTTP span (no GenAI): taken, then quarantined."""
    return _span_json(trace, "0a" * 8, None, "GET /", {"http.method": "GET"}, 1000)


def test_each_answer_counts_its_own_rejected_spans_whichever_flush_took_them(db_url, tmp_path):
    # the idle loop (every 0.2 s here) flushes beside the requests: a trace it takes between a
    # request's spooling and that request's own flush is still that request's partial_success
    with serve(db_url, tmp_path, worker={"otlp_idle_seconds": 0.4}) as (base, app):
        rec = app.state.otlp_receiver
        # the bookkeeping itself: each asker is told of its own spans of a trace quarantined after it came
        since = rec.seq
        spans = decode_json(_body([_plain_root(t) for t in ("e0" * 16, "e1" * 16)]))
        with rec.flushing:  # hold the idle loop off while the two traces are taken and flushed here
            assert rec.accept(spans) is None
            assert rec._flush(False)[0] == 2
        got, reason = rec.rejections(spans[:1], since)
        assert got == 1 and "GenAI" in reason
        assert rec.rejections(spans, since) == (2, reason)  # a resent copy of the request is told too
        assert rec.rejections(spans, rec.seq) == (0, None)  # a request that came after them is not

        def send(k: int) -> tuple[int, dict]:
            trace = f"{k:032x}"
            if k % 3 == 0:  # a GenAI trace beside them: stored, a full success
                return k, _post(base, [_span_json(trace, "0b" * 8, None, "chat m", CHAT, 1000)],
                                app.state.write_token).json()
            return k, _post(base, [_plain_root(trace)], app.state.write_token).json()

        with ThreadPoolExecutor(4) as pool:
            answers = dict(pool.map(send, range(1, 61)))
        for k, body in answers.items():
            if k % 3 == 0:
                assert body == {}, (k, body)
            else:
                assert body["partialSuccess"]["rejectedSpans"] == "1", (k, body)

        # one trace in two requests at once, its root in one and a child in the other: the root
        # finishes the trace, so its request is always told of its span; the child's request is
        # told of its own span when the trace it joined was quarantined before it answered
        def split(k: int) -> tuple[dict, dict]:
            trace = f"{k:032x}"
            with ThreadPoolExecutor(2) as two:
                root = two.submit(_post, base, [_plain_root(trace)], app.state.write_token)
                child = two.submit(_post, base, [_span_json(trace, "0c" * 8, "0a" * 8, "GET /x",
                                                            {"http.method": "GET"}, 1001)], app.state.write_token)
                return root.result().json(), child.result().json()

        for k in range(100, 130):
            root, child = split(k)
            assert root["partialSuccess"]["rejectedSpans"] == "1", (k, root, child)
            assert child == {} or child["partialSuccess"]["rejectedSpans"] == "1", (k, root, child)


def test_one_request_of_more_spans_than_may_wait_is_413_and_an_empty_json_request_is_a_success(db_url, tmp_path):
    with serve(db_url, tmp_path, worker={"otlp_max_pending_spans": 3}) as (base, app):
        spans = [_span_json("cd" * 16, f"{k + 1:016x}", "ff" * 8, "chat m", CHAT, 1000 + k) for k in range(4)]
        r = _post(base, spans, app.state.write_token)
        assert r.status_code == 413 and "Retry-After" not in r.headers and "smaller requests" in r.json()["message"]
        assert app.state.otlp_receiver.assembler.pending_spans == 0
        r = http.post(f"{base}/v1/traces", content=b" {} ", headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {app.state.write_token}"})
        assert r.status_code == 200 and r.json() == {}


def test_a_trace_with_an_integer_past_64_bits_is_quarantined_and_the_server_restarts(db_url, tmp_path):
    """An attribute orjson cannot write (2**70) once made a 500 and a spooled trace that stopped
    every later start (the spool is restored at start-up)."""
    big = {"key": "foo.count", "value": {"intValue": str(2 ** 70)}}
    plain = _plain_root("f0" * 16)
    plain["attributes"].append(big)
    chat = _span_json("f1" * 16, "0d" * 8, None, "chat m", CHAT, 1000)
    chat["attributes"].append({"key": "rollscope.step", "value": {"intValue": str(2 ** 70)}})
    with serve(db_url, tmp_path) as (base, app):
        for span in (plain, chat):
            r = _post(base, [span], app.state.write_token)
            assert r.status_code == 200 and r.json()["partialSuccess"]["rejectedSpans"] == "1", r.text
        rows = http.get(f"{base}/quarantine.json").json()
        assert str(2 ** 70) in str(rows)
    with serve(db_url, tmp_path) as (base, app):  # the spool read back at start-up: it starts
        assert http.get(f"{base}/runs.json").status_code == 200


def _body(spans: list[dict]) -> bytes:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
