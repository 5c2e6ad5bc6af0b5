"""An ingest writer's SQLite WAL is checkpointed by a thread after each commit, not inside the
commit (app/db/checkpoint.py): after an ingest every frame is already in the database file, the
WAL is reused from its start by the next batch instead of growing, the writer's own connections
keep an autocheckpoint only as a safety net, and disposing the engine ends the thread."""
from __future__ import annotations

import os
import sqlite3
import time

import pytest

from app.db.checkpoint import FALLBACK_PAGES
from app.db.engine import WRITER_CACHE_KB, make_engine
from tests.helpers import bench_workload, ingest


def _wal_state(path) -> tuple[int, int]:
    """(frames in the WAL, frames of it already in the database file), read without moving them."""
    conn = sqlite3.connect(path)
    try:
        # a checkpoint that may not wait for anyone and, on a WAL already copied, copies nothing
        _, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    finally:
        conn.close()
    return log, done


def _settled(engine, timeout: float = 30.0) -> None:
    """Wait until the engine's checkpoint thread has nothing left to do."""
    cp = engine.rollscope_checkpointer
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (cp._wake.is_set() or not cp.done):
        time.sleep(0.05)
    time.sleep(0.2)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # Postgres has no WAL file of ours
def test_the_wal_is_checkpointed_after_each_batch_by_a_thread(db_url, tmp_path):
    db = db_url.removeprefix("sqlite:///")
    wl = bench_workload()
    path = wl.write(tmp_path / "agentic.jsonl", 60)
    engine = make_engine(db_url, writer=True)
    try:
        with engine.connect() as conn:  # the writer's own connections: autocheckpoint only as a safety net
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == FALLBACK_PAGES
            # and a page cache of WRITER_CACHE_KB (SQLite's default, kept by readers, is 2 MB)
            assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -WRITER_CACHE_KB
        report = ingest(engine, path)
        assert report.total.inserted == 60
        _settled(engine)
        # a 60-rollout ingest writes ~5 MB: past SQLite's own 1,000 pages, so without the thread
        # its commit would checkpoint; with it, every frame is in the database file already
        log, done = _wal_state(db)
        assert log > 0 and done == log, (log, done)
        assert engine.rollscope_checkpointer.done >= 1
        wal = os.path.getsize(f"{db}-wal")
        # three more batches of the same size: the WAL is reused from its start, not grown
        for k in range(3):
            more = wl.write(tmp_path / f"more{k}.jsonl", 60, start=1000 * (k + 1))
            assert ingest(engine, more).total.inserted == 60
            _settled(engine)
        assert os.path.getsize(f"{db}-wal") <= 1.5 * wal, (os.path.getsize(f"{db}-wal"), wal)
        log, done = _wal_state(db)
        assert done == log, (log, done)
    finally:
        engine.dispose()
    thread = engine.rollscope_checkpointer._thread
    assert thread is None or not thread.is_alive()  # disposing the engine ended it


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_reader_engine_keeps_sqlite_autocheckpoint(db_url):
    engine = make_engine(db_url)
    try:
        assert engine.rollscope_checkpointer is None
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 1000
            assert conn.exec_driver_sql("PRAGMA cache_size").scalar() == -2000
    finally:
        engine.dispose()
