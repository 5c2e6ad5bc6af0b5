"""OTLP/JSON trace files and the GenAI / OpenInference mapping: spans built with the
OpenTelemetry SDK and encoded by its own OTLP/JSON encoder, the older per-index attributes,
OpenInference attributes, subagents as branches, the round trip OTLP → Rollscope → OTLP →
Rollscope, and cases 05 / 07 as spans."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.checks import run_rollout_checks
from ingest.export import Export
from ingest.formats import otlp
from ingest.formats.base import ReadContext
from ingest.formats.registry import detect
from ingest.otel.read import rollout_from_spans
from ingest.otel.wire import decode_json, decode_protobuf, encode_json
from ingest.otel.write import spans_from_rollout
from ingest.schema import Rollout
from ingest.source import open_source
from tests.conftest import data_path


def run_checks(r):
    return run_rollout_checks(r).findings


def sdk_spans(build) -> list:
    """Finished SDK spans of `build(tracer)`, captured in memory."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    mem = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(mem))
    build(provider.get_tracer("test"))
    provider.shutdown()
    return list(mem.get_finished_spans())


def write_otlp_json(path: Path, spans) -> Path:
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans

    path.write_text(encode_spans(spans).to_json())
    return path


def read_file(path: Path) -> list[Rollout]:
    src = open_source(path)
    reader = detect(src)
    assert reader is not None and reader.NAME == "otlp"
    out = list(reader.read(src, ReadContext()))
    assert all(isinstance(r, Rollout) for r in out), [str(x) for x in out]
    return out


def msg(role, text=None, calls=None, response=None, call_id=None):
    parts = [{"type": "text", "content": text}] if text else []
    parts += [{"type": "tool_call", "id": i, "name": n, "arguments": a} for i, n, a in calls or []]
    if response is not None:
        parts = [{"type": "tool_call_response", "id": call_id, "response": response}]
    return {"role": role, "parts": parts}


SYS = [{"type": "text", "content": "You are a weather agent."}]
U = msg("user", "Weather in Paris and Rome?")
A1 = msg("assistant", None, [("c1", "weather", {"city": "Paris"}), ("c2", "weather", {"city": "Rome"})])
T1 = msg("tool", response="rain", call_id="c1")
T2 = msg("tool", response="sun", call_id="c2")
A2 = msg("assistant", "Paris: rain. Rome: sun.")


def agent_run(tracer, *, subagent: bool = False):
    from opentelemetry.trace import set_span_in_context

    root = tracer.start_span("invoke_agent weather", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather", "rollscope.reward": 0.5,
        "rollscope.run": "r1", "rollscope.group": "g", "rollscope.group.index": 2})
    ctx = set_span_in_context(root)

    def chat(inputs, outputs, finish, parent=ctx):
        s = tracer.start_span("chat m", context=parent, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.request.temperature": 0.7,
            "gen_ai.system_instructions": json.dumps(SYS),
            "gen_ai.input.messages": json.dumps(inputs), "gen_ai.output.messages": json.dumps(outputs),
            "gen_ai.response.finish_reasons": [finish], "gen_ai.usage.input_tokens": 50,
            "gen_ai.usage.output_tokens": 5})
        s.end()

    def tool(cid, result, parent=ctx):
        s = tracer.start_span("execute_tool weather", context=parent, attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather", "gen_ai.tool.call.id": cid,
            "gen_ai.tool.call.result": result})
        s.end()

    chat([U], [A1], "tool_calls")
    tool("c1", "rain")
    if subagent:  # the Rome lookup is delegated to a subagent with its own conversation
        sub = tracer.start_span("invoke_agent forecaster", context=ctx, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "forecaster"})
        sctx = set_span_in_context(sub)
        chat([msg("user", "Forecast Rome")], [msg("assistant", "sun")], "stop", parent=sctx)
        sub.end()
    tool("c2", "sun")
    chat([U, A1, T1, T2], [A2], "stop")
    root.end()


def test_sdk_spans_in_an_otlp_json_file(tmp_path):
    [r] = read_file(write_otlp_json(tmp_path / "trace.json", sdk_spans(agent_run)))
    roles = [n.message.role for n in r.nodes]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert [n.parent for n in r.nodes] == [None, 0, 1, 2, 3, 4]  # one branch, each message once
    assert [(c.id, c.name, json.loads(c.arguments)) for c in r.nodes[2].message.tool_calls] == [
        ("c1", "weather", {"city": "Paris"}), ("c2", "weather", {"city": "Rome"})]
    assert [n.message.tool_call_id for n in r.nodes[3:5]] == ["c1", "c2"]
    assert r.reward == 0.5 and r.run.id == "r1" and r.group.id == "g" and r.group.index == 2
    assert [c.finish_reason for c in r.calls] == ["tool_call", "stop"]
    assert r.calls[0].usage.input_tokens == 50 and r.calls[0].sampling == {"temperature": 0.7}
    assert r.ending.type == "submitted"
    assert not {"unanswered_tool_call", "unpaired_tool_result"} & {f.kind for f in run_checks(r)}


