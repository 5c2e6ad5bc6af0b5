"""OpenTelemetry as instrumented apps send it today: the real OpenTelemetry SDK's `OTLPSpanExporter`
(protobuf over HTTP, `opentelemetry-exporter-otlp-proto-http`) sends to a LIVE `rollscope serve`
(a subprocess on a free port, a real SQLite file, a write token from `rollscope token create`,
`POST /v1/traces`), and every trace is compared with what the SDK itself recorded (an in-memory
exporter on the same provider):

- GenAI spans, the same conversation in each of the three forms the semantic conventions have had:
  (a) today's attributes `gen_ai.system_instructions` / `gen_ai.input.messages` / `gen_ai.output.messages`;
  (b) 1.28–1.36, one span event per message (`gen_ai.system.message`, `gen_ai.user.message`,
      `gen_ai.choice`); (c) ≤ 1.27, `gen_ai.content.prompt` / `gen_ai.content.completion` events
  (case 42, ../shared/cases/42-genai-messages-in-span-events.*);
- an agent loop with `execute_tool` spans, one of them status ERROR with `error.type`;
- a model call that used tokens but whose content was not captured (no message text at all);
- OpenInference spans from the instrumented `openai` client (openinference-instrumentation-openai)
  calling the scripted fake model server (tests/producers/fake_openai.py), a tool call and the answer.

Every span arrives, every tool error counts, the messages are read in all three forms, and a trace
whose model calls used tokens but carry no message text has a finding, never a silent 0-message
`submitted`."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from tests.helpers import http
from tests.producers.fake_openai import MODEL, FakeOpenAI

RS = str(Path(sys.executable).parent / "rollscope")
RUN = "otel-producers"
SYSTEM = "You are a helpful assistant."
QUESTION = "What is 17 times 25?"
ANSWER = "17 times 25 is 425."
FORMS = ("attributes", "message-events", "content-events")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`rollscope serve` on a free port, its SQLite file, a write token."""
    base = tmp_path_factory.mktemp("otel-serve")
    env = dict(os.environ, ROLLSCOPE_DATABASE_URL=f"sqlite:///{base / 'rollscope.db'}",
               ROLLSCOPE_WORKER__OTLP_SPOOL_DIR=str(base / "otlp-spool"),
               ROLLSCOPE_WORKER__OTLP_IDLE_SECONDS="3")
    made = subprocess.run([RS, "token", "create", "--scope", "write", "--name", "producers"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert made.returncode == 0, made.stdout + made.stderr
    token = made.stdout.strip().splitlines()[-1].strip()
    assert token.startswith("rs_"), made.stdout
    port = free_port()
    log = open(base / "serve.log", "w")
    proc = subprocess.Popen([RS, "serve", "--host", "127.0.0.1", "--port", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if http.get(url + "/api/v1/runs", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, (base / "serve.log").read_text()
            time.sleep(0.2)
        yield {"url": url, "token": token, "log": base / "serve.log"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def provider(server) -> tuple[TracerProvider, InMemorySpanExporter]:
    tp = TracerProvider(resource=Resource.create({"service.name": "producers-agent"}))
    mem = InMemorySpanExporter()
    tp.add_span_processor(SimpleSpanProcessor(mem))
    tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=server["url"] + "/v1/traces", headers={"Authorization": f"Bearer {server['token']}"})))
    return tp, mem


def root_attrs(rollout_id: str) -> dict:
    return {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "solver",
            "rollscope.rollout_id": rollout_id, "rollscope.run": RUN, "rollscope.step": 1}


def chat_attrs(input_tokens: int = 21, output_tokens: int = 9, finish: str = "stop") -> dict:
    return {"gen_ai.operation.name": "chat", "gen_ai.system": "openai", "gen_ai.provider.name": "openai",
            "gen_ai.request.model": MODEL, "gen_ai.response.model": MODEL,
            "gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens,
            "gen_ai.response.finish_reasons": [finish]}


def text_part(t: str) -> dict:
    return {"type": "text", "content": t}


def send_genai_forms(tp: TracerProvider) -> None:
    tracer = tp.get_tracer("opentelemetry.instrumentation.openai_v2", "0.48b0")
    # (a) today's attributes
    with tracer.start_as_current_span("invoke_agent solver", attributes=root_attrs("otel-attributes")):
        with tracer.start_as_current_span("chat " + MODEL, attributes=chat_attrs() | {
                "gen_ai.system_instructions": json.dumps([text_part(SYSTEM)]),
                "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [text_part(QUESTION)]}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [text_part(ANSWER)],
                                                       "finish_reason": "stop"}])}):
            pass
    # (b) semconv 1.28–1.36: one span event per message
    with tracer.start_as_current_span("invoke_agent solver", attributes=root_attrs("otel-message-events")):
        with tracer.start_as_current_span("chat " + MODEL, attributes=chat_attrs()) as span:
            span.add_event("gen_ai.system.message", {"gen_ai.system": "openai", "content": SYSTEM})
            span.add_event("gen_ai.user.message", {"gen_ai.system": "openai", "content": QUESTION})
            span.add_event("gen_ai.choice", {"gen_ai.system": "openai", "index": 0, "finish_reason": "stop",
                                             "message": json.dumps({"role": "assistant", "content": ANSWER})})
    # (c) semconv <= 1.27: prompt / completion events
    with tracer.start_as_current_span("invoke_agent solver", attributes=root_attrs("otel-content-events")):
        with tracer.start_as_current_span("chat " + MODEL, attributes=chat_attrs()) as span:
            span.add_event("gen_ai.content.prompt", {"gen_ai.prompt": json.dumps(
                [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}])})
            span.add_event("gen_ai.content.completion", {"gen_ai.completion": json.dumps(
                [{"role": "assistant", "content": ANSWER}])})


