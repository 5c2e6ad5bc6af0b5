"""`POST /v1/traces` by the OTLP/HTTP specification (open-telemetry/opentelemetry-proto
`docs/specification.md`, "OTLP/HTTP Response"), against a real uvicorn server: every answer in the
request's encoding, `ExportTraceServiceResponse` on success (`partial_success` unset, or set when
spans were rejected), a `google.rpc.Status` on every failure, `Retry-After` when throttled. The
real OpenTelemetry SDK exporter (`opentelemetry-exporter-otlp-proto-http`) is the client where it
can be: its own retry path decides what our statuses mean to it."""
from __future__ import annotations

import base64
import gzip
import json
import logging
import shutil
import zlib
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from google.protobuf import json_format
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from app.auth import issue
from app.config import Settings
from app.main import create_app
from app.receivers.body import BodyBudget
from tests.helpers import http, serving

PROTOBUF, JSON = "application/x-protobuf", "application/json"
CHAT = {"gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "hello"}],
                                               "finish_reason": "stop"}])}


@pytest.fixture
def tmp_db(tmp_path, _sqlite_template) -> Path:
    """A folder holding a real, migrated SQLite file (a copy of the session's template)."""
    shutil.copyfile(_sqlite_template, tmp_path / "rollscope.db")
    return tmp_path


@contextmanager
def serve(tmp: Path, **settings):
    """The app on the SQLite file in `tmp`, in a uvicorn thread; yields (base URL, app, write token)."""
    worker = {"otlp_spool_dir": tmp / "otlp-spool", **settings.pop("worker", {})}
    app = create_app(Settings(database_url=f"sqlite:///{tmp / 'rollscope.db'}", worker=worker, **settings))
    token, _ = issue(app.state.engine, "write", name="otlp spec")
    with serving(app) as base:
        yield base, app, token


def sdk_spans(*, root: bool = True, genai: bool = True, big: int = 0, trace_id: int | None = None,
              root_attrs: dict | None = None):
    """Spans as the OpenTelemetry SDK records them (`ReadableSpan`): an agent root and one chat
    span (or a plain HTTP span when not `genai`; a `big`-character attribute; a given trace id;
    `root_attrs` added to the root's attributes)."""
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanContext, TraceFlags, set_span_in_context

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("spec")
    attrs = {"gen_ai.operation.name": "invoke_agent", "rollscope.run": "spec"} if genai else {"http.method": "GET"}
    attrs.update(root_attrs or {})
    top = tracer.start_span("invoke_agent a" if genai else "GET /", attributes=attrs)
    child = tracer.start_span("chat m", context=set_span_in_context(top),
                              attributes={**(CHAT if genai else {"http.method": "GET"}), "pad": "x" * big})
    child.end()
    if root:
        top.end()
    spans = list(memory.get_finished_spans())
    provider.shutdown()
    if trace_id is not None:
        spans = [ReadableSpan(name=s.name, context=SpanContext(trace_id, s.context.span_id, False,
                                                                TraceFlags(1)), attributes=s.attributes,
                              start_time=s.start_time, end_time=s.end_time) for s in spans]
    return spans


def protobuf_body(spans) -> bytes:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(spans).SerializeToString()


def json_body(spans) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    msg = ExportTraceServiceRequest.FromString(protobuf_body(spans))
    d = json_format.MessageToDict(msg, use_integers_for_enums=True)  # OTLP/JSON: enums as integers
    for rs in d["resourceSpans"]:  # OTLP/JSON writes ids as hex, not proto3 JSON's base64
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    if k in s:
                        s[k] = base64.b64decode(s[k]).hex()
    return json.dumps(d).encode()


def exporter(base: str, token: str | None, **kw):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return OTLPSpanExporter(endpoint=f"{base}/v1/traces", headers=headers, **kw)


def posts(caplog) -> list[int]:
    """The statuses of the `POST /v1/traces` requests the server logged (app.main's access log)."""
    return [int(r.args[2]) for r in caplog.records if r.name == "rollscope.access" and r.args[1] == "/v1/traces"]


def status_of(r: httpx.Response, media: str) -> status_pb2.Status:
    """The response's `google.rpc.Status`, parsed from the encoding the request used."""
    assert r.headers["Content-Type"] == media, r.headers
    if media == PROTOBUF:
        return status_pb2.Status.FromString(r.content)
    return json_format.Parse(r.text, status_pb2.Status())


