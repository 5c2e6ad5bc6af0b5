"""`mask_on_padding` and `stop_reason_mismatch` (issue 20, section 2): each on native rollouts
through `ingest.checks.run_rollout_checks` (a clean twin gets nothing), then through the real
native reader, store and HTTP app: case 38 (verl-project/verl#3805), the token strip's
`special_trained` state, the size line, the `?flag=` filter and the endings chart's marked
segment."""
from __future__ import annotations

import re

import pytest

from app.worker.sync import register_tokenizer
from ingest.checks import CheckContext, run_rollout_checks
from ingest.checks.context import load_context
from ingest.endings import normalise
from ingest.schema import Rollout
from tests.conftest import data_path
from tests.helpers import ingest, write_jsonl

TOK = data_path("cases", "tok-llama3ish")  # <|eot_id|> 4, <|pad|> 5, <|end|> 6, <|end_of_text|> 1
CASE38 = data_path("cases", "38-pad-tokens-trained-without-eos.jsonl")
EOT, PAD, END = 4, 5, 6


@pytest.fixture(scope="module")
def llama():
    return load_context(TOK)


def native(rid: str, answer: list[int], mask: list[bool] | None = None, *, calls=None, step: int | None = 0,
           run: str = "r", **kw) -> Rollout:
    """user → assistant; the assistant's tokens `answer` (mask 1 unless given), ending derived."""
    body = {"schema": "rollscope/1", "id": rid, "run": {"id": run}, "step": step, "reward": 1.0, "nodes": [
        {"parent": None, "message": {"role": "user", "content": "q"}, "token_ids": [2, 342, 3], "mask": [False] * 3},
        {"parent": 0, "sampled": True, "message": {"role": "assistant", "content": "a"}, "token_ids": answer,
         "mask": mask if mask is not None else [True] * len(answer), "logprobs": [-0.5] * len(answer)},
    ], "calls": calls or [], **kw}
    return normalise(Rollout.model_validate(body))


def call(reason: str | None, out: int | None = None, cap: int | None = None, **sampling) -> dict:
    c: dict = {"node": 1}
    if reason:
        c["finish_reason"] = reason
    if out is not None:
        c["usage"] = {"output_tokens": out}
    if cap is not None:
        sampling["max_tokens"] = cap
    if sampling:
        c["sampling"] = sampling
    return c


def fired(r: Rollout, kind: str, ctx=None):
    res = run_rollout_checks(r, ctx)
    return [f for f in res.findings if f.kind == kind], [s.message for s in res.skipped if s.kind == kind]


# --- mask_on_padding ---------------------------------------------------------------------------

def test_pads_with_mask_1_are_named_and_a_clean_turn_is_not(llama):
    clean = native("ok", [377, 348, 20, EOT], calls=[call("stop", 4, 64)])
    assert fired(clean, "mask_on_padding", llama) == ([], [])
    padded = native("pad", [377, 348, 372, 305, PAD, PAD], calls=[call("length", 4, 4)])
    (f,), _ = fired(padded, "mask_on_padding", llama)
    assert f.severity == "error" and (f.node_idx, f.position) == (1, 4)
    assert f.detail["positions"] == [4, 5] and f.detail["pad_id"] == PAD and f.detail["pad_token"] == "<|pad|>"
    assert f.detail["trained"] == 6 and f.detail["generated"] == 4
    assert f.detail["why"] == ["pad", "more_than_generated"]
    assert "<|pad|>" in f.message
    masked_out = native("pad0", [377, 348, 372, 305, PAD, PAD], [True] * 4 + [False] * 2, calls=[call("length", 4, 4)])
    assert fired(masked_out, "mask_on_padding", llama) == ([], [])  # pads kept with mask 0: right


def test_tokens_after_the_eos_with_mask_1(llama):
    r = native("after", [377, 348, EOT, 271, 302])
    (f,), _ = fired(r, "mask_on_padding", llama)
    assert f.detail["positions"] == [3, 4] and f.detail["why"] == ["after_eos"] and f.detail["eos_at"] == 2
    assert f.detail["generated"] is None  # no call recorded its output tokens: the EOS decided


