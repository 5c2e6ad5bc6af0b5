"""Every handed case in tests/fixtures/cases through ingest, the store and the HTTP app: what went
wrong upstream is flagged, kept, and shown, never repaired silently."""
from __future__ import annotations

import subprocess
import sys
from urllib.parse import quote

import pytest

from tests.conftest import data_path
from tests.helpers import ingest, rollout, write_jsonl


def case(name: str):
    return data_path("cases", name)


def load(client, engine, name: str, run: str = "cases"):
    report = ingest(engine, case(name), run=run)
    return report


def findings(client, run, rid):
    d = client.get(f"/runs/{run}/rollouts/{quote(rid, safe='')}.json").json()
    return d, {f["kind"]: f for f in d["findings"]}


def test_01_token_drift_is_flagged_and_both_sequences_kept(client, engine):
    assert load(client, engine, "01-token-drift-retokenization.json").ok
    d, f = findings(client, "cases", "case01")
    drift = f["token_drift"]
    assert drift["detail"]["index"] == 3 and drift["detail"]["expected"] == 10 and drift["detail"]["found"] == 12
    assert len(d["branches"]) == 2
    ids = [t["id"] for m in client.get("/runs/cases/rollouts/case01.json?branch=1").json()["messages"]
           for t in m["tokens"]]
    assert 12 in ids  # the re-tokenized prompt is kept as it was sent
    ids0 = [t["id"] for m in d["messages"] for t in m["tokens"]]
    assert ids0[3:5] == [10, 11]  # and so are the sampled tokens
    html = client.get("/runs/cases/rollouts/case01?branch=1").text
    assert "tok-drift" in html
    assert client.get("/runs/cases/rollouts.json?flag=token_drift").json()["rollouts"][0]["rollout_id"] == "case01"


def test_04_short_and_padded_logprobs(client, engine):
    assert load(client, engine, "04-logprobs-length-mismatch.json").ok
    a, fa = findings(client, "cases", "case04a")
    assert fa["array_len_mismatch"]["detail"] == {"array": "logprobs", "source_length": 4, "tokens": 6}
    toks = [t for m in a["messages"] for t in m["tokens"] if t["trained"]]
    assert [t["logprob"] for t in toks][-2:] == [None, None]  # missing, never 0.0
    assert "logprob missing" in client.get("/runs/cases/rollouts/case04a").text
    b, fb = findings(client, "cases", "case04b")
    assert "array_len_mismatch" not in fb
    assert fb["suspected_logprob_padding"]["detail"]["run"] == 2
    toks = [t for m in b["messages"] for t in m["tokens"] if t["trained"]]
    assert [t["logprob"] for t in toks][-2:] == [0.0, 0.0]  # kept, but marked


def test_05_duplicate_ids_pair_by_position(client, engine):
    assert load(client, engine, "05-duplicate-tool-call-ids.json").ok
    d, f = findings(client, "cases", "case05")
    assert "duplicate_tool_call_id" in f
    calls = {(m["idx"], c["position"]): (c["name"], c["result_node"]) for m in d["messages"] for c in m["tool_calls"]}
    assert calls[(1, 0)] == ("search_direct_flight", 2)
    assert calls[(3, 0)] == ("search_onestop_flight", 4)
    assert calls[(5, 0)] == ("get_flight", 6) and calls[(5, 1)] == ("get_flight", 7)
    results = {m["idx"]: m["answers"] for m in d["messages"] if m["role"] == "tool"}
    assert results[4]["name"] == "search_onestop_flight"


def test_07_unanswered_call_shows_placeholder(client, engine):
    assert load(client, engine, "07-unanswered-tool-call.json").ok
    d, f = findings(client, "cases", "case07")
    assert f["unanswered_tool_call"]["detail"]["id"] == "call_a"
    assert d["ending"]["type"] == "error"
    assert "tool_call id without response" in d["ending"]["message"]
    html = client.get("/runs/cases/rollouts/case07").text
    assert html.count("no result recorded") == 1


