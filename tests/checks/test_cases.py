"""Every case in ../shared/cases (copied to tests/fixtures/cases) through ingest, the store and
the HTTP app: what went wrong upstream is flagged, kept, and shown, never repaired silently."""
from __future__ import annotations

import subprocess
import sys
from urllib.parse import quote

import pytest

from tests.conftest import data_path
from tests.helpers import ingest


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
    ids = [t["id"] for m in client.get("/runs/cases/rollouts/case01.json?branch=1").json()["messages"] for t in m["tokens"]]
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
    assert "<html" not in part and 'id="node-50"' in part