def test_without_a_tokenizer_the_output_token_count_decides():
    r = native("usage", [377, 348, 372, 305, PAD, PAD], calls=[call("length", 4, 4)])
    (f,), _ = fired(r, "mask_on_padding")
    assert f.detail["positions"] == [4, 5] and f.detail["why"] == ["more_than_generated"] and f.detail["pad_id"] is None
    assert fired(native("usage-ok", [377, 348, 372, 305], calls=[call("length", 4, 4)]), "mask_on_padding") == ([], [])
    _, (why,) = fired(native("nothing", [377, 348, PAD]), "mask_on_padding")
    assert "no pad or EOS id known" in why


def test_a_pad_that_is_also_the_eos_ends_the_turn_once():
    # Qwen2.5: pad_token <|endoftext|> is also an end-of-sequence token
    qwen = CheckContext(special_tokens={"<|endoftext|>": 9, "<|im_end|>": 8},
                        template_kwargs={"pad_token": "<|endoftext|>"})
    assert fired(native("once", [377, 348, 9]), "mask_on_padding", qwen) == ([], [])
    (f,), _ = fired(native("twice", [377, 348, 9, 9, 9]), "mask_on_padding", qwen)
    assert f.detail["positions"] == [3, 4] and set(f.detail["why"]) == {"pad", "after_eos"}


# --- stop_reason_mismatch ----------------------------------------------------------------------

def test_length_far_below_the_cap_with_a_secondary_eos_last(llama):
    # huggingface/trl#7039: <|end|> is one of the model's EOS ids, the trainer counted only <|eot_id|>
    r = native("sec", [377, 348, 372, END], calls=[call("length", 4, 64)])
    (f,), _ = fired(r, "stop_reason_mismatch", llama)
    assert f.severity == "warning" and (f.node_idx, f.position) == (1, 3)
    assert f.detail == {"rule": "length_below_cap", "call": 0, "node": 1, "finish_reason": "length",
                        "output_tokens": 4, "output_tokens_from": "usage.output_tokens", "cap": 64,
                        "cap_from": "sampling.max_tokens", "last_token_id": END, "last_token": "<|end|>"}
    # clean twins: a length stop at the cap, and one below it that ends on an ordinary token
    assert fired(native("cap", [377, 348, 372, 305], calls=[call("length", 4, 4)]), "stop_reason_mismatch",
                 llama) == ([], [])
    assert fired(native("ctx", [377, 348, 372, 305], calls=[call("length", 4, 64)]), "stop_reason_mismatch",
                 llama) == ([], [])


def test_stop_exactly_at_the_cap(llama):
    r = native("stopcap", [377, 348, 372, 305], calls=[call("stop", 4, 4)])
    (f,), _ = fired(r, "stop_reason_mismatch", llama)
    assert f.detail["rule"] == "stop_at_cap" and f.detail["cap"] == 4 and f.detail["last_token_id"] == 305
    # the model emitted its EOS as the cap's last token: a true stop
    assert fired(native("eos-at-cap", [377, 348, 372, EOT], calls=[call("stop", 4, 4)]), "stop_reason_mismatch",
                 llama) == ([], [])
    assert fired(native("below", [377, 348, EOT], calls=[call("stop", 3, 64)]), "stop_reason_mismatch",
                 llama) == ([], [])


def test_caps_and_token_counts_from_other_places():
    # no tokenizer: the call's stop_token_ids say which last token is a stop; no usage: the node's tokens count
    r = native("ids", [377, 348, 372, 128008], calls=[call("length", None, None, max_new_tokens=100,
                                                            stop_token_ids=[128008])])
    (f,), _ = fired(r, "stop_reason_mismatch")
    assert f.detail["output_tokens_from"] == "node tokens" and f.detail["cap_from"] == "sampling.max_new_tokens"
    # the cap only in the ending's evidence (the last call)
    ev = native("ev", [377, 348, 372, 305], calls=[call("stop", 4)],
                ending={"type": "submitted", "evidence": {"last_output_token_cap": 4}})
    assert fired(ev, "stop_reason_mismatch")[0][0].detail["cap_from"] == "ending.evidence.last_output_token_cap"


