"""A quarantine entry's life (app/store/quarantine.py): it keeps its run, where it came from and
when it was first and last rejected; the same rejection again moves `last_seen` on; a read of
the whole file that no longer rejects it deletes it (the CLI reading the file again, the
worker reading a rewritten file again from the start), and a read of a stretch never does."""
from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from typer.testing import CliRunner

from app.cli import app as cli
from app.db import models
from app.worker.run import run as run_worker
from app.worker.spool import Spool
from tests.helpers import ingest, rollout

Q, S = models.Quarantine.__table__, models.SpoolFile.__table__
BAD = b'{"schema": "rollscope/1", "id": "broken", "nodes": [\n'  # JSON cut short: rejected by line


def line(rid: str) -> bytes:
    from ingest.formats.native import write_line

    return write_line(rollout(rid))


def entries(engine, name: str | None = None) -> list:
    with engine.connect() as conn:
        stmt = sa.select(Q).order_by(Q.c.source_file, Q.c.line)
        return conn.execute(stmt if name is None else stmt.where(Q.c.source_file == name)).all()


def test_cli_reingest_after_the_bad_line_is_deleted_clears_its_entry(db_url, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    monkeypatch.chdir(tmp_path)
    f = Path("rollouts.jsonl")
    # the bad line last: no record lands on its line afterwards, so only the whole read can clear it
    f.write_bytes(line("a") + line("b") + BAD)
    runner = CliRunner()
    assert runner.invoke(cli, ["ingest", str(f), "--run", "given"]).exit_code == 1
    engine = sa.create_engine(db_url)
    try:
        [q] = entries(engine)
        assert (q.source_file, q.line, q.run_id, q.source) == ("rollouts.jsonl", 3, "given", "rollouts.jsonl")
        assert q.first_seen == q.last_seen

        # the same file again: the same rejection, seen again; one entry, first seen kept
        assert runner.invoke(cli, ["ingest", str(f), "--run", "given"]).exit_code == 1
        [again] = entries(engine)
        assert again.pk == q.pk and again.first_seen == q.first_seen and again.last_seen > q.last_seen

        listed = runner.invoke(cli, ["quarantine"], terminal_width=200)
        assert listed.exit_code == 0
        row = next(r for r in listed.output.splitlines() if "rollouts.jsonl" in r)
        assert "given" in row and "file" in row and row.count(f"{q.first_seen:%Y-%m-%d}") == 2

        f.write_bytes(line("a") + line("b"))  # the bad line deleted
        res = runner.invoke(cli, ["ingest", str(f), "--run", "given"])
        assert res.exit_code == 0, res.output
        assert "1 quarantined record no longer in its file: cleared from the quarantine" in res.output
        assert entries(engine) == []
        assert "nothing quarantined" in runner.invoke(cli, ["quarantine"]).output
    finally:
        engine.dispose()


def test_a_whole_read_keeps_what_it_rejects_again_and_other_files_entries(engine, tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(line("a1") + BAD + line("a2") + BAD)
    b.write_bytes(line("b1") + BAD)
    assert not ingest(engine, a, b).ok
    assert [(Path(q.source_file).name, q.line) for q in entries(engine)] == [("a.jsonl", 2), ("a.jsonl", 4),
                                                                           ("b.jsonl", 2)]
    a.write_bytes(line("a1") + BAD + line("a2"))  # the second bad line deleted, the first still there
    assert not ingest(engine, a).ok
    assert [(Path(q.source_file).name, q.line) for q in entries(engine)] == [("a.jsonl", 2), ("b.jsonl", 2)]
    a.write_bytes(line("a1"))  # one line left: nothing lands on line 2, the whole read clears it
    assert ingest(engine, a).ok
    assert [Path(q.source_file).name for q in entries(engine)] == ["b.jsonl"]


def _drain(engine, spool: Path, log: list[str]) -> None:
    ran = run_worker(engine, [spool], once=True, poll=0.01, log=log.append, settle=0.0, torn_after=3600)
    assert not ran.left, ran.left


def test_worker_rereading_a_rewritten_file_clears_what_it_no_longer_holds(engine, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    f = spool / "live.jsonl"
    f.write_bytes(line("a") + BAD + line("b"))
    log: list[str] = []
    _drain(engine, spool, log)
    [q] = entries(engine)
    assert (q.source_file, q.line, q.source, q.run_id) == (str(f), 2, str(f), None)

    # a stretch read (the file grew) says nothing of line 2: the entry stays
    with f.open("ab") as out:
        out.write(line("c"))
    _drain(engine, spool, log)
    assert [e.pk for e in entries(engine)] == [q.pk]
    with engine.connect() as conn:
        assert conn.execute(sa.select(S.c.read_from)).scalar_one() is None  # the first read reached the end

    # rewritten without the bad line (its first bytes change): read again from the start, to its end
    f.write_bytes(line("z") + line("a") + line("b") + line("c"))
    _drain(engine, spool, log)
    assert entries(engine) == []
    assert any("its first bytes changed; reading it again from the start" in m for m in log), log
    with engine.connect() as conn:
        row = conn.execute(sa.select(S)).one()
    assert row.last_error is None and row.notice.endswith("read again from the start") and row.read_from is None


def test_worker_read_from_the_start_that_has_not_reached_the_end_clears_nothing(engine, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    f = spool / "big.jsonl"
    f.write_bytes(line("a") + BAD + b"".join(line(f"r{i}") for i in range(5)))
    _drain(engine, spool, [])
    [q] = entries(engine)
    f.write_bytes(line("new") + b"".join(line(f"r{i}") for i in range(5)))  # rewritten, bad line gone
    sp = Spool(engine, [spool], batch_lines=2, settle=0.0, torn_after=3600)
    try:
        sp.release_claims()
        sp.sync_files()
        row = sp.claims.claim(set(), nothing_new=lambda *_: False)
        assert sp._step(row, read_ahead=False) == 1  # lines 1-2 of 6: not the whole file
        assert [e.pk for e in entries(engine)] == [q.pk]
        with engine.connect() as conn:
            assert conn.execute(sa.select(S.c.read_from)).scalar_one() is not None
        while sp._step(sp._reload(row.pk), read_ahead=False):
            pass
        assert entries(engine) == []  # ... until the read that began at byte 0 reached the end
    finally:
        sp.close()


def test_worker_reading_a_rewritten_json_document_whole_clears_what_it_no_longer_holds(engine, tmp_path):
    import json

    spool = tmp_path / "spool"
    spool.mkdir()
    doc = spool / "batch.json"

    def body(*ids: str, bad: bool = False) -> bytes:
        records = [json.loads(line(i)) for i in ids] + ([{"schema": "rollscope/1", "id": "bad", "nodes": 7}] if bad
                                                         else [])
        return json.dumps(records, indent=1).encode()

    doc.write_bytes(body("a", "b", bad=True))
    _drain(engine, spool, [])
    [q] = entries(engine)
    assert (q.source_file, q.source) == (str(doc), str(doc)) and "[2]" in (q.field or q.error)
    doc.write_bytes(body("z", "a", "b"))  # rewritten (its first bytes change) without the bad record
    _drain(engine, spool, [])
    assert entries(engine) == []