def test_08_utf8_split_and_lost_bytes(client, engine):
    assert load(client, engine, "08-utf8-split-across-tokens.json").ok
    stem = "08-utf8-split-across-tokens"
    a, _ = findings(client, "cases", f"{stem}#variant_a")
    (m,) = a["messages"]
    assert m["content"] == "Hi 😀!"
    pieces = [t["piece"] for t in m["tokens"]]
    assert [p["hex"] for p in pieces if p["partial"]] == ["f0 9f", "98 80"]
    assert "\ufffd" not in client.get(f"/runs/cases/rollouts/{stem}%23variant_a").text
    b, fb = findings(client, "cases", f"{stem}#variant_b")
    assert fb["bytes_lost_upstream"]["detail"]["positions"] == [0, 1, 2, 3]
    assert b["messages"][0]["content"] == "😊"  # message-level text still shown as given
    assert "bytes lost upstream" in client.get(f"/runs/cases/rollouts/{stem}%23variant_b").text


def test_13_empty_response_is_kept_and_shown(client, engine):
    assert load(client, engine, "13-empty-assistant-response.json").ok
    d, f = findings(client, "cases", "case13")
    assert f["empty_response"]["node"] == 3
    html = client.get("/runs/cases/rollouts/case13").text
    assert "(empty response, 1 token: 151645)" in html


@pytest.fixture(scope="module")
def large_cases(tmp_path_factory):
    out = tmp_path_factory.mktemp("large")
    subprocess.run([sys.executable, str(case("15-17-make-large-cases.py")), str(out), "12", "5000"], check=True,
                   capture_output=True)
    return out


def test_15_huge_tool_output_previews(client, engine, large_cases):
    assert ingest(engine, large_cases / "15-huge-tool-output.json", run="big").ok
    page = client.get("/runs/big/rollouts/case15")
    assert page.status_code == 200 and len(page.content) < 1_000_000
    assert "show full text" in page.text
    d = client.get("/runs/big/rollouts/case15.json").json()
    tool = next(m for m in d["messages"] if m["role"] == "tool")
    assert tool["content_len"] > 12_000_000 and len(tool["content"]) == 2000
    assert len(client.get(tool["content_url"]).text) == tool["content_len"]


def test_17_many_turns_paginates(client, engine, large_cases):
    assert ingest(engine, large_cases / "17-many-turns.json", run="long").ok
    row = client.get("/runs/long/rollouts.json").json()["rollouts"][0]
    assert row["n_turns"] == 5001 and row["n_tool_calls"] == 5000
    d = client.get("/runs/long/rollouts/case17.json").json()
    assert d["messages_total"] == 10002 and len(d["messages"]) == 50 and d["next_offset"] == 50
    last = client.get("/runs/long/rollouts/case17.json?offset=10000").json()
    assert last["messages"][-1]["content"] == "Done: 5000" and last["next_offset"] is None
    # pairing is computed over the whole branch: a call on page 1 points at its result
    first_call = d["messages"][1]["tool_calls"][0]
    assert first_call["result_node"] == 2
    html = client.get("/runs/long/rollouts/case17").text
    assert "load 50 more messages" in html and len(html) < 300_000
    part = client.get("/runs/long/rollouts/case17?offset=50", headers={"HX-Request": "true"}).text
    assert "<html" not in part and 'id="m-50"' in part


def test_21_each_malformed_argument_shape_is_named(client, engine):
    assert load(client, engine, "21-tool-arguments-shapes.json").ok
    d, _ = findings(client, "cases", "case21")
    hits = [f for f in d["findings"] if f["kind"] == "malformed_tool_arguments"]
    assert len(hits) == 4  # the well-formed object ("a") is not a fault (the case's `_case.expect`)
    shapes = {f["detail"]["id"]: f["detail"]["shape"] for f in hits}
    assert shapes == {"b": "double_encoded", "c": "cut_off", "d": "scalar", "e": "missing"}
    calls = [c for m in d["messages"] for c in m["tool_calls"]]
    assert [c["result_node"] for c in calls] == [2, 3, 4, 5, 6]  # all five kept and paired
    html = client.get("/runs/cases/rollouts/case21").text
    assert "are JSON encoded twice" in html and "{&#34;q&#34;: &#34;weather in Par" in html  # raw text, escaped
    assert client.get("/runs/cases/rollouts.json?flag=malformed_tool_arguments").json()["rollouts"][0][
        "rollout_id"] == "case21"


