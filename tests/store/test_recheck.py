"""`rollscope recheck`: rollouts stored before a check existed get its findings without
re-ingesting, labels survive, and a later re-ingest of the same file adds nothing."""
from __future__ import annotations

import sqlalchemy as sa
from typer.testing import CliRunner

from app.cli import app
from app.db import models
from tests.conftest import FIXTURES
from tests.helpers import ingest

F = models.Finding.__table__
R = models.Rollout.__table__
L = models.Label.__table__
TAU = FIXTURES / "realdata" / "tau-bench"


def findings(engine) -> list[tuple]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(R.c.rollout_id, F.c.kind, F.c.node_idx, F.c.position)
                                   .join(R, R.c.pk == F.c.rollout_pk).where(R.c.run_id == "tau")).all())


def test_recheck_restores_findings_and_keeps_labels(engine, db_url, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    ingest(engine, TAU, run="tau")
    before = findings(engine)
    assert any(kind == "duplicate_tool_call_id" for _, kind, _, _ in before)
    with engine.begin() as conn:  # as if stored before the checks existed
        conn.execute(F.delete())
        some_id = conn.execute(sa.select(R.c.rollout_id).where(R.c.run_id == "tau").limit(1)).scalar_one()
        conn.execute(L.insert().values(run_id="tau", rollout_id=some_id, label="reward-hacking", author="alice",
                                       created_at=models.utcnow()))
        n_rollouts = conn.execute(sa.select(sa.func.count()).select_from(R)).scalar_one()
    assert findings(engine) == []

    res = CliRunner().invoke(app, ["recheck", "--run", "tau"])
    assert res.exit_code == 0, res.output
    assert f"re-checked {n_rollouts} rollouts of tau" in res.output
    assert findings(engine) == before
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(R)).scalar_one() == n_rollouts
        assert conn.execute(sa.select(L.c.rollout_id)).scalar_one() == some_id

    again = ingest(engine, TAU, run="tau").total  # the re-checked rows are what the file holds
    assert (again.inserted, again.replaced) == (0, 0) and again.unchanged == n_rollouts