def test_subagent_is_a_branch(tmp_path):
    [r] = read_file(write_otlp_json(tmp_path / "trace.json", sdk_spans(lambda t: agent_run(t, subagent=True))))
    from ingest.graph import branches

    paths = branches(r.nodes)
    assert len(paths) == 2
    sub = [p for p in paths if any(r.nodes[i].message.text() == "Forecast Rome" for i in p)][0]
    texts = [r.nodes[i].message.text() for i in sub]
    # the subagent's conversation hangs under the node the parent had reached (the Paris result)
    assert texts[-4:] == ["rain", "You are a weather agent.", "Forecast Rome", "sun"]


def test_protobuf_and_json_decode_the_same_spans():
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as to_json
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as to_pb

    spans = sdk_spans(agent_run)
    a = decode_protobuf(to_pb(spans).SerializeToString())
    b = decode_json(to_json(spans).to_json())
    assert [(s.trace_id, s.span_id, s.parent_span_id, s.name, s.attributes, s.start_ns) for s in a] == \
           [(s.trace_id, s.span_id, s.parent_span_id, s.name, s.attributes, s.start_ns) for s in b]


def _otlp(spans: list[dict]) -> dict:
    def attrs(d):
        out = []
        for k, v in d.items():
            val = {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}
            out.append({"key": k, "value": val})
        return out
    return {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
                               "scopeSpans": [{"spans": [{**s, "attributes": attrs(s["attributes"])}
                                                         for s in spans]}]}]}


def test_older_per_index_genai_attributes():
    # OpenLLMetry's form: gen_ai.prompt.N.* / gen_ai.completion.N.*
    a = {"gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o",
         "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "2+2?",
         "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.finish_reason": "tool_calls",
         "gen_ai.completion.0.tool_calls.0.id": "t1", "gen_ai.completion.0.tool_calls.0.name": "calc",
         "gen_ai.completion.0.tool_calls.0.arguments": "{\"x\": \"2+2\"}",
         "gen_ai.usage.prompt_tokens": 9, "gen_ai.usage.completion_tokens": 4}
    b = {"gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "2+2?",
         "gen_ai.prompt.1.role": "assistant", "gen_ai.prompt.1.tool_calls.0.id": "t1",
         "gen_ai.prompt.1.tool_calls.0.name": "calc", "gen_ai.prompt.1.tool_calls.0.arguments": "{\"x\": \"2+2\"}",
         "gen_ai.prompt.2.role": "tool", "gen_ai.prompt.2.tool_call_id": "t1", "gen_ai.prompt.2.content": "4",
         "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "4",
         "gen_ai.completion.0.finish_reason": "stop"}
    t = "aa" * 16
    spans = decode_json(_otlp([
        {"traceId": t, "spanId": "01" * 8, "name": "openai.chat", "startTimeUnixNano": "1", "attributes": a},
        {"traceId": t, "spanId": "02" * 8, "name": "openai.chat", "startTimeUnixNano": "2", "attributes": b}]))
    r = rollout_from_spans(spans)
    assert [n.message.role for n in r.nodes] == ["user", "assistant", "tool", "assistant"]
    assert r.nodes[1].message.tool_calls[0].arguments == "{\"x\": \"2+2\"}"  # the raw string, as sampled
    assert r.calls[0].usage.input_tokens == 9 and r.ending.type == "submitted" and r.run.id == "svc"