def test_20b_an_object_argument_is_well_formed(client, engine):
    # the call's arguments are a JSON object holding a big integer: well formed, so no finding
    assert load(client, engine, "20b-big-integer-in-payload.json").ok
    d, _ = findings(client, "cases", "case20b")
    assert [f for f in d["findings"] if f["kind"] == "malformed_tool_arguments"] == []
    assert d["messages"][1]["tool_calls"][0]["arguments"] == '{"account": 98765432109876543210987}'


def test_22_reasoning_without_an_answer(client, engine):
    assert load(client, engine, "22-thinking-content-blocks.json").ok
    d, f = findings(client, "cases", "case22")
    assert f["empty_reasoning_only"]["node"] == 5 and "empty_response" not in f


def test_30_mask_on_environment_tokens(client, engine):
    assert load(client, engine, "30-mask-on-env-tokens.jsonl").ok
    d, _ = findings(client, "cases", "case30")
    hits = [(f["node"], f["detail"]["role"], f["detail"]["positions"]) for f in d["findings"]
            if f["kind"] == "mask_on_unsampled"]
    assert hits == [(2, "tool", [0, 1, 2, 3]), (3, "user", [0, 1, 2])]
    assert d["rollout"]["n_trained_tokens"] == 12 and d["n_trained_environment"] == 7
    env = [t for m in d["messages"] if m["role"] != "assistant" for t in m["tokens"] if t["trained"]]
    assert len(env) == 7 and not any(t["sampled"] for t in env)
    html = client.get("/runs/cases/rollouts/case30").text
    assert "7 of them environment tokens" in html
    tool = html.split('id="m-2"')[1].split("</article>")[0]
    assert "sampled, loss mask 1" not in tool and "loss mask 1 on a token the policy did not sample" in tool
    assert "tok-fault" in tool and "(not sampled by the policy)" in tool


def test_group_of_errors_is_zero_variance_and_undecided_checks_say_why(client, engine, tmp_path):
    # Case 32's shape (rllm-org/rllm#542): one answer, two aborted generations scored 0.
    rs = [rollout("ok", group="g32", index=0, reward=1.0),
          rollout("abort", group="g32", index=1, reward=0.0, ending="error"),
          rollout("aborted", group="g32", index=2, reward=0.0, ending="error")]
    ingest(engine, write_jsonl(tmp_path / "g.jsonl", rs))
    g = client.get("/runs/r1/groups/g32.json").json()
    assert g["policies"]["errors_dropped"]["n"] == 1 and g["policies"]["errors_dropped"]["std"] == 0.0
    # one member left once the aborted two are dropped: no learning signal
    assert [f["kind"] for f in g["findings"]] == ["zero_variance_group"]
    # no advantages recorded: the baseline checks say they could not decide, never pass silently
    skipped = {s["kind"]: s["reason"] for s in g["checks_skipped"]}
    assert "no advantages recorded" in skipped["advantage_mismatch"]
    assert "no advantages recorded" in skipped["errored_reward_in_baseline"]
    assert "no advantages recorded" in client.get("/runs/r1/groups/g32").text


def test_42_genai_content_in_span_events_is_read_in_every_form(client, engine):
    """The same conversation in the three OpenTelemetry GenAI forms (≤ 1.27 prompt/completion events,
    1.28-1.36 one event per message, the current attributes) reads as the same three messages."""
    assert load(client, engine, "42-genai-messages-in-span-events.otlp.json").ok
    seen = {}
    for rid in ("c42-content-events", "c42-message-events", "c42-attributes"):
        d, f = findings(client, _run_of(client, rid), rid)
        seen[rid] = [(m["role"], m["content"]) for m in d["messages"]]
        assert "content_not_recorded" not in f, f
    assert seen["c42-content-events"] == seen["c42-message-events"] == seen["c42-attributes"]
    assert [r for r, _ in seen["c42-attributes"]] == ["system", "user", "assistant"]
    assert seen["c42-attributes"][2][1] == "17 times 25 is 425."


