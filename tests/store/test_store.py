"""Ingest through the real pipeline into SQLite and Postgres: real Tunix and tau-bench files,
idempotency, quarantine of bad records, compact token arrays, and the CLI's exit codes."""
from __future__ import annotations

import json

import sqlalchemy as sa
from typer.testing import CliRunner

from app.cli import app as cli
from app.db import models
from app.db.tokenarrays import unpack_bits, unpack_floats, unpack_ids
from tests.conftest import data_path
from tests.helpers import ingest, rollout, write_jsonl

TUNIX = data_path("realdata", "tunix", "v0.1.7")
SUMMARY = json.loads((TUNIX / "summary.json").read_text())
STATUS_TO_ENDING = {"SUCCEEDED": None, "MAX_STEPS_REACHED": "truncated", "MAX_CONTEXT_LIMIT_REACHED": "truncated",
                    "TIMEOUT": "truncated", "ENV_TIMEOUT": "error"}


def rows(engine, table, *where):
    with engine.connect() as conn:
        return conn.execute(sa.select(table).where(*where)).all()


def test_every_tunix_file_ingests_with_source_values(engine):
    report = ingest(engine, TUNIX, run="tunix")
    assert report.ok, [str(e) for e in report.errors]
    skipped = {p.split("/")[-1] for p, _ in report.skipped}
    assert "summary.json" in skipped and all(s.endswith(".meta.json") or s == "summary.json" for s in skipped)
    R = models.Rollout.__table__
    by_file = {r.source_file.split("/")[-1]: r for r in rows(engine, R, R.c.run_id == "tunix")}
    for case in SUMMARY["cases"]:
        r, mode = by_file[case["file"]], case["mode"]
        if mode == "Conversation":  # a bare message list: no status, no reward
            assert (r.ending, r.reward, r.reward_status) == ("unknown", None, "unscored"), case["file"]
            continue
        assert r.reward == case["trajectory_reward"], case["file"]
        if mode in ("Trajectory", "Token"):
            assert r.ending_detail == case["status"], case["file"]
            expected = STATUS_TO_ENDING[case["status"]]
            assert r.ending == (expected or r.ending) and r.ending in ("submitted", "truncated", "error"), case["file"]
        if mode in ("Trajectory", "Steps"):
            assert r.n_turns == case["n_steps"], case["file"]
        if mode == "Token":
            assert r.n_trained_tokens == case["n_mask_ones"], case["file"]
            assert r.n_tokens >= case["n_conversation_tokens"], case["file"]
    # SUCCEEDED hides a truncation when the env forced done at its own max_steps
    assert by_file["max_steps_env_truncated.Trajectory.json"].ending == "truncated"
    assert by_file["submitted.Trajectory.json"].ending == "submitted"
    # orchestrator batches: two groups of three
    groups = {}
    for r in rows(engine, R, R.c.run_id == "tunix", R.c.source_file.like("%orchestrator_group.Trajectory.json")):
        groups.setdefault(r.group_id, []).append(r)
    assert {g: len(v) for g, v in groups.items()} == {"6": 3, "7": 3}


def test_token_arrays_are_compact_and_exact(engine):
    report = ingest(engine, TUNIX / "submitted.Trajectory.json", run="t")
    assert report.ok
    src = json.loads((TUNIX / "submitted.Trajectory.json").read_text())
    N = models.Node.__table__
    nodes = sorted(rows(engine, N), key=lambda n: n.idx)
    sampled = [n for n in nodes if n.sampled]
    first = sampled[0]
    assert list(unpack_ids(first.token_ids)) == src["steps"][0]["assistant_tokens"]
    assert unpack_bits(first.mask, first.n_tokens).tolist() == [bool(x) for x in src["steps"][0]["assistant_masks"]]
    lp = unpack_floats(first.logprobs)
    assert lp.dtype.itemsize == 4 and len(first.token_ids) == 4 * first.n_tokens
    assert abs(lp[0] - src["steps"][0]["logprobs"][0]) < 1e-6


def test_reingest_adds_nothing_and_changes_replace(engine, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [rollout(f"a{i}") for i in range(5)])
    first = ingest(engine, path)
    assert first.total.inserted == 5
    again = ingest(engine, path)
    assert again.total.inserted == 0 and again.total.unchanged == 5
    R = models.Rollout.__table__
    assert len(rows(engine, R)) == 5
    write_jsonl(path, [rollout(f"a{i}", reward=0.5 if i == 0 else 1.0) for i in range(5)])
    third = ingest(engine, path)
    assert third.total.replaced == 1 and third.total.unchanged == 4
    assert len(rows(engine, R)) == 5 and len(rows(engine, models.Node.__table__)) == 10
    assert {r.rollout_id: r.reward for r in rows(engine, R)}["a0"] == 0.5


