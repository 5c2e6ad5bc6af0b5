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
