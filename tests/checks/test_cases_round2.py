"""The handed cases of round two (../shared/cases) through ingest, the store and the HTTP app."""
from __future__ import annotations

from tests.checks.test_cases import findings, load
from tests.helpers import ingest, rollout, write_jsonl


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
    assert client.get("/runs/cases/rollouts.json?flag=malformed_tool_arguments").json()["rollouts"][0]["rollout_id"] == "case21"


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
    hits = [(f["node"], f["detail"]["role"], f["detail"]["positions"]) for f in d["findings"] if f["kind"] == "mask_on_unsampled"]
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