def test_bad_records_are_quarantined_and_neighbours_kept(engine):
    for name, bad_line in (("11-torn-jsonl-tail.jsonl", 3), ("11b-malformed-middle-line.jsonl", 2)):
        report = ingest(engine, data_path("cases", name), run="c11")
        assert not report.ok
        assert [(e.line, e.file.endswith(name)) for e in report.errors] == [(bad_line, True)]
        assert report.total.inserted + report.total.unchanged == 2
    Q = models.Quarantine.__table__
    assert len(rows(engine, Q)) == 2
    ingest(engine, data_path("cases", "11-torn-jsonl-tail.jsonl"), run="c11")
    assert len(rows(engine, Q)) == 2  # re-ingest quarantines nothing new


def test_native_validation_error_names_line_and_field(engine, tmp_path):
    good = rollout("ok1").to_json_dict()
    bad = dict(good, id="bad1", nodes=[{"parent": None, "message": {"role": "robot", "content": "x"}}])
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in (good, bad, dict(good, id="ok2"))) + "\n")
    report = ingest(engine, path)
    assert report.total.inserted == 2
    (err,) = report.errors
    assert err.line == 2 and err.field == "nodes[0].message.role" and str(path) in str(err)


def test_cli_ingest_exit_codes_and_summary(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    runner = CliRunner()
    ok = runner.invoke(cli, ["ingest", str(data_path("realdata", "tau-bench")), "--run", "tau"])
    assert ok.exit_code == 0, ok.output
    assert "3 new" in ok.output
    again = runner.invoke(cli, ["ingest", str(data_path("realdata", "tau-bench")), "--run", "tau"])
    assert again.exit_code == 0 and "0 new" in again.output and "3 unchanged" in again.output
    bad = runner.invoke(cli, ["ingest", str(data_path("cases", "11b-malformed-middle-line.jsonl")), "--run", "c"])
    assert bad.exit_code == 1
    assert "11b-malformed-middle-line.jsonl:2" in bad.output
    notrace = tmp_path / "notes.txt"
    notrace.write_text("hello")
    assert runner.invoke(cli, ["ingest", str(notrace)]).exit_code == 1


def test_overlong_filtered_rollout_is_shown_but_trains_on_nothing(client, engine):
    assert ingest(engine, TUNIX / "max_steps_reached_overlong_filter.Token.json", run="t").ok
    d = client.get("/runs/t/rollouts/max_steps_reached_overlong_filter.Token.json").json()
    assert d["trains_on_nothing"] and d["rollout"]["n_trained_tokens"] == 0 and d["rollout"]["n_tokens"] > 0
    assert d["ending"]["type"] == "truncated" and d["ending"]["detail"] == "MAX_STEPS_REACHED"
    tokens = [t for m in d["messages"] for t in m["tokens"]]
    assert tokens and not any(t["trained"] for t in tokens)
    assert any(t["logprob"] is not None for t in tokens)  # behaviour logprobs kept
    assert "trains on nothing" in client.get("/runs/t/rollouts/max_steps_reached_overlong_filter.Token").text


def test_cli_quarantine_lists_and_clears(db_url, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    runner = CliRunner()
    bad = str(data_path("cases", "11b-malformed-middle-line.jsonl"))
    assert runner.invoke(cli, ["ingest", bad, "--run", "c"]).exit_code == 1
    listed = runner.invoke(cli, ["quarantine"])
    assert listed.exit_code == 0 and "11b-malformed-middle-line.jsonl" in listed.output
    cleared = runner.invoke(cli, ["quarantine", "--clear", "--file", bad])
    assert cleared.exit_code == 0 and "cleared 1 quarantined record" in cleared.output
    assert "nothing quarantined" in runner.invoke(cli, ["quarantine"]).output


def test_cli_refuses_bad_options(db_url, monkeypatch, tmp_path):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    runner = CliRunner()
    tau = str(data_path("realdata", "tau-bench"))
    assert runner.invoke(cli, ["ingest", tau, "--added-token", "5=x"]).exit_code == 2  # no --tokenizer
    tok = str(data_path("tokenizers", "mistral-v1-tokenizer.model"))
    assert runner.invoke(cli, ["ingest", tau, "--tokenizer", tok, "--added-token", "200000000=x"]).exit_code == 2
    assert runner.invoke(cli, ["ingest", tau, "--run", "bad\nrun"]).exit_code == 2
    assert runner.invoke(cli, ["ingest", tau, "--step", "99999999999"]).exit_code == 2
