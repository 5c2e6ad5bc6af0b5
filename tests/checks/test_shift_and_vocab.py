"""logprob_shift, duplicate_bos and token_out_of_vocab: on native rollouts through
`run_rollout_checks`, then through the real reader, store and HTTP app with the run's tokenizer
(tests/fixtures/cases/tok-llama3ish: 396 ids, `<|begin_of_text|>` = 0, a Llama-3-like template)."""
from __future__ import annotations

import json
import random

import pytest

from app.worker.sync import register_tokenizer
from ingest.checks import CheckContext, run_rollout_checks
from ingest.checks.context import load_context
from ingest.schema import Rollout
from tests.conftest import data_path
from tests.helpers import ingest, write_jsonl

TOK = data_path("cases", "tok-llama3ish")
CASE37 = data_path("cases", "37-trainer-logprobs-off-by-one.jsonl")
BOS = 0


@pytest.fixture(scope="module")
def ctx() -> CheckContext:
    return load_context(TOK)


def fired(r: Rollout, kind: str, ctx: CheckContext | None = None):
    res = run_rollout_checks(r, ctx)
    return [f for f in res.findings if f.kind == kind], [s for s in res.skipped if s.kind == kind]


def native(*nodes: dict, rid: str = "r") -> Rollout:
    """A rollout of `nodes` (dicts: role, ids, and optional mask, logprobs, extra keys), chained."""
    out = []
    for k, n in enumerate(nodes):
        n = dict(n)
        role, ids = n.pop("role"), n.pop("ids")
        sampled = role == "assistant"
        out.append({"parent": k - 1 if k else None, "message": {"role": role, "content": f"{role} {k}"},
                    "sampled": sampled, "token_ids": ids, "mask": n.pop("mask", [sampled] * len(ids)),
                    "logprobs": n.pop("logprobs", [None] * len(ids)), **n})
    return Rollout.model_validate({"schema": "rollscope/1", "id": rid, "run": {"id": "r"}, "step": 0, "nodes": out,
                                   "reward": 1.0, "ending": {"type": "submitted"}})


# --- logprob_shift ---------------------------------------------------------------------------------

