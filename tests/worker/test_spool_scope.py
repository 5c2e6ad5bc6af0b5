"""What a worker looks at is its own spool folders: workers on other folders share the
`spool_file` table, and one never marks another's files `gone`, claims them or names them as
left unread (app/worker/spool_files.py `within`, claims.py `mine`); a dead predecessor is
replaced only on one of its folders, compared resolved (app/worker/heartbeat.py). And the
worker never reads its own SQLite database, its side files or its lock, even inside a spool
folder; any other SQLite database there is refused once by name, not re-read as it changes."""
from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import sqlalchemy as sa

from app.db import models
from app.worker.heartbeat import Heartbeat
from app.worker.run import run, wait_for
from tests.helpers import run_cli
from tests.worker.test_spool import count, ids, line, worker

Q, S, H = models.Quarantine.__table__, models.SpoolFile.__table__, models.WorkerHeartbeat.__table__


def _status(engine, path: Path) -> str:
    with engine.connect() as conn:
        return conn.execute(sa.select(S.c.status).where(S.c.name == str(path))).scalar_one()


def _once(engine, folder: Path):
    return run(engine, [folder], once=True, poll=0.05, log=lambda _m: None, torn_after=3600)


def test_workers_on_two_spools_one_after_the_other_leave_each_others_files_alone(engine, tmp_path):
    """`A` and `AB` (a prefix, not a parent): a worker on AB does not mark A's file gone, does
    not read what was appended to it and does not name it as left unread; A's own worker still
    marks its deleted file gone."""
    a, ab = tmp_path / "A", tmp_path / "AB"
    a.mkdir(), ab.mkdir()
    fa, fb = a / "a.jsonl", ab / "b.jsonl"
    fa.write_bytes(line("a1"))
    fb.write_bytes(line("b1"))
    assert _once(engine, a).left == [] and ids(engine) == ["a1"]
    with fa.open("ab") as f:
        f.write(line("a2"))
    ran = _once(engine, ab)
    assert ran.left == [] and ids(engine) == ["a1", "b1"]  # a2 is A's worker's to read
    assert _status(engine, fa) != "gone" and _status(engine, fb) != "gone"
    fa.unlink()
    _once(engine, ab)
    assert _status(engine, fa) != "gone"  # not AB's folder: not AB's to judge
    _once(engine, a)
    assert _status(engine, fa) == "gone" and _status(engine, fb) != "gone"


def test_workers_on_two_spools_at_once_never_mark_each_others_files_gone(db_url, engine, tmp_path):
    """Two workers at once (on SQLite in one process, as on Postgres in two): each file stays
    active through many passes of the other worker, and lines appended to either land."""
    a, b = tmp_path / "A", tmp_path / "AB"
    a.mkdir(), b.mkdir()
    fa, fb = a / "a.jsonl", b / "b.jsonl"
    fa.write_bytes(line("a1"))
    fb.write_bytes(line("b1"))
    with worker(engine, a, torn_after=3600), worker(engine, b, torn_after=3600):
        assert wait_for(lambda: ids(engine) == ["a1", "b1"], 30)
        for rid, f in (("a2", fa), ("b2", fb)):
            with f.open("ab") as out:
                out.write(line(rid))
        assert wait_for(lambda: ids(engine) == ["a1", "a2", "b1", "b2"], 30)
        seen = set()
        for _ in range(20):  # each worker looks at its folders every 0.05 s
            seen |= {_status(engine, fa), _status(engine, fb)}
            time.sleep(0.05)
    assert "gone" not in seen, seen


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_dead_worker_is_replaced_only_on_its_own_folder_compared_resolved(engine, tmp_path):
    """A dead worker that followed `A` (given relative to its working folder) is not marked gone
    by a worker starting on `AB`, and is by one on `A` named through a link."""
    a, ab = tmp_path / "A", tmp_path / "AB"
    a.mkdir(), ab.mkdir()
    (tmp_path / "link").symlink_to(a)
    now = models.utcnow()
    with engine.begin() as conn:
        conn.execute(H.insert().values(worker_id="dead:1:s7", host=socket.gethostname(), pid=_dead_pid(),
                                       version="x", spools=["A"], cwd=str(tmp_path), files=[], interval_seconds=2,
                                       started_at=now, beat_at=now))

    def stopped() -> bool:
        with engine.connect() as conn:
            return conn.execute(sa.select(H.c.stopped_at).where(H.c.worker_id == "dead:1:s7")).scalar_one() is not None

    for folder, replaced in ((ab, False), (tmp_path / "link", True)):
        beat = Heartbeat(engine, [folder], interval=2, worker_id=lambda f=folder: f"live:{f.name}", files=list)
        assert beat.beat()
        assert stopped() is replaced, folder
        beat.beat(stopped=True)


def test_the_worker_never_reads_its_own_database_and_refuses_another_sqlite_file_once(tmp_path):
    """`rollscope worker --once` with its SQLite database inside the spool folder: the database,
    its -wal/-shm files and its lock are never recorded as spool files; another SQLite database
    there (being written, with a WAL) is refused once, by name, and stays refused as it changes."""
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "a.jsonl").write_bytes(line("a1"))
    other = sqlite3.connect(spool / "other.db")
    other.execute("PRAGMA journal_mode=WAL")
    other.execute("CREATE TABLE t (x)")
    other.commit()
    db = f"sqlite:///{spool / 'sq.db'}"

    def once() -> subprocess.CompletedProcess:
        return run_cli("--db", db, "worker", "--once", "--spool", str(spool))  # in-process: the same entry point

    try:
        for k in range(3):
            res = once()
            assert res.returncode == 0, res.stderr
            assert "reading it again" not in res.stderr and "sq.db:" not in res.stderr, res.stderr
            assert "sq.db-" not in res.stderr and "worker.lock" not in res.stderr, res.stderr
            assert res.stderr.count("other.db: a SQLite database file: not tailed") == (1 if k == 0 else 0), res.stderr
            other.execute("INSERT INTO t VALUES (?)", (k,))  # the database changes, its header with it
            other.commit()
    finally:
        other.close()
    from app.db.engine import make_engine

    engine = make_engine(db)
    try:
        with engine.connect() as conn:
            rows = {Path(r.name).name: r for r in conn.execute(sa.select(S))}
        assert sorted(rows) == ["a.jsonl", "other.db"], sorted(rows)
        assert (rows["other.db"].status, rows["other.db"].rejected) == ("done", 1)
        assert ids(engine) == ["a1"] and count(engine, Q) == 1
    finally:
        engine.dispose()