def test_skipped_when_it_cannot_decide(llama):
    assert fired(native("none", [377, 348]), "stop_reason_mismatch", llama)[1] == ["no finish reason recorded"]
    _, (why,) = fired(native("nocap", [377, 348], calls=[call("length", 2)]), "stop_reason_mismatch", llama)
    assert "no output token cap recorded" in why
    _, (why,) = fired(native("blind", [377, 348, END], calls=[call("length", 3, 64)]), "stop_reason_mismatch")
    assert "last token cannot be read" in why


def test_one_fault_one_finding_with_silent_truncation(llama):
    # the agent submitted; the last call says length but stopped on a secondary EOS far below its cap:
    # the ending is corrected on that reason, and only stop_reason_mismatch reports it
    r = native("claimed", [377, 348, END], calls=[call("length", 3, 64)],
               ending={"type": "submitted", "detail": "agent_completed"})
    assert r.ending.type == "length_cut"
    (f,), _ = fired(r, "stop_reason_mismatch", llama)
    assert "rests on this finish reason" in f.message
    assert fired(r, "silent_truncation", llama) == ([], [])
    assert len(fired(r, "silent_truncation")[0]) == 1  # without the tokenizer nothing contradicts the length
    # a stop at the cap that silent_truncation corrected from the cap evidence is its finding alone
    s = native("capped", [377, 348, 372, 305], calls=[call("stop", 4, 4)],
               ending={"type": "submitted", "detail": "agent_completed",
                       "evidence": {"last_output_tokens": 4, "last_output_token_cap": 4}})
    assert s.ending.type == "length_cut" and len(fired(s, "silent_truncation", llama)[0]) == 1
    assert fired(s, "stop_reason_mismatch", llama) == ([], [])


# --- through the real reader, store and app -----------------------------------------------------

def test_case_38_pads_are_flagged_drawn_trained_special_and_not_called_sampled(client, engine):
    key = register_tokenizer(engine, TOK)
    assert ingest(engine, CASE38, run="c38", tokenizer_key=key, check_context=load_context(TOK)).ok
    d = client.get("/runs/c38/rollouts/c38-pad.json").json()
    (f,) = [f for f in d["findings"] if f["kind"] == "mask_on_padding"]
    assert f["node"] == 2 and f["detail"]["positions"] == [8, 9, 10, 11]
    assert f["detail"]["trained"] == 12 and f["detail"]["generated"] == 8 and f["detail"]["pad_id"] == 5
    assert f["anchor"] == "t-42"  # 13 system + 21 user tokens before the answer, then its 9th token
    assert [x["kind"] for x in d["findings"]] == ["mask_on_padding"]  # no stop_reason_mismatch: 8 of 8 is a cut
    toks = d["messages"][2]["tokens"]
    assert [t["state"] for t in toks[8:]] == ["special_trained"] * 4
    assert [t["sampled"] for t in toks] == [True] * 8 + [False] * 4  # the pads were never sampled
    assert all(t["flags"] == ["mask on padding"] for t in toks[8:])
    assert d["n_trained_padding"] == 4 and d["n_trained_environment"] == 0
    assert d["ending"]["evidence"]["output_tokens"] == 8  # generated: the call's usage, not the 12 trained
    html = client.get("/runs/c38/rollouts/c38-pad").text
    assert len(re.findall(r'class="tok tok-special_trained tok-flagged"', html)) == 4
    assert "4 of them not generated by the policy (padding or after the EOS)" in html
    assert 'class="tok tok-special"' not in html.split('id="m-2"')[1]  # no pad drawn as an untrained special
    ok = client.get("/runs/c38/rollouts/c38-eos.json").json()
    assert ok["findings"] == [] and "mask_on_padding" not in {s["kind"] for s in ok["checks_skipped"]}
    last = ok["messages"][2]["tokens"][-1]
    assert last["state"] == "special_trained" and last["sampled"] is True  # the EOS that ends the turn
    assert ok["n_trained_padding"] == 0
    assert [r["rollout_id"] for r in client.get("/runs/c38/rollouts.json?flag=mask_on_padding").json()["rollouts"]] \
        == ["c38-pad"]


