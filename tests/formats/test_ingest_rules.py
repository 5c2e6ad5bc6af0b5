"""Rules a fresh user relies on, through `rollscope ingest` (the CLI, a real database): one default
run for a record without one in every format, rejections that name the field, and an ATIF
continuation file never dropped without a word."""
from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from app.cli import app
from tests.conftest import FIXTURES

ATIF = FIXTURES / "realdata" / "atif"


def run_cli(db_url, monkeypatch, *args):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    return CliRunner().invoke(app, ["ingest", *map(str, args)])


def file_cells(output: str) -> str:
    """The summary table's file column, its wrapped lines joined."""
    return " ".join(ln.split("│")[1].strip() for ln in output.splitlines() if ln.startswith("│"))


def runs(engine) -> dict[str, int]:
    from sqlalchemy import text
    with engine.connect() as c:
        return dict(c.execute(text("SELECT run_id, count(*) FROM rollout GROUP BY run_id")).all())


def test_a_native_record_without_a_run_goes_to_the_folders_run_like_a_chat_record(engine, db_url, monkeypatch,
                                                                                   tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    native = {"schema": "rollscope/1", "id": "n1",
              "nodes": [{"message": {"role": "user", "content": "hi"}}]}
    (folder / "nat.jsonl").write_text(json.dumps(native) + "\n")
    (folder / "nat_array.json").write_text(json.dumps([{**native, "id": "n2"}]))
    (folder / "chat.jsonl").write_text(json.dumps({"id": "c1", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    res = run_cli(db_url, monkeypatch, folder)
    assert res.exit_code == 0, res.output
    assert "runs: bad" in res.output and runs(engine) == {"bad": 3}
    # --run still overrides everything, a record's own run included
    (folder / "own.jsonl").write_text(json.dumps({**native, "id": "n3", "run": {"id": "mine"}}) + "\n")
    res = run_cli(db_url, monkeypatch, "--run", "forced", folder)
    assert res.exit_code == 0, res.output
    assert runs(engine)["forced"] == 4


def test_a_record_of_the_wrong_shape_is_rejected_with_its_field_named(engine, db_url, monkeypatch, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "arr.json").write_text(json.dumps([
        {"id": "ok", "messages": [{"role": "user", "content": "hi"}]},
        {"id": "b1", "messages": "notalist"},
        {"id": "b2", "messages": ["notamessage"]},
        {"id": "b3", "prompt": "no messages at all"},
    ]))
    res = run_cli(db_url, monkeypatch, "--verbose", folder / "arr.json")
    assert res.exit_code == 1, res.output
    out = " ".join(res.output.split())
    assert "arr.json: [1].messages: must be an array, got string" in out
    assert "arr.json: [2].messages[0]: must be a message object" in out
    assert "arr.json: [3].messages: missing: a chat record has one of messages," in out
    assert runs(engine) == {"bad": 1}


def test_a_native_line_in_a_verifiers_body_over_http_names_the_missing_field(client, engine):
    from app import auth
    write, _ = auth.issue(engine, "write")
    episode = {"id": "e1", "env": "math", "traces": [{"id": "t1", "nodes": [], "calls": [], "rewards": {}}]}
    native = {"schema": "rollscope/1", "id": "n1", "run": {"id": "r"},
              "nodes": [{"message": {"role": "user", "content": "hi"}}]}
    body = (json.dumps(episode) + "\n" + json.dumps(native) + "\n").encode()
    r = client.post("/api/v1/ingest?format=verifiers", content=body, headers={"Authorization": f"Bearer {write}"})
    assert r.status_code == 200, r.text
    bad = [x for x in r.json()["results"] if x["status"] == "rejected"]
    assert [(x["line"], x["field"]) for x in bad] == [(2, "traces")], r.text
    assert "missing: a verifiers Episode has id, traces" in bad[0]["error"]


def test_an_atif_continuation_given_alone_is_stored_whole_and_merged_when_its_first_part_is_given(
        engine, db_url, monkeypatch, tmp_path):
    from sqlalchemy import text

    folder = tmp_path / "atif"
    folder.mkdir()
    for part in ("part1", "part2"):
        shutil.copy(ATIF / f"max_turns.{part}.trajectory.json", folder)
    part2 = folder / "max_turns.part2.trajectory.json"
    res = run_cli(db_url, monkeypatch, part2)
    assert res.exit_code == 0, res.output
    assert "part2.trajectory.json (continuation of max_turns.part1.trajectory.json, not given in this ingest: " \
           "stored rollout 'traj-max-turns-1'" in file_cells(res.output), res.output
    assert "1 new" in res.output and runs(engine) == {"atif": 1}
    with engine.connect() as c:
        assert c.execute(text("SELECT rollout_id FROM rollout")).scalars().all() == ["traj-max-turns-1"]
    # both parts in one ingest: part 1 reads the chain, part 2's row says where its steps went
    res = run_cli(db_url, monkeypatch, folder / "max_turns.part1.trajectory.json", part2)
    assert res.exit_code == 0, res.output
    assert "part2.trajectory.json (continuation of max_turns.part1.trajectory.json: merged into rollout " \
           "'traj-max-turns-1')" in file_cells(res.output), res.output
    assert "0 new, 0 replaced, 1 unchanged" in res.output and runs(engine) == {"atif": 1}


def test_nemo_gym_and_verl_lines_of_the_wrong_shape_name_the_field(engine, db_url, monkeypatch, tmp_path):
    nemo = tmp_path / "nemo.jsonl"
    nemo.write_text("\n".join(json.dumps(x) for x in [
        {"responses_create_params": {"input": []}, "response": {"output": []}, "reward": 1.0},
        {"responses_create_params": {"input": []}, "response": {"output": "text"}},
        {"responses_create_params": {"input": []}, "response": "text"}]) + "\n")
    verl = tmp_path / "verl.jsonl"
    verl.write_text("\n".join(json.dumps(x) for x in [
        {"prompt_ids": [1, 2], "response_ids": [3]},
        {"prompt_ids": [1, 2], "response_ids": "3"},
        {"input": "q", "output": 7, "score": 1}]) + "\n")
    res = run_cli(db_url, monkeypatch, "--verbose", "--run", "x", nemo, verl)
    out = " ".join(res.output.split())
    assert "nemo.jsonl:2: response.output: must be an array, got string" in out, res.output
    assert "nemo.jsonl:3: response: must be an object, got string" in out
    assert "verl.jsonl:2: response_ids: must be an array, got string" in out
    assert "verl.jsonl:3: output: must be a string, got number" in out
