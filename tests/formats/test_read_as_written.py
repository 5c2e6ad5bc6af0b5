"""Readers record what was written: handed cases 20, 20b, 21, 22, 25, 30 and 32 (tests/fixtures/cases),
each through the reader it fits, the store and the HTTP app: numbers exactly as written, content in
every shape, aborted generations as errors. (Findings about them are the checks' job: these tests
check what the readers record for the checks to read.)"""
from __future__ import annotations

import json
from urllib.parse import quote

from ingest.formats import chat, registry
from ingest.formats.base import ReadContext
from ingest.schema import Ending
from ingest.source import open_source
from tests.conftest import data_path
from tests.helpers import ingest


def case(name: str):
    return data_path("cases", name)


def page(client, run: str, rid: str) -> tuple[dict, str]:
    d = client.get(f"/runs/{run}/rollouts/{quote(rid, safe='')}.json")
    assert d.status_code == 200, d.text
    return d.json(), d.text


def test_20_big_integer_ids_keep_every_digit(client, engine):
    report = ingest(engine, case("20-big-integer-ids.json"), run="c20")
    assert report.ok and report.total.inserted == 3  # two ids that differ in the last digit stay two
    rows = {r["rollout_id"] for r in client.get("/runs/c20/rollouts.json").json()["rollouts"]}
    assert rows == {"1234567890123456789", "1234567890123456788", "204632019431247823718823146212361536103"}
    d, text = page(client, "c20", "1234567890123456789")
    assert "9007199254740993" in text  # group id 2^53 + 1
    calls = [c for m in d["messages"] for c in m["tool_calls"]]
    assert calls and "9007199254740995" in json.dumps(calls)


def test_20b_big_integers_in_payloads_are_never_floats(client, engine):
    assert ingest(engine, case("20b-big-integer-in-payload.json"), run="c20b").ok
    (r,) = list(chat.read(open_source(case("20b-big-integer-in-payload.json")), ReadContext()))
    assert r.task.data == {"otel_trace_id": 204632019431247823718823146212361536103, "user_id": 18446744073709551616}
    assert r.nodes[1].message.tool_calls[0].arguments == '{"account": 98765432109876543210987}'
    d, text = page(client, "c20b", "case20b")
    assert "98765432109876543210987" in text and "9.876543210987654e" not in text


def test_21_tool_argument_shapes_kept_raw_and_named(client, engine):
    assert ingest(engine, case("21-tool-arguments-shapes.json"), run="c21").ok
    (r,) = list(chat.read(open_source(case("21-tool-arguments-shapes.json")), ReadContext()))
    calls = r.nodes[1].message.tool_calls
    assert [c.extra.get("arguments_shape", "object") for c in calls] == [
        "object", "double_encoded", "invalid_json", "scalar", "missing"]
    assert calls[2].arguments == '{"q": "weather in Par'  # the raw sampled text, as it was
    d, _ = page(client, "c21", "case21")
    assert [c["result_node"] is not None for m in d["messages"] for c in m["tool_calls"]] == [True] * 5


def test_22_thinking_blocks_are_reasoning(client, engine):
    assert ingest(engine, case("22-thinking-content-blocks.json"), run="c22").ok
    (r,) = list(chat.read(open_source(case("22-thinking-content-blocks.json")), ReadContext()))
    first, second, last = (n.message for n in r.nodes if n.message.role == "assistant")
    assert (first.reasoning_content.startswith("17*25 = 17*100/4 = 425")
            and "[redacted thinking]" in first.reasoning_content)
    assert first.extra["reasoning_blocks"][0]["signature"] == "sig-abc"
    assert first.extra["reasoning_blocks"][1] == {"type": "redacted_thinking", "data": "opaque-blob-xyz", "position": 1}
    assert second.text() == "17 * 25 = 425" and second.reasoning_content == "The tool agrees: 425."
    assert last.content is None and last.reasoning_content  # reasoning, no answer: for the checks to flag
    d, _ = page(client, "c22", "case22")
    reasons = [m["reasoning"] for m in d["messages"] if m["role"] == "assistant"]
    assert "[redacted thinking]" in reasons[0] and reasons[2].startswith("425/17")
    assert "17*25 = 17*100/4" in client.get("/runs/c22/rollouts/case22").text


def test_25_structured_tool_results_are_shown_and_never_reject(client, engine):
    report = ingest(engine, case("25-tool-structured-content.json"), run="c25")
    assert report.ok and report.total.inserted == 2
    a, _ = page(client, "c25", "case25a")
    tool = next(m for m in a["messages"] if m["role"] == "tool")
    assert '"projects"' in tool["content"] and "Alpha" in tool["content"]
    assert "Alpha" in client.get("/runs/c25/rollouts/case25a").text
    b, _ = page(client, "c25", "case25b")
    tool = next(m for m in b["messages"] if m["role"] == "tool")
    assert json.loads(tool["content"]) == {"projects": [{"id": "p1", "name": "Alpha"}, {"id": "p2", "name": "Beta"}]}


def test_30_mask_on_env_tokens_is_read_as_written():
    src = open_source(case("30-mask-on-env-tokens.jsonl"))
    reader = registry.detect(src)
    (r,) = list(reader.read(src, ReadContext()))
    assert reader.NAME == "native"
    assert [n.sampled for n in r.nodes] == [False, True, False, False, True]
    assert r.nodes[2].mask == [True] * 4 and r.nodes[3].mask == [True] * 3  # kept for the checks to report


def test_32_aborted_generations_end_in_error_and_leave_the_default_baseline(client, engine):
    assert ingest(engine, case("32-finish-reason-abort.json"), run="c32").ok
    rows = {r["rollout_id"]: r for r in client.get("/runs/c32/rollouts.json").json()["rollouts"]}
    assert rows["case32-ok"]["ending"] == "submitted"
    assert rows["case32-abort"]["ending"] == "error" and rows["case32-aborted-verl"]["ending"] == "error"
    d, _ = page(client, "c32", "case32-abort")
    assert d["ending"]["evidence"]["last_finish_reason"] == "abort"
    assert "abort" in d["ending"]["message"]
    g = client.get("/runs/c32/groups/g32.json").json()
    assert g["policies"]["errors_dropped"]["n"] == 1 and g["policies"]["errors_as_zero"]["n"] == 3
    (r,) = [x for x in chat.read(open_source(case("32-finish-reason-abort.json")), ReadContext())
            if x.id == "case32-aborted-verl"]
    assert r.ending.type == Ending.error and r.calls[-1].finish_reason == "error"
    assert r.calls[-1].finish_reason_raw == "aborted"
