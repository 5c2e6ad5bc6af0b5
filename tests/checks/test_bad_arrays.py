"""Trainer logprob arrays under the one lockstep rule and checked like the behaviour logprobs
(`array_len_mismatch`, `invalid_logprob`, `logprob_shift`'s skip), and findings whose evidence holds
numbers no column type holds (issue 20, section 3: a check never rejects a rollout). Each case goes
through the real native reader into SQLite and Postgres, and the rollout page."""
from __future__ import annotations

import json

import sqlalchemy as sa

from app.db import models
from app.worker.sync import register_tokenizer
from ingest.checks import run_rollout_checks
from ingest.checks.context import load_context
from tests.checks.test_padding_and_stop_reason import END, TOK, call, native
from tests.helpers import ingest, read_folder, rollout, stored, write_jsonl

N = 30


def long_rollout(rid: str, trainer) -> dict:
    """user → assistant with N sampled tokens (behaviour logprobs -0.5) and `trainer` as the
    assistant node's `extra.trainer_logprobs`, as native JSON."""
    body = rollout(rid).to_json_dict()
    a = body["nodes"][1]
    a.update(token_ids=list(range(200, 200 + N)), mask=[True] * N, logprobs=[-0.5] * N)
    a["extra"] = {"trainer_logprobs": trainer}
    return body


def write_raw(path, bodies: list[dict]):
    """Native lines written by the standard library: NaN, Infinity and 10**400 as JSON allows them."""
    path.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    return path


def findings(client, rid: str, kind: str) -> list[dict]:
    d = client.get(f"/runs/r1/rollouts/{rid}.json").json()
    return [f for f in d["findings"] if f["kind"] == kind]


def test_trainer_logprobs_of_the_wrong_length_are_reported_and_left_out_of_the_mismatch(client, engine, tmp_path):
    path = write_raw(tmp_path / "t.jsonl", [long_rollout("short", [-0.4] * (N - 1)),
                                            long_rollout("half", [-0.4] * 15),
                                            long_rollout("long", [-0.4] * (N + 2)),
                                            long_rollout("fits", [-0.4] * N)])
    assert ingest(engine, path).ok
    for rid, n_src in (("short", N - 1), ("half", 15), ("long", N + 2)):
        (f,) = findings(client, rid, "array_len_mismatch")
        assert f["detail"] == {"array": "trainer_logprobs", "source_length": n_src, "tokens": N}
        assert f["message"] == f"node 1: trainer_logprobs has {n_src} entries for {N} tokens"
    assert findings(client, "fits", "array_len_mismatch") == []
    R = models.Rollout.__table__
    with engine.connect() as conn:
        got = dict(conn.execute(sa.select(R.c.rollout_id, R.c.mismatch_tokens)).all())
    # the pairs of a misfit array are not known to be the same token's: no figure over the overlap
    assert got == {"short": 0, "half": 0, "long": 0, "fits": N}
    for rid in ("short", "half", "long", "fits"):
        assert client.get(f"/runs/r1/rollouts/{rid}").status_code == 200


def test_invalid_trainer_logprobs_are_kept_and_reported_with_their_array(client, engine, tmp_path):
    bad = [-0.5] * N
    bad[2], bad[5], bad[7], bad[9], bad[11] = float("nan"), float("inf"), 0.7, "x", 10 ** 400
    bad[13] = True
    path = write_raw(tmp_path / "t.jsonl", [long_rollout("bad", bad), long_rollout("ok", [-0.5] * N)])
    report = ingest(engine, path)
    assert report.ok, report.errors  # 10**400 no longer rejects the rollout (an OverflowError, no field named)
    (f,) = findings(client, "bad", "invalid_logprob")
    assert f["detail"]["array"] == "trainer_logprobs" and f["detail"]["positions"] == [2, 5, 7, 9, 11, 13]
    assert f["detail"]["values"][:4] == ["nan", "inf", "0.7", "'x'"] and f["detail"]["values"][4].endswith("...")
    assert f["message"] == "node 1: 6 trainer_logprobs values outside (-inf, 0]"
    assert findings(client, "ok", "invalid_logprob") == []
    page = client.get("/runs/r1/rollouts/bad")
    assert page.status_code == 200
    kept = stored(engine, "r1")["bad#0"]["nodes"][1]["extra"]["trainer_logprobs"]
    assert kept[11] == 10 ** 400 and kept[9] == "x" and kept[13] is True  # kept as written, every digit