TOOL_Q = "Add 2 and 3 with the tool."
OAI_CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": json.dumps({"a": 2, "b": 3})}}


def send_tool_turn_forms(tp: TracerProvider) -> None:
    """A tool turn (call, result, answer: two chat spans) in the two older event forms."""
    tracer = tp.get_tracer("opentelemetry.instrumentation.openai_v2", "0.48b0")
    ev = {"gen_ai.system": "openai"}
    # 1.28–1.36: the second call's context as events, its tool call as the first call's choice
    with tracer.start_as_current_span("invoke_agent solver", attributes=root_attrs("otel-message-events-tool")):
        with tracer.start_as_current_span("chat " + MODEL, attributes=chat_attrs(finish="tool_calls")) as span:
            span.add_event("gen_ai.user.message", ev | {"content": TOOL_Q})
            span.add_event("gen_ai.choice", ev | {"index": 0, "finish_reason": "tool_calls", "message": json.dumps(
                {"role": "assistant", "tool_calls": [OAI_CALL]})})
        with tracer.start_as_current_span("chat " + MODEL, attributes=chat_attrs()) as span:
            span.add_event("gen_ai.user.message", ev | {"content": TOOL_Q})
            span.add_event("gen_ai.assistant.message", ev | {"tool_calls": json.dumps([OAI_CALL])})
            span.add_event("gen_ai.tool.message", ev | {"content": "5", "id": "call_1"})
            span.add_event("gen_ai.choice", ev | {"index": 0, "finish_reason": "stop",
                                                  "message": json.dumps({"role": "assistant", "content": "It is 5."})})
    # <= 1.27: the prompt and completion as OpenAI-style message lists
    with tracer.start_as_current_span("invoke_agent solver", attributes=root_attrs("otel-content-events-tool")):
        with tracer.start_as_current_span("chat " + MODEL, attributes=chat_attrs(finish="tool_calls")) as span:
            span.add_event("gen_ai.content.prompt",
                           {"gen_ai.prompt": json.dumps([{"role": "user", "content": TOOL_Q}])})
            span.add_event("gen_ai.content.completion", {"gen_ai.completion": json.dumps(
                [{"role": "assistant", "content": None, "tool_calls": [OAI_CALL]}])})
        with tracer.start_as_current_span("chat " + MODEL, attributes=chat_attrs()) as span:
            span.add_event("gen_ai.content.prompt", {"gen_ai.prompt": json.dumps([
                {"role": "user", "content": TOOL_Q}, {"role": "assistant", "content": None, "tool_calls": [OAI_CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": "5"}])})
            span.add_event("gen_ai.content.completion", {"gen_ai.completion": json.dumps(
                [{"role": "assistant", "content": "It is 5."}])})


def send_tool_loop(tp: TracerProvider) -> None:
    """A model call asks for two tools; one runs, one fails (status ERROR, `error.type`); the answer. The
    failed call's result, as the framework hands it back to the model, is the exception's text: the only
    signal that it failed is the span's status (and `error.type`)."""
    tracer = tp.get_tracer("producers.agent")
    calls = [{"type": "tool_call", "id": "call_ok", "name": "add", "arguments": {"a": 2, "b": 3}},
             {"type": "tool_call", "id": "call_bad", "name": "divide", "arguments": {"a": 1, "b": 0}}]
    with tracer.start_as_current_span("invoke_agent solver", attributes=root_attrs("otel-tool-error")):
        with tracer.start_as_current_span("chat " + MODEL, attributes=chat_attrs(finish="tool_calls") | {
                "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [text_part("2+3, then 1/0")]}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": calls,
                                                       "finish_reason": "tool_calls"}])}):
            pass
        with tracer.start_as_current_span("execute_tool add", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "add", "gen_ai.tool.call.id": "call_ok",
                "gen_ai.tool.call.arguments": json.dumps({"a": 2, "b": 3}), "gen_ai.tool.call.result": "5"}):
            pass
        with tracer.start_as_current_span("execute_tool divide", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "divide",
                "gen_ai.tool.call.id": "call_bad", "gen_ai.tool.call.arguments": json.dumps({"a": 1, "b": 0})},
                record_exception=False, set_status_on_exception=False) as span:
            span.set_attribute("error.type", "ZeroDivisionError")
            span.set_status(Status(StatusCode.ERROR, "division by zero"))
        with tracer.start_as_current_span("chat " + MODEL, attributes=chat_attrs() | {
                "gen_ai.input.messages": json.dumps([
                    {"role": "user", "parts": [text_part("2+3, then 1/0")]},
                    {"role": "assistant", "parts": calls},
                    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_ok", "response": "5"}]},
                    {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_bad",
                                                "response": "ZeroDivisionError: division by zero"}]}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [text_part("5, and 1/0 fails")],
                                                       "finish_reason": "stop"}])}):
            pass