def details(st: status_pb2.Status) -> dict[str, object]:
    out = {}
    for d in st.details:
        for kind in (error_details_pb2.BadRequest, error_details_pb2.RetryInfo):
            if d.Is(kind.DESCRIPTOR):
                msg = kind()
                d.Unpack(msg)
                out[kind.__name__] = msg
    return out


# --- the SDK exporter -------------------------------------------------------------------------


def test_sdk_exporter_export_succeeds_and_its_failures_are_final(tmp_db, caplog):
    from opentelemetry.sdk.trace.export import SpanExportResult

    caplog.set_level(logging.INFO, logger="rollscope.access")
    with serve(tmp_db, api={"max_body_bytes": 64 << 10, "body_memory_bytes": 1 << 20}) as (base, app, token):
        assert exporter(base, token).export(sdk_spans()) is SpanExportResult.SUCCESS
        assert len(http.get(f"{base}/api/v1/runs/spec/rollouts").json()["items"]) == 1  # stored
        # statuses the specification makes final: the exporter gives up after one request each
        for exp, spans, status in [
            (exporter(base, None), sdk_spans(), 401),  # no token
            (exporter(base, token), sdk_spans(big=100_000), 413),  # over api.max_body_bytes
            (exporter(base, token), sdk_spans(trace_id=0), 400),  # an all-zero trace id: bad data
        ]:
            caplog.clear()
            assert exp.export(spans) is SpanExportResult.FAILURE
            assert posts(caplog) == [status]
            assert f"code: {status}" in caplog.text  # the exporter's own error line


def test_sdk_exporter_waits_out_a_429_and_then_succeeds(tmp_db, caplog):
    from opentelemetry.sdk.trace.export import SpanExportResult

    caplog.set_level(logging.INFO, logger="rollscope.access")
    with serve(tmp_db, worker={"otlp_max_pending_spans": 2}) as (base, app, token):
        waiting = sdk_spans(root=False)[:1]  # a chat span whose root has not come: it waits
        assert exporter(base, token).export(waiting) is SpanExportResult.SUCCESS

        class Lift(logging.Handler):
            """When the exporter says it will retry, make room (as stored traces would)."""

            def emit(self, record):
                if "Transient error" in record.getMessage():
                    app.state.otlp_receiver.max_pending = 1000

        lift = Lift()
        logging.getLogger("opentelemetry").addHandler(lift)
        try:
            caplog.clear()
            assert exporter(base, token, timeout=15).export(sdk_spans()) is SpanExportResult.SUCCESS
        finally:
            logging.getLogger("opentelemetry").removeHandler(lift)
        assert posts(caplog) == [429, 200]


# --- rejected traces: one quarantine entry each, located by attribute ------------------------

BAD_TRACES = [  # (root attributes, the field the rejection names, the run it is quarantined under)
    ({"rollscope.step": "abc"}, 'attributes["rollscope.step"]', "spec"),
    ({"rollscope.step": -5}, 'attributes["rollscope.step"]', "spec"),
    ({"rollscope.run": "a\x00b"}, 'attributes["rollscope.run"]', "a\x00b"),
    ({"rollscope.rewards": "{not json"}, 'attributes["rollscope.rewards"]', "spec"),
]


def test_each_rejected_trace_is_its_own_quarantine_entry_naming_its_attribute(tmp_db):
    """Traces the mapping refuses, sent one by one: each answered with a partial success, each kept
    in the quarantine under `/v1/traces` with its trace id (its raw text), the attribute at fault
    and its run; sending one of them again leaves one entry for it."""
    with serve(tmp_db) as (base, app, token):
        auth = {"Authorization": f"Bearer {token}", "Content-Type": PROTOBUF}
        for k, (attrs, _, _) in enumerate(BAD_TRACES):
            r = http.post(f"{base}/v1/traces", content=protobuf_body(sdk_spans(root_attrs=attrs, trace_id=k + 1)),
                           headers=auth)
            partial = ExportTraceServiceResponse.FromString(r.content)
            assert r.status_code == 200 and partial.HasField("partial_success"), attrs
            assert partial.partial_success.rejected_spans == 2
        # the first again, with another error: still one entry for its trace (the latest error)
        r = http.post(f"{base}/v1/traces", headers=auth, content=protobuf_body(
            sdk_spans(root_attrs={"rollscope.step": "xyz"}, trace_id=1)))
        assert ExportTraceServiceResponse.FromString(r.content).HasField("partial_success")
        items = http.get(f"{base}/api/v1/quarantine", headers=auth).json()["items"]
    assert len(items) == len(BAD_TRACES) and {q["file"] for q in items} == {"/v1/traces"}
    by_trace = {json.loads(q["raw"])["trace_id"]: q for q in items}
    assert sorted(by_trace) == [f"{k + 1:032x}" for k in range(len(BAD_TRACES))]
    for k, (attrs, field, run) in enumerate(BAD_TRACES):
        q = by_trace[f"{k + 1:032x}"]
        assert (q["field"], q["run"], q["line"]) == (field, run, None), q
    assert "xyz" in by_trace[f"{1:032x}"]["raw"]