def test_behaviour_logprobs_name_their_array_too():
    body = long_rollout("b", [-0.5] * N)
    body["nodes"][1]["logprobs"][3] = 0.5
    from ingest.schema import Rollout

    res = run_rollout_checks(Rollout.model_validate(body))
    (f,) = [f for f in res.findings if f.kind == "invalid_logprob"]
    assert f.detail["array"] == "logprobs" and f.detail["positions"] == [3]


def test_logprob_shift_says_why_when_the_trainer_array_cannot_decide(tmp_path):
    nan = [float("nan")] * (N - 2) + [-0.5, -0.5]
    path = write_raw(tmp_path / "s.jsonl", [long_rollout("nan", nan), long_rollout("ok", [-0.5] * N)])
    got = {}
    for _, _, r in read_folder(path):
        res = run_rollout_checks(r)
        got[r.id] = ([f.kind for f in res.findings if f.kind == "logprob_shift"],
                     [s.message for s in res.skipped if s.kind == "logprob_shift"])
    assert got["ok"] == ([], [])  # decided: they agree in place
    assert got["nan"][0] == [] and len(got["nan"][1]) == 1
    assert got["nan"][1][0].startswith("too few finite trainer logprobs to compare (fewer than 4 pairs)")
    assert "node 1: trainer_logprobs has 2 finite value(s)" in got["nan"][1][0]


def test_a_finding_with_an_integer_past_int64_is_stored_as_its_digits(client, engine, tmp_path):
    key = register_tokenizer(engine, TOK)
    big = native("big", [377, 348, 372, END], calls=[call("length", 4, 10 ** 30)], run="r1")
    report = ingest(engine, write_jsonl(tmp_path / "b.jsonl", [big]), tokenizer_key=key,
                    check_context=load_context(TOK))
    assert report.ok, report.errors  # was: TypeError: Integer exceeds 64-bit range (the detail's cap)
    (f,) = findings(client, "big", "stop_reason_mismatch")
    assert f["detail"]["cap"] == str(10 ** 30) and f["detail"]["output_tokens"] == 4
    assert client.get("/runs/r1/rollouts/big").status_code == 200
    # the rollout itself keeps the cap as written
    assert client.get("/runs/r1/rollouts/big.json").json()["calls"][0]["sampling"]["max_tokens"] == 10 ** 30


def test_finding_detail_is_made_storable():
    from app.store.prepare import finding_detail

    assert finding_detail({"cap": 2 ** 63, "low": -(2 ** 63) - 1, "ok": 2 ** 63 - 1, "flag": True,
                           "x": [float("nan"), float("inf"), {"n": 10 ** 400}]}) == \
        {"cap": str(2 ** 63), "low": str(-(2 ** 63) - 1), "ok": 2 ** 63 - 1, "flag": True,
         "x": [None, None, {"n": str(10 ** 400)}]}


def test_a_recheck_keeps_the_invalid_trainer_logprobs_ingest_reported(client, engine, tmp_path):
    from app.store.recheck import recheck_run

    bad = [-0.5] * N
    bad[3], bad[4], bad[6] = float("nan"), float("-inf"), float("inf")
    assert ingest(engine, write_raw(tmp_path / "t.jsonl", [long_rollout("nan", bad)])).ok
    (before,) = findings(client, "nan", "invalid_logprob")
    recheck_run(engine, "r1")
    (after,) = findings(client, "nan", "invalid_logprob")  # strict JSON would have stored them as null
    assert before["detail"]["positions"] == after["detail"]["positions"] == [3, 4, 6]


def test_huge_numbers_in_a_cap_or_a_prompt_are_decided_not_an_internal_error(tmp_path):
    from ingest.checks.registry import INTERNAL_ERROR

    ctx = load_context(TOK)
    huge_cap = native("cap", [377, 348, END], calls=[call("length", 3, 10 ** 400)], run="r1")
    res = run_rollout_checks(huge_cap, ctx)
    assert not [s.message for s in res.skipped if s.message.startswith(INTERNAL_ERROR)]
    assert "stop_reason_mismatch" in [f.kind for f in res.findings]  # 3 of 10**400, EOS last
    odd = rollout("prompt")
    odd.nodes[1].extra["prompt_ids"] = [10 ** 40, 377]
    odd.nodes[1].token_ids, odd.nodes[1].mask, odd.nodes[1].logprobs = [377], [True], [-0.1]
    res = run_rollout_checks(odd, ctx)
    assert not [s.message for s in res.skipped if s.message.startswith(INTERNAL_ERROR)]
