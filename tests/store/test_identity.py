"""Identity and the database, never surprising: the summary names what was replaced, a fixed
record clears its quarantine entry, and every command finds and names the same database from
any folder."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import sqlalchemy as sa
from typer.testing import CliRunner

from app.cli import app as cli
from app.db import models
from tests.conftest import ROOT
from tests.helpers import rollout, write_jsonl


def test_summary_names_replaced_and_cleared(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    runner = CliRunner()
    path = tmp_path / "r.jsonl"
    good = [rollout("a").to_json_dict(), rollout("b").to_json_dict()]
    bad = dict(good[1], nodes=[{"message": {"role": "robot", "content": "x"}}])
    path.write_text(json.dumps(good[0]) + "\n" + json.dumps(bad) + "\n")
    first = runner.invoke(cli, ["ingest", str(path)])
    assert first.exit_code == 1 and "1 new" in first.stdout
    # the bad record is fixed and a changed one replaces only itself
    changed = dict(good[0], reward=0.25)
    path.write_text(json.dumps(changed) + "\n" + json.dumps(good[1]) + "\n")
    second = runner.invoke(cli, ["ingest", str(path)])
    assert second.exit_code == 0, second.output
    assert "replaced (same id, changed content): r1/a" in second.stdout
    assert "1 quarantined record now stored: cleared from the quarantine" in second.stdout
    assert "1 new, 1 replaced, 0 unchanged" in second.stdout
    from app.db.engine import make_engine

    eng = make_engine(db_url)
    with eng.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(models.Quarantine.__table__)).scalar_one() == 0
    eng.dispose()


def test_every_command_names_its_database_first_and_finds_the_same_one_from_any_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLSCOPE_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")  # platformdirs' user data folder
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    data = write_jsonl(here / "r.jsonl", [rollout("a")])

    def rs(*args, cwd):
        return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=cwd, env={**env, "PYTHONPATH": str(ROOT)},
                              capture_output=True, text=True, timeout=120)

    a = rs("ingest", str(data), cwd=here)
    expected = f"database: sqlite:///{tmp_path / 'data' / 'rollscope' / 'rollscope.db'}"
    assert a.returncode == 0 and a.stderr.splitlines()[0] == expected, a.stderr
    b = rs("quarantine", cwd=there)
    assert b.stderr.splitlines()[0] == expected
    c = rs("ingest", str(data), cwd=there)
    assert "0 new" in c.stdout and "1 unchanged" in c.stdout  # the same database, from another folder
    d = rs("--db", f"sqlite:///{tmp_path / 'other.db'}", "ingest", str(data), cwd=there)
    assert d.stderr.splitlines()[0] == f"database: sqlite:///{tmp_path / 'other.db'}" and "1 new" in d.stdout
    (there / "rollscope.db").touch()  # a ./rollscope.db wins over the data folder
    e = rs("quarantine", cwd=there)
    assert e.stderr.splitlines()[0] == f"database: sqlite:///{there / 'rollscope.db'}"


def test_retry_quarantined_reads_the_files_again_after_a_fix(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    runner = CliRunner()
    good = rollout("a").to_json_dict()
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(dict(good, id="b", step="two")) + "\n")
    assert runner.invoke(cli, ["ingest", str(path)]).exit_code == 1
    path.write_text(json.dumps(good) + "\n" + json.dumps(dict(good, id="b", step=2)) + "\n")  # fixed
    again = runner.invoke(cli, ["ingest", "--retry-quarantined"])
    assert again.exit_code == 0, again.output
    assert "1 new, 0 replaced, 1 unchanged" in again.stdout and "cleared from the quarantine" in again.stdout
    assert runner.invoke(cli, ["ingest"]).exit_code == 2