def behaviour(n: int, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [round(-rng.uniform(0.0, 3.0), 4) for _ in range(n)]


def with_trainer(trainer: list, lp: list, key: str = "trainer_logprobs") -> Rollout:
    return native({"role": "user", "ids": [10, 11, 12]},
                  {"role": "assistant", "ids": list(range(20, 20 + len(lp))), "logprobs": lp, key: trainer})


@pytest.mark.parametrize("offset", [1, -1, 2])
def test_logprob_shift_names_the_offset_and_both_agreements(offset):
    lp = behaviour(16)
    # trainer[i] is the behaviour logprob of token i + offset (None where that token does not exist)
    trainer = [lp[i + offset] if 0 <= i + offset < len(lp) else None for i in range(len(lp))]
    (f,), _ = fired(with_trainer(trainer, lp), "logprob_shift")
    d = f.detail
    assert f.severity == "error" and f.node_idx == 1
    assert d["offset"] == offset and d["array"] == "trainer_logprobs" and d["tokens"] == 16
    assert d["mean_abs_delta_shifted"] == 0.0 and d["within_tolerance_shifted"] == 1.0
    assert d["mean_abs_delta_in_place"] > 0.5 and d["within_tolerance_in_place"] < 0.5
    assert d["pairs_shifted"] == 16 - abs(offset) and d["pairs_in_place"] == 16 - abs(offset)
    assert f"offset by {offset:+d}" in f.message


def test_logprob_shift_reads_old_logprobs_too():
    lp = behaviour(10, seed=3)
    (f,), _ = fired(with_trainer(lp[1:] + [None], lp, key="old_logprobs"), "logprob_shift")
    assert f.detail["array"] == "old_logprobs" and f.detail["offset"] == 1


@pytest.mark.parametrize("name, make", [
    ("aligned with noise", lambda lp, rng: [v + rng.uniform(-0.02, 0.02) for v in lp]),
    ("a policy that moved", lambda lp, rng: [v + rng.uniform(-1.5, 1.5) for v in lp]),
    ("another sequence altogether", lambda lp, rng: behaviour(len(lp), seed=99)),
])
def test_logprob_shift_is_silent_where_no_shift_explains_the_difference(name, make):
    rng = random.Random(7)
    for seed in range(20):  # many draws: noise must never fire
        lp = behaviour(24, seed=seed)
        found, skipped = fired(with_trainer(make(lp, rng), lp), "logprob_shift")
        assert found == [] and skipped == [], (name, seed)


def test_logprob_shift_needs_enough_pairs_and_a_varying_sequence():
    lp = behaviour(4)
    assert fired(with_trainer(lp[1:] + [None], lp), "logprob_shift")[0] == []  # 3 shifted pairs: too few
    flat = [-0.5] * 12
    assert fired(with_trainer([-0.9] * 12, flat), "logprob_shift")[0] == []  # every alignment is alike


def test_logprob_shift_skips_without_a_trainer_array_and_ignores_reference_logprobs():
    lp = behaviour(12)
    r = native({"role": "user", "ids": [10, 11]},
               {"role": "assistant", "ids": list(range(20, 32)), "logprobs": lp, "reference_logprobs": lp[1:] + [None]})
    found, (skip,) = fired(r, "logprob_shift")
    assert found == [] and "no trainer logprobs" in skip.message


# --- duplicate_bos ---------------------------------------------------------------------------------

def test_duplicate_bos_on_the_branch_is_reported_once_on_the_node_holding_it(ctx):
    r = native({"role": "system", "ids": [BOS, BOS, 2, 300, 3]}, {"role": "user", "ids": [2, 301, 3]},
               {"role": "assistant", "ids": [302, 4]}, {"role": "user", "ids": [2, 303, 3]},
               {"role": "assistant", "ids": [304, 4]})
    (f,), _ = fired(r, "duplicate_bos", ctx)
    assert f.severity == "warning" and (f.node_idx, f.position) == (2, None)  # the first request it opens
    assert f.detail == {"bos_id": BOS, "bos_token": "<|begin_of_text|>", "positions": [0, 1], "leading_bos": 2,
                        "prompt": "branch", "requests": [2, 4], "bos_node": 0, "bos_position": 0}


def test_duplicate_bos_split_over_two_messages_and_deep_branches(ctx):
    turns = [{"role": "system", "ids": [BOS]}, {"role": "user", "ids": [BOS, 2, 301, 3]}]
    for k in range(300):  # a long tool loop: every request shares the branch's opening
        turns += [{"role": "assistant", "ids": [302, 4]}, {"role": "tool", "ids": [2, 303 + k % 50, 3]}]
    (f,), _ = fired(native(*turns), "duplicate_bos", ctx)
    assert (f.node_idx, f.detail["bos_node"], f.detail["bos_position"]) == (2, 0, 0) and f.detail["leading_bos"] == 2
    assert f.detail["requests"] == list(range(2, 602, 2))


def test_duplicate_bos_in_a_recorded_prompt_is_reported_on_its_request(ctx):
    r = native({"role": "user", "ids": [BOS, 2, 301, 3]},
               {"role": "assistant", "ids": [302, 4], "prompt_ids": [BOS, BOS, BOS, 2, 301, 3]})
    (f,), _ = fired(r, "duplicate_bos", ctx)
    assert (f.node_idx, f.position) == (1, None)
    assert f.detail["prompt"] == "prompt_ids" and f.detail["leading_bos"] == 3 and f.detail["requests"] == [1]


@pytest.mark.parametrize("ids", [[BOS, 2, 300, 3], [BOS, 2, BOS, 3], [2, BOS, BOS, 3]])
def test_duplicate_bos_is_silent_on_one_bos_at_the_start(ctx, ids):
    r = native({"role": "user", "ids": ids}, {"role": "assistant", "ids": [302, 4]})
    found, skipped = fired(r, "duplicate_bos", ctx)
    assert found == [] and skipped == []


def test_duplicate_bos_reads_the_bos_from_the_special_tokens_alone():
    r = native({"role": "user", "ids": [1, 1, 7]}, {"role": "assistant", "ids": [8]})
    (f,), _ = fired(r, "duplicate_bos", CheckContext(special_tokens={"<s>": 1, "</s>": 2}))
    assert f.detail["bos_token"] == "<s>"
    found, (skip,) = fired(r, "duplicate_bos", CheckContext(special_tokens={"</s>": 2}))
    assert found == [] and "no BOS token known" in skip.message
    assert "no BOS token known" in fired(r, "duplicate_bos")[1][0].message


def _c37_ok() -> dict:
    return json.loads(CASE37.read_text().splitlines()[0])


def test_template_mismatch_leaves_an_extra_bos_to_duplicate_bos(ctx):
    """c37-ok is what the chat template renders; one more BOS in front (the tokenizer's own) is
    `duplicate_bos`, not also a `template_mismatch` at index 1."""
    body = _c37_ok()
    assert not run_rollout_checks(Rollout.model_validate(body), ctx).kinds()
    system = body["nodes"][0]
    for key, v in (("token_ids", BOS), ("mask", False), ("logprobs", None)):
        system[key] = [v] + system[key]
    res = run_rollout_checks(Rollout.model_validate(body), ctx)
    assert res.kinds() == ["duplicate_bos"]
    assert "template_mismatch" not in {s.kind for s in res.skipped}  # it ran, and let the BOS go
    body["nodes"][1]["token_ids"][1] = 343  # a second difference: the template's own finding stands
    assert run_rollout_checks(Rollout.model_validate(body), ctx).kinds() == ["duplicate_bos", "template_mismatch"]


# --- token_out_of_vocab ----------------------------------------------------------------------------

def test_token_out_of_vocab_names_the_ids_positions_and_size(ctx):
    assert ctx.vocab_size() == 396
    r = native({"role": "user", "ids": [BOS, 2, 301, 3]},
               {"role": "assistant", "ids": [302, 396, 305, 128_000, 396, 4]})
    (f,), _ = fired(r, "token_out_of_vocab", ctx)
    assert f.severity == "error" and (f.node_idx, f.position) == (1, 1)
    assert f.detail == {"positions": [1, 3, 4], "count": 3, "ids": [396, 128_000], "vocab_size": 396, "sampled": True}
    assert "not in the tokenizer (396 ids)" in f.message


def test_token_out_of_vocab_is_silent_inside_the_vocabulary_and_skips_without_a_tokenizer(ctx):
    r = native({"role": "user", "ids": [BOS, 2, 301, 3]}, {"role": "assistant", "ids": [302, 395, -1, -100]})
    assert fired(r, "token_out_of_vocab", ctx) == ([], [])  # 395 is the last id; negatives are placeholders
    found, (skip,) = fired(r, "token_out_of_vocab")
    assert found == [] and "the run has no tokenizer" in skip.message


def test_an_added_token_beyond_the_vocabulary_is_in_it():
    c = load_context(TOK, added={400: "<|extra|>"})
    assert c.vocab_size() == 401
    r = native({"role": "user", "ids": [2, 3]}, {"role": "assistant", "ids": [400, 4]})
    assert fired(r, "token_out_of_vocab", c) == ([], [])


# --- through the reader, the store and the HTTP app ------------------------------------------------

def _load(engine, tmp_path, rollouts: list[Rollout]):
    key = register_tokenizer(engine, TOK)
    assert ingest(engine, write_jsonl(tmp_path / "in.jsonl", rollouts), tokenizer_key=key,
                  check_context=load_context(TOK)).ok


def _oov_rollout(rid: str, ids: list[int], token_bytes: list | None = None) -> Rollout:
    extra = {"token_bytes": token_bytes} if token_bytes is not None else {}
    return native({"role": "user", "ids": [BOS, 2, 301, 3]},
                  {"role": "assistant", "ids": ids, "logprobs": [-0.5] * len(ids), **extra}, rid=rid)


def test_an_out_of_vocabulary_id_is_a_finding_and_its_chip_says_so(client, engine, tmp_path):
    bad = _oov_rollout("oov", [302, 500, 4])
    recorded = _oov_rollout("oov-bytes", [302, 500, 4], token_bytes=["6869", "", "21"])  # the server sent b""
    _load(engine, tmp_path, [bad, recorded, _oov_rollout("fine", [302, 395, 4])])
    for rid in ("oov", "oov-bytes"):
        d = client.get(f"/runs/r/rollouts/{rid}.json").json()
        (f,) = [f for f in d["findings"] if f["kind"] == "token_out_of_vocab"]
        assert f["detail"]["vocab_size"] == 396 and f["detail"]["ids"] == [500] and f["anchor"] == "t-5"
        chip = d["messages"][1]["tokens"][1]
        assert chip["id"] == 500 and chip["piece"]["text"] == "not in the tokenizer (396 ids)"
        assert chip["piece"]["oov"] == 396
        page = client.get(f"/runs/r/rollouts/{rid}")
        assert page.status_code == 200
        (span,) = [s for s in page.text.split("<span ")[1:] if 'id="t-5"' in s]
        assert ">not in the tokenizer (396 ids)</span>" in span and 'data-oov="396"' in span
        assert "token out of vocabulary" in span  # the chip's finding flag
    ok = client.get("/runs/r/rollouts/fine.json").json()
    assert "token_out_of_vocab" not in {f["kind"] for f in ok["findings"]}
    assert ok["messages"][1]["tokens"][1]["piece"]["text"] != "not in the tokenizer (396 ids)"
    listed = client.get("/runs/r/rollouts.json?flag=token_out_of_vocab").json()["rollouts"]
    assert sorted(r["rollout_id"] for r in listed) == ["oov", "oov-bytes"]


def test_the_new_kinds_have_a_filter_and_a_series_per_step(client, engine, tmp_path):
    lp = behaviour(12)
    shifted = native({"role": "system", "ids": [BOS, BOS, 2, 300, 3]},
                     {"role": "assistant", "ids": list(range(20, 32)), "logprobs": lp,
                      "trainer_logprobs": lp[1:] + [None]}, rid="both")
    _load(engine, tmp_path, [shifted, _oov_rollout("clean", [302, 4])])
    run = client.get("/runs/r.json").json()
    bars = {t["name"] for t in run["charts"]["findings"]["data"]}
    assert {"logprob_shift", "duplicate_bos"} <= bars
    for kind in ("logprob_shift", "duplicate_bos"):
        assert [r["rollout_id"] for r in client.get(f"/runs/r/rollouts.json?flag={kind}").json()["rollouts"]] == [
            "both"], kind
    page = client.get("/runs/r/rollouts/both")
    assert page.status_code == 200 and "duplicate BOS" in page.text and "logprob shift" in page.text
    d = client.get("/runs/r/rollouts/both.json").json()
    (bos,) = [f for f in d["findings"] if f["kind"] == "duplicate_bos"]
    assert bos["node"] == 1 and bos["detail"]["requests"] == [1] and bos["detail"]["bos_node"] == 0
    table = {c["kind"]: c for c in run["checks"]}
    assert table["duplicate_bos"]["checked"] == 2 and table["duplicate_bos"]["rollouts"] == 1


# --- a SentencePiece model (the Tunix setup: the Mistral v1 model and three added tokens) ---------

SPM = data_path("tokenizers", "mistral-v1-tokenizer.model")
SPM_ADDED = {32000: "<pad>", 32001: "<start_of_turn>", 32002: "<end_of_turn>"}


@pytest.fixture(scope="module")
def spm() -> CheckContext:
    return load_context(SPM, SPM_ADDED)


def test_a_sentencepiece_tokenizer_gives_the_vocabulary_size_and_its_bos(spm):
    assert spm.vocab_size() == 32003 and spm.bos() == ("<s>", 1)
    assert load_context(SPM).vocab_size() == 32000  # the model's own pieces, without the added tokens
    r = native({"role": "user", "ids": [1, 733, 16289, 28793]}, {"role": "assistant", "ids": [22557, 32002, 32003]})
    (f,), _ = fired(r, "token_out_of_vocab", spm)
    assert f.node_idx == 1 and f.detail["ids"] == [32003] and f.detail["vocab_size"] == 32003
    assert f.detail["positions"] == [2]
    ok = native({"role": "user", "ids": [1, 733, 28793]}, {"role": "assistant", "ids": [22557, 32000, 32002]})
    assert fired(ok, "token_out_of_vocab", spm) == ([], [])  # the added tokens are in the vocabulary


def test_duplicate_bos_with_a_sentencepiece_tokenizer(spm):
    (f,), _ = fired(native({"role": "user", "ids": [1, 1, 733, 28793]}, {"role": "assistant", "ids": [22557, 2]}),
                    "duplicate_bos", spm)
    assert f.detail["bos_id"] == 1 and f.detail["bos_token"] == "<s>" and f.detail["leading_bos"] == 2
    assert fired(native({"role": "user", "ids": [1, 733, 28793]}, {"role": "assistant", "ids": [22557, 2]}),
                 "duplicate_bos", spm) == ([], [])


def test_a_sentencepiece_run_is_checked_at_ingest_and_at_recheck(client, engine, db_url, monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from app.cli import app

    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    rs = [native({"role": "user", "ids": [1, 1, 733, 28793]}, {"role": "assistant", "ids": [22557, 32003]},
                 rid="both"),
          native({"role": "user", "ids": [1, 733, 28793]}, {"role": "assistant", "ids": [22557, 32002]}, rid="clean")]
    added = [a for i, t in SPM_ADDED.items() for a in ("--added-token", f"{i}={t}")]
    res = CliRunner().invoke(app, ["ingest", "--run", "r", "--tokenizer", str(SPM), *added,
                                   str(write_jsonl(tmp_path / "in.jsonl", rs))])
    assert res.exit_code == 0, res.output
    for step in ("ingest", "recheck"):
        if step == "recheck":
            res = CliRunner().invoke(app, ["recheck", "--run", "r"])
            assert res.exit_code == 0, res.output
        both = client.get("/runs/r/rollouts/both.json").json()
        assert {f["kind"] for f in both["findings"]} >= {"token_out_of_vocab", "duplicate_bos"}, step
        clean = client.get("/runs/r/rollouts/clean.json").json()
        assert not {f["kind"] for f in clean["findings"]} & {"token_out_of_vocab", "duplicate_bos"}, step
        skipped = {s["kind"] for s in both["checks_skipped"] + clean["checks_skipped"]}
        assert not skipped & {"token_out_of_vocab", "duplicate_bos"}, (step, both["checks_skipped"])