def test_openinference_attributes():
    t = "bb" * 16
    llm = {"openinference.span.kind": "LLM", "llm.model_name": "claude",
           "llm.input_messages.0.message.role": "system", "llm.input_messages.0.message.content": "be brief",
           "llm.input_messages.1.message.role": "user",
           "llm.input_messages.1.message.contents.0.message_content.type": "text",
           "llm.input_messages.1.message.contents.0.message_content.text": "list files",
           "llm.output_messages.0.message.role": "assistant",
           "llm.output_messages.0.message.tool_calls.0.tool_call.id": "tc9",
           "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "ls",
           "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{}",
           "llm.token_count.prompt": 12, "llm.token_count.completion": 3,
           "llm.invocation_parameters": "{\"temperature\": 0}"}
    tool = {"openinference.span.kind": "TOOL", "tool.name": "ls", "tool_call.id": "tc9", "output.value": "a.py"}
    spans = decode_json(_otlp([
        {"traceId": t, "spanId": "0a" * 8, "name": "agent", "startTimeUnixNano": "1",
         "attributes": {"openinference.span.kind": "AGENT"}},
        {"traceId": t, "spanId": "0b" * 8, "parentSpanId": "0a" * 8, "name": "llm", "startTimeUnixNano": "2",
         "attributes": llm},
        {"traceId": t, "spanId": "0c" * 8, "parentSpanId": "0a" * 8, "name": "ls", "startTimeUnixNano": "3",
         "attributes": tool}]))
    r = rollout_from_spans(spans)
    assert [n.message.role for n in r.nodes] == ["system", "user", "assistant", "tool"]
    assert r.nodes[1].message.content == "list files"
    assert r.nodes[3].message.tool_call_id == "tc9" and r.nodes[3].message.content == "a.py"
    assert (r.calls[0].model == "claude" and r.calls[0].usage.output_tokens == 3
            and r.calls[0].sampling == {"temperature": 0})
    assert r.ending.type == "unknown"  # the source does not say


def test_round_trip_otlp_rollscope_otlp_rollscope(tmp_path):
    [first] = read_file(write_otlp_json(tmp_path / "a.json", sdk_spans(lambda t: agent_run(t, subagent=True))))
    out = tmp_path / "b.json"
    out.write_bytes(b"".join(Export([first], "otlp")))
    [second] = read_file(out)
    a, b = first.to_json_dict(), second.to_json_dict()
    a.pop("source"), b.pop("source")
    assert a == b


@pytest.mark.parametrize("name", sorted(p.name for p in data_path("realdata").glob("*/*")
                                        if p.parent.name in ("swe-agent", "openhands", "mini-swe-agent")))
def test_real_agent_runs_export_and_read_back(name, tmp_path):
    path = next(data_path("realdata").glob(f"*/{name}"))
    src = open_source(path)
    [r] = list(detect(src).read(src, ReadContext(run_id="x")))
    out = tmp_path / "x.json"
    out.write_bytes(b"".join(Export([r], "otlp")))
    [back] = read_file(out)
    key = lambda x: [(n.parent, n.message.role, n.message.text(), n.message.tool_call_id,  # noqa: E731
                      [(c.id, c.name, c.arguments) for c in n.message.tool_calls or []]) for n in x.nodes]
    assert key(back) == key(r)
    assert back.ending.type == r.ending.type and back.id == r.id and back.run.id == "x"


CASES = data_path("cases")


def _case_spans(name: str) -> list:
    msgs = json.loads((CASES / name).read_text())["messages"]
    genai = []
    for m in msgs:
        if m["role"] == "tool":
            genai.append(msg("tool", response=m["content"], call_id=m["tool_call_id"]))
        elif m.get("tool_calls"):
            genai.append(msg("assistant", m.get("content"),
                             [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                              for c in m["tool_calls"]]))
        else:
            genai.append(msg(m["role"], m["content"]))

    def build(tracer):
        from opentelemetry.trace import set_span_in_context

        root = tracer.start_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"})
        ctx = set_span_in_context(root)
        for i, m in enumerate(genai):
            if m["role"] == "assistant":
                s = tracer.start_span("chat", context=ctx, attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(genai[:i]),
                    "gen_ai.output.messages": json.dumps([m])})
                s.end()
            elif m["role"] == "tool":
                p = m["parts"][0]
                s = tracer.start_span("execute_tool", context=ctx, attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.id": p["id"],
                    "gen_ai.tool.call.result": p["response"]})
                s.end()
        root.end()
    return sdk_spans(build)


def test_case05_duplicate_ids_as_spans(tmp_path):
    [r] = read_file(write_otlp_json(tmp_path / "c.json", _case_spans("05-duplicate-tool-call-ids.json")))
    from ingest.graph import pair_tool_calls

    kinds = {f.kind: f for f in run_checks(r)}
    assert kinds["duplicate_tool_call_id"]
    msgs = [n.message.model_dump() for n in r.nodes]
    got = {(c.name, json.loads(r.nodes[c.node].message.tool_calls[c.position].arguments).get("n")):
           r.nodes[c.result_node].message.text() for c in pair_tool_calls(range(len(r.nodes)), msgs)}
    assert got[("search_direct_flight", None)] == "[]" and got[("search_onestop_flight", None)].startswith("[[")
    assert "HAT136" in got[("get_flight", "HAT136")] and "HAT039" in got[("get_flight", "HAT039")]


