"""`rollscope ingest --retry-quarantined` and the quarantine's identity (app/store/quarantine.py):
a retry reads the bytes a quarantined record came from (a rotated spool file is followed to
where it is now), one entry per file and line (a new rejection replaces the older one, from the
worker or the CLI alike), and a whole-file entry is cleared once the file is read record by record.
Real SQLite file and real Postgres; the real worker and the real CLI."""
from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa
from typer.testing import CliRunner

from app.cli import app as cli
from app.db import models
from app.worker.run import run
from ingest.formats.native import write_line
from tests.helpers import rollout

Q, R, S = models.Quarantine.__table__, models.Rollout.__table__, models.SpoolFile.__table__


def good(rid: str) -> bytes:
    return write_line(rollout(rid))


def bad(rid: str, step: str = "two") -> bytes:
    return (json.dumps(dict(rollout(rid).to_json_dict(), step=step)) + "\n").encode()


def entries(engine) -> list[tuple]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(Q.c.source_file, Q.c.line, Q.c.error)).all(),
                      key=lambda r: (r[0], r[1] or 0))


def stored(engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(R.c.rollout_id, R.c.source_file)).all())


def work(engine, *dirs: Path) -> None:
    run(engine, list(dirs), once=True, poll=0.05, log=lambda _m: None)


def test_a_retry_after_a_spool_rotation_reads_the_rotated_file_and_adds_no_copy(db_url, engine, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sp1").mkdir()
    (tmp_path / "elsewhere").mkdir()
    first = tmp_path / "sp1" / "a.jsonl"
    first.write_bytes(good("a1") + bad("a2"))
    work(engine, Path("sp1"))  # the worker reads it as `sp1/a.jsonl` (relative, as the QA ran it)
    assert [(f, n) for f, n, _ in entries(engine)] == [("sp1/a.jsonl", 2)]
    # rotation: a.jsonl → a.jsonl.1, a new a.jsonl with a bad record on the same line
    first.rename(tmp_path / "sp1" / "a.jsonl.1")
    (tmp_path / "sp1" / "a.jsonl").write_bytes(good("b1") + bad("b2"))
    work(engine, Path("sp1"))
    with engine.connect() as conn:
        names = dict(conn.execute(sa.select(S.c.path, S.c.name)).all())
    assert names == {"sp1/a.jsonl.1": "sp1/a.jsonl", "sp1/a.jsonl": "sp1/a.jsonl~2"}  # a name is one file's
    assert [(f, n) for f, n, _ in entries(engine)] == [("sp1/a.jsonl", 2), ("sp1/a.jsonl~2", 2)]

    runner = CliRunner()
    monkeypatch.chdir(tmp_path / "elsewhere")
    same = runner.invoke(cli, ["ingest", "--retry-quarantined"])  # nothing fixed: the same records rejected
    assert same.exit_code == 1, same.output
    assert "retrying 2 files" in same.output
    # one entry per file and line: the CLI's rejection replaced the worker's (another message)
    assert [(f, n) for f, n, _ in entries(engine)] == [("sp1/a.jsonl", 2), ("sp1/a.jsonl~2", 2)]

    # the rotated file's record is fixed in place: the retry reads a.jsonl.1, not the new a.jsonl
    (tmp_path / "sp1" / "a.jsonl.1").write_bytes(good("a1") + good("a2"))
    fixed = runner.invoke(cli, ["ingest", "--retry-quarantined"])
    assert fixed.exit_code == 1, fixed.output  # b2 is still bad
    assert stored(engine)["a2"] == "sp1/a.jsonl"  # known by its first name, as the worker stored a1
    assert [(f, n) for f, n, _ in entries(engine)] == [("sp1/a.jsonl~2", 2)]
    assert "1 quarantined record now stored" in fixed.stdout

    # deleted: said per file, and its entry stays (nothing is lost)
    (tmp_path / "sp1" / "a.jsonl").unlink()
    monkeypatch.chdir(tmp_path)
    work(engine, Path("sp1"))
    gone = runner.invoke(cli, ["ingest", "--retry-quarantined"])
    assert gone.exit_code == 0 and "nothing to retry" in gone.stdout, gone.output
    assert "not retried sp1/a.jsonl~2: the spool file was deleted (last at sp1/a.jsonl)" in gone.output
    assert [(f, n) for f, n, _ in entries(engine)] == [("sp1/a.jsonl~2", 2)]


def test_a_new_rejection_of_a_line_replaces_the_old_one(db_url, engine, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    runner = CliRunner()
    path = tmp_path / "r.jsonl"
    path.write_bytes(good("a") + bad("b", step="two") + bad("c", step="three"))
    assert runner.invoke(cli, ["ingest", str(path)]).exit_code == 1
    before = entries(engine)
    assert [n for _, n, _ in before] == [2, 3]
    # another error on line 2
    path.write_bytes(good("a") + b'{"schema": "rollscope/1", "id": \n' + bad("c", step="three"))
    assert runner.invoke(cli, ["ingest", "--retry-quarantined"]).exit_code == 1
    after = entries(engine)
    assert [n for _, n, _ in after] == [2, 3] and after[0][2] != before[0][2]  # the latest error, once
    assert after[1] == before[1]
    assert runner.invoke(cli, ["ingest", str(path)]).exit_code == 1 and entries(engine) == after  # the same again


def test_a_whole_file_entry_is_cleared_once_the_file_is_read_record_by_record(db_url, engine, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    runner = CliRunner()
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"neither": "a rollout"}\n')  # no reader knows it: rejected as a whole
    assert runner.invoke(cli, ["ingest", str(path)]).exit_code == 1
    assert [n for _, n, _ in entries(engine)] == [None]
    path.write_bytes(good("a") + bad("b"))
    again = runner.invoke(cli, ["ingest", "--retry-quarantined"])
    assert again.exit_code == 1, again.output
    assert [(Path(f).name, n) for f, n, _ in entries(engine)] == [("r.jsonl", 2)]  # the whole-file entry went
    path.write_bytes(good("a") + good("b"))
    assert runner.invoke(cli, ["ingest", "--retry-quarantined"]).exit_code == 0
    assert entries(engine) == [] and sorted(stored(engine)) == ["a", "b"]


def test_the_worker_clears_its_whole_file_entry_when_the_file_is_rewritten_readable(engine, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    f = spool / "w.jsonl"
    f.write_bytes(b'{"neither": "a rollout"}\n')
    work(engine, spool)
    assert [n for _, n, _ in entries(engine)] == [None]
    f.write_bytes(good("a") + bad("b"))  # rewritten (its first bytes changed): read again, line by line
    work(engine, spool)
    assert [(f_, n) for f_, n, _ in entries(engine)] == [(str(f), 2)] and list(stored(engine)) == ["a"]