def send_no_content(tp: TracerProvider) -> None:
    """Content capture off (the instrumentations' default): the call used tokens, no message text."""
    tracer = tp.get_tracer("opentelemetry.instrumentation.openai_v2", "0.48b0")
    with tracer.start_as_current_span("invoke_agent solver", attributes=root_attrs("otel-no-content")):
        with tracer.start_as_current_span("chat " + MODEL, attributes=chat_attrs(40, 12)):
            pass


OI_SCRIPT = {"oi": [{"tool_calls": [("add", {"a": 2, "b": 3})]}, {"content": "The sum is 5."}]}


def send_openinference(tp: TracerProvider, fake: FakeOpenAI) -> None:
    """The real `openai` client, instrumented by OpenInference, against the fake server: the tool call,
    its result (a TOOL span), the answer; all under one AGENT span."""
    import openai
    from openinference.instrumentation.openai import OpenAIInstrumentor

    inst = OpenAIInstrumentor()
    inst.instrument(tracer_provider=tp)
    try:
        client = openai.OpenAI(base_url=fake.base_url, api_key="sk-fake", max_retries=0)
        tools = [{"type": "function", "function": {"name": "add", "description": "Add two integers.",
                                                   "parameters": {"type": "object", "properties": {
                                                       "a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
        tracer = tp.get_tracer("producers.openinference")
        with tracer.start_as_current_span("agent", attributes={
                "openinference.span.kind": "AGENT", "rollscope.rollout_id": "otel-openinference",
                "rollscope.run": RUN}):
            messages = [{"role": "user", "content": "[case:oi] What is 2 + 3?"}]
            first = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
            call = first.choices[0].message.tool_calls[0]
            messages.append(first.choices[0].message.model_dump(exclude_none=True))
            with tracer.start_as_current_span("add", attributes={
                    "openinference.span.kind": "TOOL", "tool.name": "add", "tool_call.id": call.id,
                    "input.value": call.function.arguments, "output.value": "5"}):
                pass
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "5"})
            client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
    finally:
        inst.uninstrument()


@pytest.fixture(scope="module")
def sent(server):
    tp, mem = provider(server)
    send_genai_forms(tp)
    send_tool_turn_forms(tp)
    send_tool_loop(tp)
    send_no_content(tp)
    with FakeOpenAI(OI_SCRIPT) as fake:
        send_openinference(tp, fake)
    tp.force_flush()
    tp.shutdown()
    spans = mem.get_finished_spans()
    by_rollout: dict[str, list] = {}
    roots = {s.context.trace_id: s for s in spans if s.parent is None}
    for s in spans:
        by_rollout.setdefault(roots[s.context.trace_id].attributes["rollscope.rollout_id"], []).append(s)
    wait_for(server, set(by_rollout))
    return by_rollout


def api(server, path: str) -> httpx.Response:
    return http.get(server["url"] + path, timeout=30)


def wait_for(server, ids: set[str], timeout: float = 60) -> None:
    """The receiver stores a trace when its root span arrives (or it has been idle): wait for all."""
    deadline = time.time() + timeout
    have: set[str] = set()
    while time.time() < deadline:
        r = api(server, f"/api/v1/runs/{RUN}/rollouts?limit=200")
        if r.status_code == 200:
            have = {x["rollout_id"] for x in r.json()["items"]}
            if ids <= have:
                return
        time.sleep(0.5)
    raise AssertionError(f"rollouts never stored: {sorted(ids - have)}; "
                         f"serve log:\n{server['log'].read_text()[-3000:]}")


def rollout(server, rid: str) -> dict:
    r = api(server, f"/api/v1/runs/{RUN}/rollouts/{quote(rid, safe='')}")
    assert r.status_code == 200, r.text[:500]
    return r.json()


def messages(server, rid: str) -> list[dict]:
    r = api(server, f"/api/v1/runs/{RUN}/rollouts/{quote(rid, safe='')}/branches/0/messages?limit=500")
    if r.status_code == 404:
        return []
    assert r.status_code == 200, r.text[:500]
    return [m["message"] for m in r.json()["items"]]


def text_of(m: dict) -> str:
    c = m.get("content")
    if isinstance(c, list):
        return " ".join(str(p.get("text") or p.get("content") or "") for p in c if isinstance(p, dict))
    return str(c or "")


def is_model_call(span) -> bool:
    a = span.attributes
    return a.get("gen_ai.operation.name") == "chat" or a.get("openinference.span.kind") == "LLM"


def test_every_span_arrives(server, sent):
    """Each trace is one rollout; each model-call span is a call of it, with the SDK's usage."""
    for rid, spans in sent.items():
        d = rollout(server, rid)
        ours = d["envelope"]["calls"]
        theirs = sorted((s for s in spans if is_model_call(s)), key=lambda s: s.start_time)
        assert len(ours) == len(theirs), (rid, len(ours), [s.name for s in spans])
        for mine, their in zip(ours, theirs):
            a = their.attributes
            out = a.get("gen_ai.usage.output_tokens", a.get("llm.token_count.completion"))
            assert (mine.get("usage") or {}).get("output_tokens") == out, (rid, mine)
        # each tool span's result is a tool message paired with its call
        tool_ids = {s.attributes.get("gen_ai.tool.call.id") or s.attributes.get("tool_call.id") for s in spans
                    if s.attributes.get("gen_ai.operation.name") == "execute_tool"
                    or s.attributes.get("openinference.span.kind") == "TOOL"}
        paired = {m.get("tool_call_id") for m in messages(server, rid) if m["role"] == "tool"}
        assert tool_ids <= paired, (rid, tool_ids, paired)


@pytest.mark.parametrize("form", FORMS)
def test_messages_in_each_genai_form(server, sent, form):
    """The same conversation in each semconv form reads as the same three messages."""
    ours = messages(server, f"otel-{form}")
    assert [m["role"] for m in ours] == ["system", "user", "assistant"], (form, ours)
    assert [text_of(m) for m in ours] == [SYSTEM, QUESTION, ANSWER], form
    d = rollout(server, f"otel-{form}")
    assert d["envelope"]["ending"]["type"] == "submitted"


def test_execute_tool_error_counts(server, sent):
    """An `execute_tool` span with status ERROR and `error.type` is a tool error (the one span of two)."""
    d = rollout(server, "otel-tool-error")
    spans = sent["otel-tool-error"]
    failed = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"
              and s.status.status_code == StatusCode.ERROR]
    assert len(failed) == 1
    assert d["rollout"]["n_tool_errors"] == len(failed), d["rollout"]
    assert d["rollout"]["n_tool_calls"] == 2
    ours = messages(server, "otel-tool-error")
    tools = [m for m in ours if m["role"] == "tool"]
    assert sorted(m["tool_call_id"] for m in tools) == ["call_bad", "call_ok"], ours


def test_no_message_text_is_a_finding(server, sent):
    """A model call that used 40 + 12 tokens and carries no message text: a finding says the content
    was not captured, so the rollout is not a silent 0-message `submitted`."""
    d = rollout(server, "otel-no-content")
    assert not messages(server, "otel-no-content")  # the premise: nothing to read
    assert d["envelope"]["calls"][0]["usage"]["output_tokens"] == 12
    assert d["findings"], ("no finding on a trace whose model calls used tokens but carry no text", d["rollout"])


@pytest.mark.parametrize("form", ["message-events", "content-events"])
def test_event_forms_are_not_silent(server, sent, form):
    """At the least (case 42): a rollout from the event forms is never 0 messages with no finding."""
    d = rollout(server, f"otel-{form}")
    assert messages(server, f"otel-{form}") or d["findings"], d["rollout"]


def test_openinference_openai_client(server, sent):
    """What the instrumented client recorded: two LLM spans; the first's tool call, paired with the
    tool result, then the answer; the model calls' token counts."""
    spans = sent["otel-openinference"]
    llm = sorted((s for s in spans if s.attributes.get("openinference.span.kind") == "LLM"), key=lambda s: s.start_time)
    assert len(llm) == 2
    call_id = llm[0].attributes["llm.output_messages.0.message.tool_calls.0.tool_call.id"]
    ours = messages(server, "otel-openinference")
    assert [m["role"] for m in ours] == ["user", "assistant", "tool", "assistant"], ours
    assert [(c["id"], c["name"]) for c in ours[1]["tool_calls"]] == [(call_id, "add")]
    assert ours[2]["tool_call_id"] == call_id
    assert text_of(ours[3]) == "The sum is 5."
    d = rollout(server, "otel-openinference")
    assert d["envelope"]["ending"]["type"] == "submitted"
    assert d["rollout"]["n_tool_errors"] == 0


@pytest.mark.parametrize("form", ["message-events", "content-events"])
def test_tool_turn_in_older_genai_forms(server, sent, form):
    """A tool turn in the older event forms: the call, its paired result, the answer."""
    ours = messages(server, f"otel-{form}-tool")
    assert [m["role"] for m in ours] == ["user", "assistant", "tool", "assistant"], (form, ours)
    assert [(c["id"], c["name"]) for c in ours[1].get("tool_calls") or []] == [("call_1", "add")]
    assert ours[2]["tool_call_id"] == "call_1" and text_of(ours[2]) == "5"
    assert text_of(ours[3]) == "It is 5."