def test_recheck_of_unknown_run_exits_2(engine, db_url, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    res = CliRunner().invoke(app, ["recheck", "--run", "nope"])
    assert res.exit_code == 2 and "has no stored rollouts" in res.output


CASE38 = FIXTURES / "cases" / "38-pad-tokens-trained-without-eos.jsonl"
LLAMA = FIXTURES / "cases" / "tok-llama3ish"  # <|pad|> 5, a Llama-3-like chat template
TOKENIZER_CHECKS = ("token_out_of_vocab", "duplicate_bos", "template_mismatch", "mask_on_padding",
                    "stop_reason_mismatch")


def checks_of(client, run: str, rid: str) -> tuple[list[dict], list[dict]]:
    d = client.get(f"/runs/{run}/rollouts/{rid}.json").json()
    return d["findings"], d["checks_skipped"]


def test_recheck_without_tokenizer_uses_the_one_stored_with_the_run(client, engine, db_url, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    res = CliRunner().invoke(app, ["ingest", "--run", "c38", "--tokenizer", str(LLAMA), str(CASE38)])
    assert res.exit_code == 0, res.output
    at_ingest = {rid: checks_of(client, "c38", rid) for rid in ("c38-pad", "c38-eos")}
    (pad,) = [f for f in at_ingest["c38-pad"][0] if f["kind"] == "mask_on_padding"]
    assert pad["detail"]["pad_token"] == "<|pad|>" and pad["detail"]["why"][0] == "pad"

    res = CliRunner().invoke(app, ["recheck", "--run", "c38"])
    assert res.exit_code == 0, res.output
    after = {rid: checks_of(client, "c38", rid) for rid in ("c38-pad", "c38-eos")}
    assert after == at_ingest  # the same findings and the same skips as at ingest
    (pad,) = [f for f in after["c38-pad"][0] if f["kind"] == "mask_on_padding"]
    assert pad["detail"]["pad_token"] == "<|pad|>" and pad["detail"]["pad_id"] == 5
    assert "<|pad|>" in pad["message"]
    for findings_, skipped in after.values():
        reasons = [s["reason"] for s in skipped if s["kind"] in TOKENIZER_CHECKS]
        assert not [r for r in reasons if "no tokenizer" in r or "no chat template" in r], reasons
    page = client.get("/runs/c38.json").json()  # the run page's table of which checks could not decide
    reasons = [s["reason"] for c in page["checks"] if c["kind"] in TOKENIZER_CHECKS for s in c["skip_reasons"]]
    assert not [r for r in reasons if "no tokenizer" in r or "no chat template" in r], reasons
    assert page["chat_template"] is True


def test_recheck_of_a_run_without_tokenizer_still_says_so(engine, db_url, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    ingest(engine, CASE38, run="bare")
    res = CliRunner().invoke(app, ["recheck", "--run", "bare"])
    assert res.exit_code == 0, res.output
    with engine.connect() as conn:
        kinds = set(conn.execute(sa.select(F.c.kind).join(R, R.c.pk == F.c.rollout_pk)
                                 .where(R.c.run_id == "bare")).scalars())
    assert "mask_on_padding" in kinds  # decided from the output tokens alone, as at ingest


def test_recheck_of_a_tokenizer_stored_before_its_source_was_kept(client, engine, db_url, monkeypatch):
    """A tokenizer row from before migration 0015 has a vocabulary and a template but no encoder:
    the checks that need only the vocabulary still decide; the template check says why not."""
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    res = CliRunner().invoke(app, ["ingest", "--run", "old", "--tokenizer", str(LLAMA), str(CASE38)])
    assert res.exit_code == 0, res.output
    with engine.begin() as conn:
        conn.execute(models.Tokenizer.__table__.update().values(source=None))
    res = CliRunner().invoke(app, ["recheck", "--run", "old"])
    assert res.exit_code == 0, res.output
    findings_, skipped = checks_of(client, "old", "c38-pad")
    (pad,) = [f for f in findings_ if f["kind"] == "mask_on_padding"]
    assert pad["detail"]["pad_token"] == "<|pad|>"  # a special token of the stored vocabulary
    reasons = {s["kind"]: s["reason"] for s in skipped}
    assert "token_out_of_vocab" not in reasons and "duplicate_bos" not in reasons
    assert "stored before its encoder was kept" in reasons["template_mismatch"]


def _finding_rows(engine, run: str) -> list[tuple]:
    with engine.connect() as conn:
        return sorted(conn.execute(
            sa.select(R.c.rollout_id, F.c.kind, F.c.severity, F.c.node_idx, F.c.position, F.c.message, F.c.detail)
            .join(R, R.c.pk == F.c.rollout_pk).where(R.c.run_id == run)).all(), key=repr)


# Full-precision logprobs (vLLM writes float64), a NaN behaviour logprob (non-strict JSON, on
# purpose), NUL in a message, trainer logprobs with NaN, non-finite loss weights: each stored in
# another form than the source's (float32, null, U+FFFD, "NaN", null), each read back by recheck.
AS_STORED = (
    '{"schema": "rollscope/1", "id": "p", "run": {"id": "prec"}, "step": 1, "nodes": ['
    '{"message": {"role": "user", "content": "a\\u0000b"}, "token_ids": [1, 2], "mask": [0, 0]}, '
    '{"parent": 0, "message": {"role": "assistant", "content": "yo"}, "sampled": true, "token_ids": [3, 4, 5, 6], '
    '"mask": [1, 1, 1, 1], "logprobs": [-0.123456789012345, NaN, -1.0000000000000002e-07, null], '
    '"advantages": [0.333333333333333, 0.333333333333333, 0.333333333333333, 0.333333333333333], '
    '"loss_weights": {"w": [1.0, NaN, 1.0, Infinity]}, '
    '"trainer_logprobs": [-0.12345678, NaN, -2.5e-07, -0.5]}]}\n')


def test_a_rechecked_rollout_reingested_as_it_was_is_unchanged_with_the_same_findings(engine, db_url, tmp_path,
                                                                                       monkeypatch):
    """recheck stores what it read back (float32 logprobs, nulls, U+FFFD): its content hash is the
    source's (the hash is of the stored parts), and it finds what ingest found, the
    `invalid_logprob` of a NaN logprob (stored as a marked NaN, not as a null) included."""
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    src = tmp_path / "prec.jsonl"
    src.write_text(AS_STORED)
    assert ingest(engine, src).total.inserted == 1
    at_ingest = _finding_rows(engine, "prec")
    invalid = [f for f in at_ingest if f.kind == "invalid_logprob"]
    assert {(f.detail["array"], f.position) for f in invalid} == {("logprobs", 1), ("trainer_logprobs", 1)}

    res = CliRunner().invoke(app, ["recheck", "--run", "prec"])
    assert res.exit_code == 0, res.output
    assert _finding_rows(engine, "prec") == at_ingest

    again = ingest(engine, src).total
    assert (again.inserted, again.replaced, again.unchanged) == (0, 0, 1), again.outcomes
    res = CliRunner().invoke(app, ["recheck", "--run", "prec"])  # and again: nothing drifts
    assert res.exit_code == 0, res.output
    assert _finding_rows(engine, "prec") == at_ingest
    assert ingest(engine, src).total.unchanged == 1


def test_recheck_of_a_run_of_several_batches(engine, db_url, tmp_path, monkeypatch):
    """More rollouts than one batch: each page is read and its read closed before the batch is
    written (a SQLite writer engine's open read held the write lock: "database is locked" after
    the 30 s busy timeout)."""
    from tests.helpers import rollout, write_jsonl

    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    monkeypatch.setenv("ROLLSCOPE_WORKER__BATCH_SIZE", "40")
    src = write_jsonl(tmp_path / "big.jsonl", [rollout(f"b{k:03d}", run="big", step=k // 20) for k in range(130)])
    assert ingest(engine, src).total.inserted == 130
    before = _finding_rows(engine, "big")
    res = CliRunner().invoke(app, ["recheck", "--run", "big"])
    assert res.exit_code == 0, res.output
    assert "re-checked 130 rollouts of big" in res.output
    assert _finding_rows(engine, "big") == before
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(R).where(R.c.run_id == "big")).scalar_one() == 130
    assert ingest(engine, src).total.unchanged == 130