# --- raw requests: what each answer is, in each encoding ------------------------------------


def test_success_is_an_export_response_and_rejections_are_a_partial_success(tmp_db):
    with serve(tmp_db) as (base, app, token):
        auth = {"Authorization": f"Bearer {token}"}
        r = http.post(f"{base}/v1/traces", content=protobuf_body(sdk_spans()),
                       headers={**auth, "Content-Type": PROTOBUF})
        assert r.status_code == 200 and r.headers["Content-Type"] == PROTOBUF
        ok = ExportTraceServiceResponse.FromString(r.content)
        assert not ok.HasField("partial_success")  # "MUST leave the partial_success field unset"
        # a trace with no GenAI span is taken but cannot become a rollout: rejected, quarantined
        plain = sdk_spans(genai=False)
        r = http.post(f"{base}/v1/traces", content=protobuf_body(plain), headers={**auth, "Content-Type": PROTOBUF})
        partial = ExportTraceServiceResponse.FromString(r.content)
        assert r.status_code == 200 and partial.HasField("partial_success")
        assert partial.partial_success.rejected_spans == 2 and "GenAI" in partial.partial_success.error_message
        # the same in JSON (proto3 JSON mapping: int64 as a string)
        r = http.post(f"{base}/v1/traces", content=json_body(sdk_spans()), headers={**auth, "Content-Type": JSON})
        assert r.status_code == 200 and r.headers["Content-Type"] == JSON and r.json() == {}
        r = http.post(f"{base}/v1/traces", content=json_body(sdk_spans(genai=False)),
                       headers={**auth, "Content-Type": JSON})
        assert r.status_code == 200 and r.json()["partialSuccess"]["rejectedSpans"] == "2"
        assert "GenAI" in r.json()["partialSuccess"]["errorMessage"]
        # an empty request is a success ("Full Success")
        r = http.post(f"{base}/v1/traces", content=b"", headers={**auth, "Content-Type": PROTOBUF})
        assert r.status_code == 200 and ExportTraceServiceResponse.FromString(r.content) == ExportTraceServiceResponse()


