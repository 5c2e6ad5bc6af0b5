"""`rollscope worker --once` for cron and CI: a JSON document still being written when it looks is
waited for up to the settle time and read; what is still unread after that (a document that keeps
changing, a last line without its newline) is named on stderr with why, and the exit code is 1.
A corrupt gzip file is read up to the damage, then rejected once per file state: one log line, one
quarantine entry, counted once in its status; not once per poll. Real CLI processes, real SQLite
files."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from app.db import models
from app.db.engine import make_engine
from app.db.migrate import upgrade
from app.worker.run import wait_for
from ingest.formats.native import write_line
from tests.conftest import ROOT
from tests.helpers import rollout
from tests.worker.test_spool import count, ids, worker

R, Q, S = models.Rollout.__table__, models.Quarantine.__table__, models.SpoolFile.__table__


def _doc(rid: str) -> str:
    return json.dumps({"schema": "rollscope/1", "id": rid, "run": {"id": "docs"},
                       "nodes": [{"message": {"role": "user", "content": "hi"}}]}, indent=2)


def _keep_rewriting(path: Path, rid: str, stop: threading.Event) -> threading.Thread:
    def loop():
        while not stop.is_set():
            path.write_text(_doc(rid))
            time.sleep(0.2)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t


def _once(db: str, spool: Path, *options: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "app.cli", "--db", db, "worker", "--once", "--spool", str(spool),
                             *options],
                            env={**os.environ}, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _seen(engine, name: str) -> bool:
    try:
        with engine.connect() as conn:
            return conn.execute(sa.select(S.c.pk).where(S.c.name == name)).first() is not None
    except sa.exc.DBAPIError:  # not migrated yet
        return False


@pytest.mark.slow
def test_once_waits_for_a_document_being_written_then_reads_it(tmp_path):
    db = f"sqlite:///{tmp_path / 'once.db'}"
    spool = tmp_path / "spool"
    spool.mkdir()
    doc = spool / "doc.json"
    engine = make_engine(db)
    stop = threading.Event()
    writer = _keep_rewriting(doc, "d1", stop)
    t0 = time.monotonic()
    # --once waits for a changing document until `settle` + `poll` after its first idle look, so
    # the writer must stop within `poll` of that look: this test stops it once it sees the file's
    # row, which under a loaded machine took more than the default 0.5 s (CI, 2026-12-07)
    proc = _once(db, spool, "--poll", "3")
    try:
        # the document is still changing when the worker first looks at it; then it stops
        assert wait_for(lambda: _seen(engine, str(doc)), 60)
    finally:
        stop.set()
        writer.join(5)
        err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 0, err
    assert "left" not in err and "Traceback" not in err, err
    assert ids(engine) == ["d1"], err
    assert time.monotonic() - t0 < 30
    engine.dispose()


@pytest.mark.slow
def test_once_names_what_it_left_unread_and_exits_1(tmp_path):
    db = f"sqlite:///{tmp_path / 'once.db'}"
    spool = tmp_path / "spool"
    spool.mkdir()
    doc = spool / "busy.json"
    partial = spool / "a.jsonl"
    partial.write_bytes(write_line(rollout("a1")) + write_line(rollout("a2"))[:40])  # a last line without newline
    stop = threading.Event()
    writer = _keep_rewriting(doc, "b1", stop)  # never settles while the worker runs
    try:
        proc = _once(db, spool)
        err = proc.communicate(timeout=120)[1]
    finally:
        stop.set()
        writer.join(5)
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert f"worker: left {partial} unread: its last line has no newline yet (40 bytes): it is read when the line " \
           "ends, or reported as torn once the file has not grown for 30 s" in lines, lines
    assert f"worker: left {doc} unread: still changing: a JSON document or CSV is read once it has not changed " \
           "for 2 s" in lines, lines
    assert lines[-1] == "worker: stopped after 1 commits; left 2 files unread", lines
    engine = make_engine(db)
    assert ids(engine) == ["a1"]
    engine.dispose()


def _corrupt_member() -> bytes:
    """A gzip member whose deflate data is damaged at its first byte (block type 11, reserved)."""
    return bytes([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 0xFF, 0x07]) + b"\x5a" * 200


def test_a_corrupt_gzip_is_read_up_to_the_damage_and_reported_once_per_file_state(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'gz.db'}", writer=True)
    upgrade(engine)
    spool = tmp_path / "spool"
    spool.mkdir()
    f = spool / "r.jsonl.gz"
    f.write_bytes(gzip.compress(b"".join(write_line(rollout(f"g{i}")) for i in range(10))) + _corrupt_member())
    said: list[str] = []
    with worker(engine, spool, log=said.append, settle=0.1, torn_after=0.2):
        assert wait_for(lambda: count(engine, R) == 10 and count(engine, Q) == 1, 30)
        time.sleep(1.5)  # dozens of polls: the file is not looked at again
        assert len([m for m in said if "corrupt gzip" in m]) == 1, said
        # the file changes (more is appended after the damage): looked at, and reported, once more
        with f.open("ab") as out:
            out.write(gzip.compress(write_line(rollout("late"))))
        assert wait_for(lambda: len([m for m in said if "corrupt gzip" in m]) == 2, 30), said
        time.sleep(1.0)
    assert len([m for m in said if "corrupt gzip" in m]) == 2, said
    with engine.connect() as conn:
        row = conn.execute(sa.select(S)).one()
        (q,) = conn.execute(sa.select(Q)).all()
    assert ids(engine) == [f"g{i}" for i in range(10)]  # what came before the damage; nothing after it
    # reported once per file state, but one damaged record: one quarantine entry, one rejection
    assert (row.status, row.records, row.rejected, row.line) == ("done", 10, 1, 10)
    assert "corrupt gzip data" in row.last_error and "the rest of the file cannot be read" in row.last_error
    assert (q.line, q.source_file) == (11, str(f)) and "invalid block type" in q.error
    engine.dispose()