def test_case_38_without_the_tokenizer_still_decides_from_the_output_tokens(client, engine):
    assert ingest(engine, CASE38, run="c38b").ok
    d = client.get("/runs/c38b/rollouts/c38-pad.json").json()
    (f,) = [f for f in d["findings"] if f["kind"] == "mask_on_padding"]
    assert f["detail"]["positions"] == [8, 9, 10, 11] and f["detail"]["why"] == ["more_than_generated"]


def test_stop_reason_mismatch_is_filtered_and_marked_on_the_endings_chart(client, engine, tmp_path, llama):
    rs = [native("sec", [377, 348, 372, END], calls=[call("length", 4, 64)], run="e"),   # contradicted
          native("cut", [377, 348, 372, 305], calls=[call("length", 4, 4)], run="e"),   # a true length cut
          native("done", [377, 348, EOT], calls=[call("stop", 3, 64)], run="e"),        # a true stop
          native("stopcap", [377, 348, 372, 305], calls=[call("stop", 4, 4)], run="e", step=1)]
    key = register_tokenizer(engine, TOK)
    assert ingest(engine, write_jsonl(tmp_path / "e.jsonl", rs), tokenizer_key=key, check_context=llama).ok
    flagged = client.get("/runs/e/rollouts.json?flag=stop_reason_mismatch").json()["rollouts"]
    assert sorted(r["rollout_id"] for r in flagged) == ["sec", "stopcap"]
    fig = client.get("/runs/e/charts/endings.json").json()["figure"]
    bars = {t["name"]: t for t in fig["data"]}
    marked = bars["length_cut, reason contradicted"]
    assert marked["x"] == [0, 1] and marked["y"] == [pytest.approx(1 / 3), 0]
    assert marked["customdata"][0] == "/runs/e/rollouts?step=0&ending=length_cut&flag=stop_reason_mismatch"
    assert bars["length_cut"]["y"] == [pytest.approx(1 / 3), 0]  # the contradicted one is not counted in it
    assert "1 more marked: reason contradicted" in bars["length_cut"]["text"][0]
    assert bars["submitted, reason contradicted"]["y"] == [0, 1]
    for t in (marked, bars["submitted, reason contradicted"]):  # each segment opens exactly its rollouts
        for url, y, step in zip(t["customdata"], t["y"], t["x"]):
            path, _, query = url.partition("?")
            total = client.get(f"{path}.json?{query}").json()["total"]
            assert total == round(y * (3 if step == 0 else 1)), url
    csv_rows = client.get("/runs/e/charts/endings.csv").text.splitlines()
    assert ('"length_cut, reason contradicted",0,,0.333333,'  # figures keep 6 significant digits
            "/runs/e/rollouts?step=0&ending=length_cut&flag=stop_reason_mismatch") in csv_rows
    headline = client.get("/runs/e.json").json()["charts"]["ending_rates"]
    assert "length_cut, reason contradicted" in {t["name"] for t in headline["data"]}
    sec = client.get("/runs/e/rollouts/sec.json").json()
    (f,) = [f for f in sec["findings"] if f["kind"] == "stop_reason_mismatch"]
    assert f["detail"]["last_token"] == "<|end|>" and f["anchor"] == "t-6"


def test_strange_inputs_are_decided_or_skipped_never_raised(llama):
    odd = native("odd", [377, 99999, -1], calls=[call("length", 3, 64, stop_token_ids=7),
                                                 {"node": 1, "finish_reason": "stop", "usage": {"output_tokens": 64},
                                                  "sampling": {"max_tokens": True}}])
    for ctx in (llama, None):  # a stop_token_ids that is no list, a boolean cap, ids the tokenizer lacks
        assert fired(odd, "mask_on_padding", ctx) == ([], [])  # decided: 3 trained of 3 + 64 generated
    # a placeholder last id (-1) has no text: a length stop below the cap cannot be decided from it
    assert "last token cannot be read" in fired(odd, "stop_reason_mismatch", llama)[1][0]