@pytest.mark.parametrize("media", [PROTOBUF, JSON])
def test_every_failure_is_a_status_in_the_request_encoding(tmp_db, media):
    limit = 64 << 10
    with serve(tmp_db, api={"max_body_bytes": limit, "body_memory_bytes": 1 << 20},
               worker={"otlp_max_pending_spans": 2}) as (base, app, token):
        encode = protobuf_body if media == PROTOBUF else json_body
        good = encode(sdk_spans())

        def post(body: bytes, token: str | None = token, **headers) -> tuple[httpx.Response, status_pb2.Status]:
            h = {"Content-Type": media, **({"Authorization": f"Bearer {token}"} if token else {}), **headers}
            r = http.post(f"{base}/v1/traces", content=body, headers=h)
            return r, status_of(r, media)

        r, st = post(good, token=None)
        assert (r.status_code, st.code) == (401, code_pb2.UNAUTHENTICATED) and "write token" in st.message
        assert r.headers["WWW-Authenticate"] == "Bearer"
        read, _ = issue(app.state.engine, "read")
        r, st = post(good, token=read)
        assert (r.status_code, st.code) == (403, code_pb2.PERMISSION_DENIED)

        # bad data: 400, with a BadRequest naming the field when there is one
        r, st = post(encode(sdk_spans(trace_id=0)))
        assert (r.status_code, st.code) == (400, code_pb2.INVALID_ARGUMENT)
        [violation] = details(st)["BadRequest"].field_violations
        assert violation.field.endswith("traceId") and "zero" in violation.description
        # a body that is not a request at all: the BadRequest names the whole request message
        r, st = post(b"\xff\x00garbage" if media == PROTOBUF else b"{not json")
        assert r.status_code == 400 and st.message
        [violation] = details(st)["BadRequest"].field_violations
        assert violation.field == "ExportTraceServiceRequest" and violation.description == st.message
        assert media == PROTOBUF or "invalid JSON" in st.message
        r, st = post(b"\x1f\x8bnot gzip", **{"Content-Encoding": "gzip"})
        assert r.status_code == 400 and "gzip" in st.message
        assert details(st)["BadRequest"].field_violations[0].field == "ExportTraceServiceRequest"
        r, st = post(b"\x00\x01not deflate", **{"Content-Encoding": "deflate"})
        assert r.status_code == 400 and "not valid deflate" in st.message and "gzip" not in st.message

        # too large: by its length, and by what it inflates to
        r, st = post(b"x" * (limit + 1))
        assert (r.status_code, st.code) == (413, code_pb2.RESOURCE_EXHAUSTED) and str(limit) in st.message
        r, st = post(gzip.compress(b" " * (limit + 1)), **{"Content-Encoding": "gzip"})
        assert r.status_code == 413
        r, st = post(good, **{"Content-Encoding": "br"})
        assert r.status_code == 415 and "br" in st.message

        # throttled: 429 (spans waiting) and 503 (body memory spent), with Retry-After and RetryInfo
        assert post(encode(sdk_spans(root=False)[:1]))[0].status_code == 200  # waits for its root
        r, st = post(good)
        assert (r.status_code, st.code, r.headers["Retry-After"]) == (429, code_pb2.RESOURCE_EXHAUSTED, "1")
        assert details(st)["RetryInfo"].retry_delay.seconds == 1
        app.state.otlp_receiver.max_pending = 1000
        app.state.body_budget = BodyBudget(10)
        r, st = post(good)
        assert (r.status_code, st.code, r.headers["Retry-After"]) == (503, code_pb2.UNAVAILABLE, "1")
        assert details(st)["RetryInfo"].retry_delay.seconds == 1
        app.state.body_budget = BodyBudget(1 << 20)
        assert post(good)[0].status_code == 200  # and it is taken once there is room
        # raw deflate (as many clients send `deflate`) and zlib-wrapped (RFC 9110) are both taken
        assert post(zlib.compress(encode(sdk_spans(trace_id=7))), **{"Content-Encoding": "deflate"})[0].status_code \
            == 200
        z = zlib.compressobj(wbits=-15)
        raw = z.compress(encode(sdk_spans(trace_id=8))) + z.flush()
        assert post(raw, **{"Content-Encoding": "deflate"})[0].status_code == 200

        # a media type OTLP does not have: there is no encoding of its own to answer in, so JSON
        r = http.post(f"{base}/v1/traces", content=b"x", headers={"Content-Type": "text/plain",
                                                                    "Authorization": f"Bearer {token}"})
        st = status_of(r, JSON)
        assert r.status_code == 415 and "text/plain" in st.message and PROTOBUF in st.message

        # anything unexpected: 500, still a Status in the request's encoding (and logged)
        def boom(spans, token_name=None):
            raise RuntimeError("a bug")

        app.state.otlp_receiver.accept = boom
        r, st = post(good)
        assert (r.status_code, st.code) == (500, code_pb2.INTERNAL) and "RuntimeError" in st.message


def test_database_down_is_503_status_with_retry_after(tmp_db):
    with serve(tmp_db) as (base, app, token):
        db = tmp_db / "rollscope.db"
        app.state.engine.dispose()
        db.rename(tmp_db / "away.db")  # the database disappears, and cannot be re-created as a file
        db.mkdir()
        try:
            r = http.post(f"{base}/v1/traces", content=protobuf_body(sdk_spans()), headers={
                "Content-Type": PROTOBUF, "Authorization": f"Bearer {token}"})
        finally:
            db.rmdir()
            (tmp_db / "away.db").rename(db)
            app.state.engine.dispose()
        st = status_of(r, PROTOBUF)
        assert (r.status_code, st.code, r.headers["Retry-After"]) == (503, code_pb2.UNAVAILABLE, "5")
        assert details(st)["RetryInfo"].retry_delay.seconds == 5
