"""Identity and the database, never surprising: the summary names what was replaced, a fixed
record clears its quarantine entry, and every command finds and names the same database from
any folder."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
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


@pytest.mark.slow
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
    d2 = rs("ingest", str(data), f"--db=sqlite:///{tmp_path / 'other.db'}", cwd=there)  # after the command too
    assert d2.stderr.splitlines()[0] == f"database: sqlite:///{tmp_path / 'other.db'}" and "1 unchanged" in d2.stdout
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


def _chat_lines(*answers: str) -> str:
    """Chat-format JSONL without ids: each record's id is derived from its file and line."""
    return "".join(json.dumps({"messages": [{"role": "user", "content": "2+2?"},
                                            {"role": "assistant", "content": a}]}) + "\n" for a in answers)


def _ids(db_url: str) -> list[str]:
    from app.db.engine import make_engine

    eng = make_engine(db_url)
    with eng.connect() as conn:
        ids = sorted(conn.execute(sa.select(models.Rollout.__table__.c.rollout_id)).scalars())
    eng.dispose()
    return ids


def test_same_named_files_in_two_folders_keep_both_and_a_reingest_adds_nothing(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    runner = CliRunner()
    root = tmp_path / "dumps"
    for step in (0, 1):
        (root / f"step_{step}").mkdir(parents=True)
        (root / f"step_{step}" / "rollouts.jsonl").write_text(_chat_lines(f"{step}a", f"{step}b"))
    first = runner.invoke(cli, ["ingest", "--run", "r", str(root)])
    assert first.exit_code == 0, first.output
    assert "4 new, 0 replaced, 0 unchanged" in first.stdout
    assert _ids(db_url) == ["step_0/rollouts#0", "step_0/rollouts#1", "step_1/rollouts#0", "step_1/rollouts#1"]
    again = runner.invoke(cli, ["ingest", "--run", "r", str(root)])
    assert again.exit_code == 0 and "0 new, 0 replaced, 4 unchanged" in again.stdout, again.output
    # the same tree ingested from another working folder, by a relative path: the same ids
    monkeypatch.chdir(tmp_path)
    third = runner.invoke(cli, ["ingest", "--run", "r", "dumps"])
    assert "0 new, 0 replaced, 4 unchanged" in third.stdout, third.output
    assert len(_ids(db_url)) == 4


def test_per_step_files_given_by_name_with_their_step_do_not_replace_each_other(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    runner = CliRunner()
    for step in (0, 1):
        (tmp_path / f"s{step}").mkdir()
        (tmp_path / f"s{step}" / "rollouts.jsonl").write_text(_chat_lines("4", "5"))
    a = runner.invoke(cli, ["ingest", "--run", "r", "--step", "0", str(tmp_path / "s0" / "rollouts.jsonl")])
    b = runner.invoke(cli, ["ingest", "--run", "r", "--step", "1", str(tmp_path / "s1" / "rollouts.jsonl")])
    assert "2 new, 0 replaced" in a.stdout and "2 new, 0 replaced" in b.stdout, b.output
    assert _ids(db_url) == ["rollouts@step0#0", "rollouts@step0#1", "rollouts@step1#0", "rollouts@step1#1"]


def test_retry_quarantined_derives_ids_as_the_folder_ingest_did(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    runner = CliRunner()
    (tmp_path / "d" / "a").mkdir(parents=True)
    path = tmp_path / "d" / "a" / "rollouts.jsonl"
    path.write_text(_chat_lines("4") + '{"messages": [{"role": "user", "content": 7}]\n')  # torn line
    assert runner.invoke(cli, ["ingest", "--run", "r", str(tmp_path / "d")]).exit_code == 1
    path.write_text(_chat_lines("4", "5"))  # fixed
    again = runner.invoke(cli, ["ingest", "--run", "r", "--retry-quarantined"])
    assert again.exit_code == 0, again.output
    assert "1 new, 0 replaced, 1 unchanged" in again.stdout, again.output
    assert _ids(db_url) == ["a/rollouts#0", "a/rollouts#1"]


def test_retry_quarantined_reads_each_file_as_it_was_first_ingested(db_url, tmp_path, monkeypatch):
    """The retry keeps the first ingest's --run, --step and working folder (a relative path),
    whatever folder and options it is run with: nothing lands in another run."""
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    runner = CliRunner()
    (tmp_path / "data").mkdir()
    (tmp_path / "elsewhere").mkdir()
    path = tmp_path / "data" / "h.jsonl"
    path.write_text(_chat_lines("4") + '{"messages": [{"role": "user", "content": 7}]\n')
    monkeypatch.chdir(tmp_path / "data")
    assert runner.invoke(cli, ["ingest", "--run", "h-hostile", "--step", "5", "h.jsonl"]).exit_code == 1
    path.write_text(_chat_lines("4", "5"))  # fixed
    monkeypatch.chdir(tmp_path / "elsewhere")
    again = runner.invoke(cli, ["ingest", "--retry-quarantined"])
    assert again.exit_code == 0, again.output
    assert "retrying 1 file" in again.output and "1 new, 0 replaced, 1 unchanged" in again.stdout, again.output
    assert "runs: h-hostile" in again.stdout and "cleared from the quarantine" in again.stdout
    from app.db.engine import make_engine

    eng = make_engine(db_url)
    with eng.connect() as conn:
        R = models.Rollout.__table__
        assert sorted(conn.execute(sa.select(R.c.run_id, R.c.step, R.c.rollout_id)).all()) == [
            ("h-hostile", 5, "h@step5#0"), ("h-hostile", 5, "h@step5#1")]
    eng.dispose()
    nothing = runner.invoke(cli, ["ingest", "--retry-quarantined"])
    assert nothing.exit_code == 0 and "nothing to retry" in nothing.stdout, nothing.output


def test_an_id_in_two_files_of_one_ingest_is_the_later_files_and_a_reingest_rewrites_nothing(db_url, tmp_path,
                                                                                            monkeypatch):
    # Two files of one folder carry the same rollout ids with different content (prime-rl's
    # `all` and `effective` copies, or three verifiers files forced into one run with --run).
    # The later file's record wins, counted as repeated, not replaced; ingesting the folder
    # again must add and rewrite nothing (it replaced every id back and forth, 8 each time).
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    runner = CliRunner()
    folder = tmp_path / "two"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", [rollout(f"x{i}", reward=0.0) for i in range(3)])
    write_jsonl(folder / "b.jsonl", [rollout(f"x{i}", reward=1.0) for i in range(3)])
    first = runner.invoke(cli, ["ingest", str(folder)])
    assert first.exit_code == 0, first.output
    assert "3 new, 0 replaced, 0 unchanged" in first.stdout
    assert "3 records repeated a rollout id already read in this ingest (the later one wins)" in first.output

    from app.db.engine import make_engine

    eng = make_engine(db_url)
    R = models.Rollout.__table__

    def stored():
        with eng.connect() as conn:
            return sorted(conn.execute(sa.select(R.c.rollout_id, R.c.pk, R.c.reward, R.c.source_file)).all())

    before = stored()
    assert [(r.reward, r.source_file) for r in before] == [(1.0, str(folder / "b.jsonl"))] * 3
    for _ in range(2):
        again = runner.invoke(cli, ["ingest", str(folder)])
        assert again.exit_code == 0, again.output
        assert "0 new, 0 replaced, 3 unchanged" in again.stdout and "replaced (same id" not in again.stdout
        assert stored() == before  # same rows, same keys: nothing rewritten
    eng.dispose()
