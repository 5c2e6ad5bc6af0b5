"""Parser processes forked from the worker (app/forking.py, app/worker/parse.py): they start with
the parsing code imported, they parse what the worker would, a fork waits for a quiet thread to
be idle, and neither an unknown thread nor the worker's SQLite lock leaks into a child."""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from app.db.engine import make_engine
from app.db.migrate import upgrade
from app.forking import can_fork, quiet_while_forking
from app.worker.parse import Parsers, Stretch, parse_lines, pieces, start_method
from app.worker.run import sqlite_lock, wait_for
from tests.worker.test_spool import line

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parsers are forked on Linux only")


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        kids += [int(k) for k in children.read_text().split()]
    return kids


def _open_files(pid: int) -> set[str]:
    out = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            out.add(os.readlink(fd))
        except OSError:
            continue
    return out


def test_parsers_are_forked_beside_a_checkpoint_thread_and_parse_what_the_worker_would(tmp_path):
    db = tmp_path / "w.db"
    engine = make_engine(f"sqlite:///{db}", writer=True)
    upgrade(engine)
    with engine.begin() as conn:  # a writer's commit starts the checkpoint thread (registered as quiet)
        conn.exec_driver_sql("CREATE TABLE t (x)")
    lock = sqlite_lock(engine)
    pool = Parsers(1)
    try:
        assert wait_for(lambda: any(t.name == "rollscope-checkpoint" for t in threading.enumerate()), 10)
        assert can_fork() and start_method() == "fork"
        t = time.monotonic()
        pool.warm()
        assert wait_for(lambda: pool.ready, 30)
        started = time.monotonic() - t
        (kid,) = _children(os.getpid())
        # forked: the same command line as this process (a spawned one runs multiprocessing.spawn)
        assert Path(f"/proc/{kid}/cmdline").read_bytes() == Path(f"/proc/{os.getpid()}/cmdline").read_bytes()
        assert started < 5, started  # no imports to make (a spawned parser takes a second or more)
        # the worker's lock file is not held open by the child: it must go with the worker
        lock_path = str(db.resolve()) + ".worker.lock"
        assert lock_path in _open_files(os.getpid())
        assert lock_path not in _open_files(kid)
        # what the child parses is what this process parses
        data = b"".join(line(f"f{i:03d}", reward=i % 2, step=i // 8) for i in range(64))
        n = data.count(b"\n")
        got = pool.parsed(Stretch(None, pieces(data, "a.jsonl", 0, 0, n, "native", None, 4)), ())
        want = parse_lines(data, "a.jsonl", 0, 0, "native", None)
        assert [p.identity[1] for p in got.prepared] == [p.identity[1] for p in want.prepared] == \
            [f"f{i:03d}" for i in range(64)]
        def rows(p):
            return {k: v for k, v in p.summary.items() if k != "ingested_at"}, p.nodes, p.findings, p.search

        assert list(map(rows, got.prepared)) == list(map(rows, want.prepared))
    finally:
        pool.close()
        lock.close()
        engine.dispose()


def test_a_thread_not_known_to_be_quiet_makes_parsers_spawn():
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, name="someone-else", daemon=True)
    other.start()
    try:
        assert not can_fork() and start_method() == "spawn"
    finally:
        stop.set()
        other.join(5)
    assert can_fork()


def test_a_fork_waits_until_a_quiet_thread_lets_go_of_its_lock():
    busy = threading.Lock()
    working, stop = threading.Event(), threading.Event()
    let_go = []

    def quiet_thread():
        quiet_while_forking(busy)
        with busy:  # working: a fork must not happen now
            working.set()
            time.sleep(0.5)
            let_go.append(time.monotonic())
        stop.wait(10)

    t = threading.Thread(target=quiet_thread, daemon=True)
    t.start()
    assert working.wait(10)
    assert can_fork()
    pid = os.fork()
    if pid == 0:  # the child: the lock it inherited was let go for it
        os._exit(0 if busy.acquire(timeout=1) else 1)
    forked = time.monotonic()
    _, status = os.waitpid(pid, 0)
    stop.set()
    t.join(5)
    assert let_go and forked >= let_go[0]  # the fork waited for the thread's work to end
    assert os.waitstatus_to_exitcode(status) == 0