def test_case07_unanswered_call_as_spans(tmp_path):
    [r] = read_file(write_otlp_json(tmp_path / "c.json", _case_spans("07-unanswered-tool-call.json")))
    [f] = [f for f in run_checks(r) if f.kind == "unanswered_tool_call"]
    assert f.detail["id"] == "call_a"


def test_not_genai_and_broken_files_are_rejected_with_the_field(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_otlp([{"traceId": "cc" * 16, "spanId": "01" * 8, "name": "GET /",
                                    "attributes": {"http.method": "GET"}}])))
    src = open_source(p)
    [err] = list(otlp.read(src, ReadContext()))
    assert "no GenAI" in err.message and err.field == f"trace {'cc' * 16}"
    p.write_text(json.dumps(_otlp([{"traceId": "zz", "spanId": "01" * 8, "name": "x", "attributes": {}}])))
    [err] = list(otlp.read(open_source(p), ReadContext()))
    assert err.field == "resourceSpans[0].scopeSpans[0].spans[0].traceId"


def test_encode_json_round_trips_span_records():
    spans = sdk_spans(agent_run)
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as to_json

    recs = decode_json(to_json(spans).to_json())
    again = decode_json(json.dumps(encode_json(recs)))
    assert [(s.span_id, s.attributes, s.start_ns, s.end_ns) for s in again] == \
           [(s.span_id, s.attributes, s.start_ns, s.end_ns) for s in recs]


def test_damaged_otlp_never_raises(tmp_path):
    import random

    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans

    from tests.formats.test_agent_harnesses import _mutate

    doc = json.loads(encode_spans(sdk_spans(lambda t: agent_run(t, subagent=True))).to_json())
    rng = random.Random(5)
    for k in range(80):
        p = tmp_path / f"m{k}.json"
        p.write_text(json.dumps(_mutate(doc, rng)))
        src = open_source(p)
        if not otlp.sniff(src):
            continue
        for item in otlp.read(src, ReadContext()):  # must not raise
            assert isinstance(item, Rollout) or item.message


def test_genai_spans_alone_rebuild_the_message_graph_of_every_real_file():
    """What a GenAI viewer sees (the spans without Rollscope's exact `rollscope.rollout` /
    `rollscope.nodes` attributes) still holds each real rollout's graph: parents, roles, text and
    tool calls, including agents that reuse one call id every turn (verifiers `call_0`) and
    rollouts with no recorded calls (tau-bench, Atropos)."""
    from ingest.files import walk
    from ingest.formats.registry import detect
    from ingest.otel.semconv import NODES, ROLLOUT
    from tests.store.test_export_roundtrip import SOURCES

    def shape(r):
        return [(n.parent, n.message.role, n.message.text(), n.message.tool_call_id,
                 [(c.name, c.arguments) for c in n.message.tool_calls or []]) for n in r.nodes]

    seen = 0
    for run, paths in SOURCES.items():
        for f, _ in walk(paths):
            try:
                src = open_source(f)
            except Exception:  # noqa: BLE001 - sidecars in the folders
                continue
            reader = detect(src)
            if reader is None:
                continue
            for r in reader.read(src, ReadContext(run_id=run)):
                if not hasattr(r, "nodes"):
                    continue
                spans = spans_from_rollout(r)
                for sp in spans:
                    sp.attributes.pop(ROLLOUT, None)
                    sp.attributes.pop(NODES, None)
                back = rollout_from_spans(spans)
                assert shape(back) == shape(r), (run, r.id)
                seen += 1
    assert seen >= 30


def test_tool_definitions_are_the_tools_offered(tmp_path):
    """`gen_ai.tool.definitions` on a chat span (GenAI semantic conventions) → the rollout's tools,
    so checks that need the offered tools (tool_call_markup_unparsed) see them (issue 20)."""
    weather = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}

    def build(tracer):
        s = tracer.start_span("chat m", attributes={
            "gen_ai.operation.name": "chat", "gen_ai.tool.definitions": json.dumps([weather]),
            "gen_ai.input.messages": json.dumps([U]), "gen_ai.output.messages": json.dumps([A2])})
        s.end()
    [r] = read_file(write_otlp_json(tmp_path / "trace.json", sdk_spans(build)))
    assert r.tools == [weather]
    [plain] = read_file(write_otlp_json(tmp_path / "plain.json", sdk_spans(agent_run)))
    assert plain.tools == []
