"""Small wrong messages found by a tester (issue 20): a boolean call time read as a number, an end
without a start skipped as "no timing", a call reporting 0 output tokens, a recorded prompt
shorter than the rendering, a tool result with no call id. Each through the real native reader
(and, for the timing, the store and the rollout page)."""
from __future__ import annotations

import json

from ingest.chat_template import render
from ingest.checks import run_rollout_checks
from ingest.checks.context import load_context
from tests.conftest import FIXTURES
from tests.helpers import ingest, read_folder, rollout


def read(tmp_path, body: dict, name: str = "t.jsonl"):
    path = tmp_path / name
    path.write_text(json.dumps(body) + "\n")
    ((_, _, r),) = list(read_folder(path))
    return r


def kind(r, k: str, ctx=None):
    res = run_rollout_checks(r, ctx)
    return [f for f in res.findings if f.kind == k], [s.message for s in res.skipped if s.kind == k]


def with_call(rid: str, time=None, **c) -> dict:
    body = rollout(rid).to_json_dict()
    body["calls"] = [{"node": 1, **({"time": time} if time is not None else {}), **c}]
    return body


def test_a_boolean_call_time_is_no_time_and_an_end_alone_is_incomplete(client, engine, tmp_path):
    r = read(tmp_path, with_call("b", {"start": True}), "b.jsonl")
    assert r.calls[0].time.start is None and r.calls[0].time.extra == {"unread_times": {"start": True}}
    assert kind(r, "timing_incomplete") == ([], ["no model or tool call has timing recorded"])
    for rid, time in (("e", {"end": 5}), ("be", {"start": True, "end": 5})):
        (f,), _ = kind(read(tmp_path, with_call(rid, time), f"{rid}.jsonl"), "timing_incomplete")
        assert f.message == "model call 0 has an end and no start"
        assert f.detail == {"call": "model", "index": 0, "start": None, "end": 5.0, "duration": None,
                            "status": "no_start"}
    # a boolean node timestamp is no time either (tool call spans read it)
    body = rollout("ts").to_json_dict()
    body["nodes"][1]["timestamp"] = True
    assert read(tmp_path, body, "ts.jsonl").nodes[1].timestamp is None
    # stored, shown, and read back the same
    path = tmp_path / "all.jsonl"
    path.write_text("".join(json.dumps(with_call(rid, t)) + "\n"
                            for rid, t in (("b", {"start": True}), ("e", {"end": 5}))))
    assert ingest(engine, path).ok
    for rid in ("b", "e"):
        assert client.get(f"/runs/r1/rollouts/{rid}").status_code == 200
    d = client.get("/runs/r1/rollouts/e.json").json()
    assert [f["detail"]["status"] for f in d["findings"] if f["kind"] == "timing_incomplete"] == ["no_start"]
    b = client.get("/runs/r1/rollouts/b.json").json()
    assert b["calls"][0]["time"] == {"extra": {"unread_times": {"start": True}}}


def test_a_call_that_reports_no_output_tokens_is_worded_as_such(tmp_path):
    body = rollout("z").to_json_dict()
    body["nodes"][1].update(token_ids=list(range(300, 306)), mask=[True] * 6, logprobs=[-0.5] * 6)
    body["calls"] = [{"node": 1, "usage": {"output_tokens": 0}}]
    (f,), _ = kind(read(tmp_path, body), "mask_on_padding")
    assert f.message == ("node 1: loss mask 1 on 6 tokens the policy did not generate: "
                         "6 trained tokens where the call reports no output tokens (usage.output_tokens 0)")
    assert (f.detail["trained"], f.detail["generated"]) == (6, 0)
    body["calls"] = [{"node": 1, "usage": {"output_tokens": 4}}]
    (f,), _ = kind(read(tmp_path, body, "four.jsonl"), "mask_on_padding")
    assert f.message.endswith("6 trained tokens where the call reports 4 output tokens")


def test_a_recorded_prompt_shorter_than_the_rendering_ends(tmp_path):
    ctx = load_context(FIXTURES / "tokenizers" / "tiny-qwen3")
    full = ctx.encode(render(ctx.chat_template, [{"role": "user", "content": "What is 2+2?"}],
                             add_generation_prompt=True))
    body = {"schema": "rollscope/1", "id": "p", "run": {"id": "r1"}, "reward": 1.0, "nodes": [
        {"parent": None, "message": {"role": "user", "content": "What is 2+2?"}, "token_ids": full[:4],
         "mask": [False] * 4},
        {"parent": 0, "sampled": True, "message": {"role": "assistant", "content": "4"},
         "token_ids": ctx.encode("4<|im_end|>"), "mask": [True] * len(ctx.encode("4<|im_end|>"))}]}
    (f,), _ = kind(read(tmp_path, body), "template_mismatch", ctx)
    assert f.detail["index"] == 4 and f.detail["found"] is None
    assert f.message == f"node 1: the messages render to {full[4]} at token 4 but the recorded prompt ends at token 4"
    assert "None" not in f.message


def test_a_tool_result_with_no_call_id(tmp_path):
    call = {"id": "c1", "name": "f", "arguments": "{}"}
    body = rollout("u", messages=[{"role": "user", "content": "q"},
                                  {"role": "assistant", "content": "", "tool_calls": [call]},
                                  {"role": "tool", "content": "out", "tool_call_id": "c1"},
                                  {"role": "tool", "content": "again", "tool_call_id": None}]).to_json_dict()
    (f,), _ = kind(read(tmp_path, body), "unpaired_tool_result")
    assert f.message == "node 3: a tool result with no call id answers no waiting call"
    body["nodes"][3]["message"]["tool_call_id"] = "c9"
    (f,), _ = kind(read(tmp_path, body, "id.jsonl"), "unpaired_tool_result")
    assert f.message == "node 3: tool result 'c9' answers no waiting call"