def test_42_model_calls_with_tokens_and_no_text_are_a_finding(client, engine, tmp_path):
    """Content capture off (the attributes and the events stripped): the rollout is never a silent
    0-message answer; it carries `content_not_recorded` with the calls' output tokens."""
    import json

    doc = json.loads(case("42-genai-messages-in-span-events.otlp.json").read_text())
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                sp.pop("events", None)
                sp["attributes"] = [a for a in sp.get("attributes", []) if not a["key"].startswith(
                    ("gen_ai.input.", "gen_ai.output.", "gen_ai.system_instructions"))]
    path = tmp_path / "no-content.otlp.json"
    path.write_text(json.dumps(doc))
    assert ingest(engine, path, run="cases").ok
    for rid in ("c42-content-events", "c42-message-events", "c42-attributes"):
        d, f = findings(client, _run_of(client, rid), rid)
        assert d["messages"] == []
        hit = f["content_not_recorded"]
        assert hit["detail"]["output_tokens"] > 0 and hit["detail"]["messages"] == 0


def _run_of(client, rid: str) -> str:
    hits = [r for run in client.get("/api/v1/runs").json()["items"]
            for r in client.get(f"/api/v1/runs/{quote(run['id'], safe='')}/rollouts?limit=200").json()["items"]
            if r["rollout_id"] == rid]
    assert len(hits) == 1, (rid, hits)
    return quote(hits[0]["run_id"], safe="")


def test_39_tool_call_markup_left_in_the_text_is_a_finding(client, engine):
    """The server's tool parser failed (Hermes JSON and Qwen3-Coder XML markup left in the content,
    no structured tool call): a finding naming the convention and the tool; the real answer is clean;
    the markup is shown verbatim, escaped."""
    assert load(client, engine, "39-tool-call-markup-unparsed.json").ok
    for rid, convention, tool in (("c39-hermes", "Hermes", "calculator"),
                                  ("c39-qwen3xml", "Qwen3-Coder XML", "get_weather")):
        d, f = findings(client, _run_of(client, rid), rid)
        hit = f["unparsed_tool_call"]
        assert hit["detail"]["dialect"] == convention and hit["detail"]["tool"] == tool
        assert hit["severity"] == "error"
        assert hit["detail"]["final_answer"] is True
        evidence = d["ending"]["evidence"]
        assert (evidence["last_answer_unparsed_tool_call"], evidence["last_answer_unparsed_tool"]) == (convention, tool)
        html = client.get(f"/runs/{_run_of(client, rid)}/rollouts/{rid}").text
        assert "&lt;tool_call&gt;" in html and "<tool_call>" not in html
        assert f"the final answer was an unparsed {convention}" in html
    d, f = findings(client, _run_of(client, "c39-ok"), "c39-ok")
    assert "unparsed_tool_call" not in f and not d["ending"]["evidence"].get("last_answer_unparsed_tool_call")


def test_37_trainer_logprobs_one_position_off_are_named_as_such(client, engine):
    """The trainer's logprobs of c37-shifted are the behaviour logprobs of the next token: the
    finding names the offset (+1) and the agreement both ways, on node 2; c37-ok (trainer within
    0.01 of inference) gets none. Ingested with the tokenizer it was made with, as a run would be."""
    from app.worker.sync import register_tokenizer
    from ingest.checks.context import load_context

    tok = case("tok-llama3ish")
    assert ingest(engine, case("37-trainer-logprobs-off-by-one.jsonl"), tokenizer_key=register_tokenizer(engine, tok),
                  check_context=load_context(tok)).ok
    d, f = findings(client, "c37", "c37-shifted")
    hit = f["logprob_shift"]
    assert hit["severity"] == "error" and hit["node"] == 2
    det = hit["detail"]
    assert det["array"] == "trainer_logprobs" and det["offset"] == 1 and det["tokens"] == 25
    assert det["pairs_shifted"] == det["pairs_in_place"] == 24
    assert det["mean_abs_delta_shifted"] < 0.01 and det["within_tolerance_shifted"] == 1.0
    assert det["mean_abs_delta_in_place"] > 1.0 and det["within_tolerance_in_place"] < 0.2
    assert "offset by +1 position" in hit["message"]
    assert "logprob shift" in client.get("/runs/c37/rollouts/c37-shifted").text
    _, ok = findings(client, "c37", "c37-ok")
    assert ok == {}  # nothing else fires on the clean twin either (template, BOS, vocabulary all checked)
    assert [r["rollout_id"] for r in client.get("/runs/c37/rollouts.json?flag=logprob_shift").json()["rollouts"]] == [
        "c37-shifted"]
