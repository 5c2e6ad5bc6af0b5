"""Parser processes forked from the worker (app/forking.py, app/worker/parse.py): they start with
the parsing code imported, they parse what the worker would, a fork waits for a quiet thread to
be idle, and neither an unknown thread nor the worker's SQLite lock leaks into a child."""
from __future__ import annotations

import os
import signal
import sqlite3
import sys
import threading
import time
from concurrent.futures import Future
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


def _parsed_by_the_pool(pool: Parsers, data: bytes, n: int, k: int, given: int | None = None):
    """`data` (n lines) cut in k pieces, all but the first handed to the pool (`given` of them:
    all but the first unless said), then parsed."""
    stretch = Stretch(None, pieces(data, "a.jsonl", 0, 0, n, "native", None, k))
    pool.top_up([stretch])
    assert sum(isinstance(p.job, Future) for p in stretch.pieces) == (k - 1 if given is None else given)
    return pool.parsed(stretch, ())


def _agentic_file(path: Path, n: int, seed: int) -> Path:
    """`n` rollouts of the bench workload (bench/workload.py: 105 KB each) as native JSONL."""
    import numpy as np
    import orjson

    sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))  # after the project's own
    import workload

    rng = np.random.default_rng(seed)
    path.write_bytes(b"".join(orjson.dumps(workload.rollout(k, rng)) + b"\n" for k in range(n)))
    return path


def _fresh(name: str, *args: str) -> None:
    """Run this module's `name(*args)` in a fresh interpreter: whether a process may fork depends
    on its threads, and a test process holds the threads (and children) of the tests before."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    code = f"import sys; from tests.worker.test_forking import {name}; {name}(*sys.argv[1:])"
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=root, capture_output=True, text=True,
                          timeout=180, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_parsers_are_forked_beside_a_checkpoint_thread_and_parse_what_the_worker_would(tmp_path):
    _fresh("forked_beside_a_checkpoint_thread", str(tmp_path))


def forked_beside_a_checkpoint_thread(tmp: str) -> None:
    db = Path(tmp) / "w.db"
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
        got = _parsed_by_the_pool(pool, data, n, 4)
        want = parse_lines(data, "a.jsonl", 0, 0, "native", None)
        assert [p.identity[1] for p in got.prepared] == [p.identity[1] for p in want.prepared] == \
            [f"f{i:03d}" for i in range(64)]
        def rows(p):
            return {k: v for k, v in p.summary.items() if k != "ingested_at"}, p.nodes, p.findings, p.search

        assert list(map(rows, got.prepared)) == list(map(rows, want.prepared))
        # SIGTERM (systemd signals the whole group) is left to the worker: the parser carries on
        os.kill(kid, signal.SIGTERM)
        time.sleep(0.5)
        assert "zombie" not in Path(f"/proc/{kid}/status").read_text()
        again = _parsed_by_the_pool(pool, data, n, 4)
        assert [p.identity[1] for p in again.prepared] == [f"f{i:03d}" for i in range(64)]
        assert _children(os.getpid()) == [kid]
    finally:
        pool.close()
        lock.close()
        engine.dispose()


def test_a_thread_not_known_to_be_quiet_makes_parsers_spawn():
    _fresh("spawned_beside_an_unknown_thread")


def spawned_beside_an_unknown_thread() -> None:
    assert can_fork()
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
    _fresh("fork_waits_for_a_quiet_thread")


def fork_waits_for_a_quiet_thread() -> None:
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


KILLED_MID_PIECE = r"""
import multiprocessing.connection, os, select, signal, sys, threading, time
import numpy as np, orjson
sys.path.append("bench")  # (after the project: bench/ingest.py is not the ingest package)
import workload
from app.worker.parse import Parsers, Stretch, pieces
from app.worker.run import wait_for

# every message through the pool's pipes, of this process and (forked) its parser: its size
sent = multiprocessing.connection.Connection._send_bytes
def measured(self, buf):
    with open(os.environ["SIZES"], "a") as f:
        f.write(f"{len(buf)}\n")
    return sent(self, buf)
multiprocessing.connection.Connection._send_bytes = measured

rng = np.random.default_rng(0)
data = b"".join(orjson.dumps(workload.rollout(k, rng)) + b"\n" for k in range(48))
pool = Parsers(1)
pool.warm()
assert wait_for(lambda: pool.ready, 30)
kid = next(iter(pool._pool._processes))
stretch = Stretch(None, pieces(data, "a.jsonl", 0, 0, 48, "native", None, 4))
pool.top_up([stretch])  # the process has three pieces of 12 rollouts, 1.3 MB each
threading.Timer(float(sys.argv[1]), os.kill, (kid, signal.SIGKILL)).start()
got = pool.parsed(stretch, ())
pool.close()
sizes = [int(n) for n in open(os.environ["SIZES"]).read().split()]
print("largest message", max(sizes), "of", select.PIPE_BUF)
print("parsed", len(got.prepared), [p.identity[1] for p in got.prepared] == [f"r{k:06d}" for k in range(48)])
"""


@pytest.mark.parametrize("after", [0.02, 0.15, 0.4])
def test_a_parser_killed_while_it_works_costs_no_piece_and_no_hang(after, tmp_path):
    # A parser process killed (the OOM killer) at any moment of its work, a result half written
    # included: the worker parses what it had, then closes the pool and exits. Pieces and results
    # pass through files (app/worker/handoff.py), so no pipe holds half a message: before, the
    # pool's thread waited forever for the rest of one, and the worker hung. (Each message is
    # written whole or not at all only under PIPE_BUF: measured here, both ways.)
    import subprocess

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", KILLED_MID_PIECE, str(after)], cwd=root, capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root), "SIZES": str(tmp_path / "sizes")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    largest, _, pipe_buf = proc.stdout.split("largest message ")[1].split()[:3]
    assert int(largest) < int(pipe_buf), proc.stdout
    assert proc.stdout.split()[-2:] == ["48", "True"], proc.stdout + proc.stderr[-3000:]


INGEST_CLI = r"""
import sys, threading
import app.worker.parse as parse
asked = parse.start_method
def recorded():
    how = asked()
    print("start method", how, sorted(t.name for t in threading.enumerate()), file=sys.stderr)
    return how
parse.start_method = recorded
from app.cli import main
sys.argv[1:] = ["ingest", sys.argv[1]]
main()
"""


def test_rollscope_ingest_forks_its_parser_process(tmp_path):
    # `rollscope ingest` of a 26 MB native file reads it with a parser process, forked: its
    # progress bar is drawn by the command itself, not by rich's thread, which would leave the
    # process unable to fork (then a spawned process, a second of imports, only from 64 MB)
    import subprocess

    root = Path(__file__).resolve().parents[2]
    f = _agentic_file(tmp_path / "agentic.jsonl", 250, seed=1)
    assert f.stat().st_size > 20 << 20  # two stretches: the second read by the process
    env = {**os.environ, "PYTHONPATH": str(root), "ROLLSCOPE_DATABASE_URL": f"sqlite:///{tmp_path / 'i.db'}"}
    proc = subprocess.run([sys.executable, "-c", INGEST_CLI, str(f)], cwd=root, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    methods = [ln for ln in proc.stderr.splitlines() if ln.startswith("start method")]
    assert methods and all(m.startswith("start method fork ['MainThread'") for m in methods), methods
    assert "250" in proc.stdout  # every rollout stored (the summary's `new` column)


def test_sigterm_to_the_whole_group_stops_the_worker_cleanly(tmp_path):
    # systemd (KillMode=control-group) and a shell's `kill -TERM -PGID` signal the worker and its
    # parser process together: the parser leaves the stop to the worker, which finishes the
    # stretch in hand and exits 0, with no parser taken for dead; a second run stores the rest,
    # each rollout once.
    import subprocess

    import sqlalchemy as sa

    root = Path(__file__).resolve().parents[2]
    spool = tmp_path / "spool" / "run"
    spool.mkdir(parents=True)
    _agentic_file(spool / "a.jsonl", 600, seed=2)
    db = tmp_path / "w.db"
    env = {**os.environ, "PYTHONPATH": str(root), "ROLLSCOPE_DATABASE_URL": f"sqlite:///{db}",
           "ROLLSCOPE_WORKER__BATCH_SIZE": "50"}
    env.pop("ROLLSCOPE_WORKER__PARSERS", None)  # the default: one parser on two cores
    cmd = [sys.executable, "-m", "app.cli", "worker", "--spool", str(spool.parent)]
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)

    def stored() -> int:
        if not db.exists():
            return 0
        try:
            with sqlite3.connect(db, timeout=10) as conn:
                return conn.execute("SELECT count(*) FROM rollout").fetchone()[0]
        except sqlite3.OperationalError:
            return 0

    try:
        assert wait_for(lambda: stored() >= 50, 120), "nothing stored"
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out
    assert "parser process died" not in out, out
    assert 0 < stored() <= 600
    done = subprocess.run([*cmd, "--once"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    engine = make_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        ids = conn.execute(sa.text("SELECT rollout_id FROM rollout")).scalars().all()
    engine.dispose()
    assert sorted(ids) == [f"r{k:06d}" for k in range(600)]


def test_a_piece_or_result_that_cannot_be_handed_over_is_parsed_in_the_worker(monkeypatch):
    # The handoff's folder full (a container's small /dev/shm is avoided, a full temp disk is
    # not): a piece that cannot be written, or a result that cannot be read back, is parsed by
    # the worker itself, and nothing is lost.
    from app.worker import handoff

    data = b"".join(line(f"h{i:03d}", reward=i % 2) for i in range(64))
    pool, said = Parsers(1, log=lambda msg: said.append(msg)), []
    put, take = handoff.Handoff.put, handoff.Handoff.take
    puts, takes = [], []

    def full_after_two(self, fn, args):
        puts.append(fn)
        if len(puts) > 2:  # the probe and one piece
            raise OSError(28, "No space left on device")
        return put(self, fn, args)

    def lost_once(self, out):
        takes.append(out)
        if len(takes) == 2:  # the piece's result
            handoff.drop(out)
            raise OSError(2, "No such file or directory")
        return take(self, out)

    monkeypatch.setattr(handoff.Handoff, "put", full_after_two)
    monkeypatch.setattr(handoff.Handoff, "take", lost_once)
    try:
        pool.warm()
        assert wait_for(lambda: pool.ready, 30)
        got = _parsed_by_the_pool(pool, data, 64, 4, given=1)  # the next piece's file: no space
    finally:
        pool.close()
    assert [p.identity[1] for p in got.prepared] == [f"h{i:03d}" for i in range(64)]
    assert any("No space left" in m for m in said) and any("could not parse a piece" in m for m in said), said


def test_no_folder_for_the_handoff_leaves_the_worker_parsing_alone():
    _fresh("no_folder_for_the_handoff")


def no_folder_for_the_handoff() -> None:
    from app.worker import handoff

    def unwritable(*_a, **_k):
        raise PermissionError(13, "Permission denied")

    handoff.tempfile.mkdtemp = unwritable  # (a fresh interpreter: nothing to restore)
    said: list[str] = []
    pool = Parsers(1, log=said.append)
    pool.warm()
    data = b"".join(line(f"u{i:03d}") for i in range(16))
    stretch = Stretch(None, pieces(data, "a.jsonl", 0, 0, 16, "native", None, 4))
    pool.top_up([stretch])
    got = pool.parsed(stretch, ())
    alone = threading.active_count() == 1  # no thread either: the worker parsed every piece
    pool.close()
    assert [p.identity[1] for p in got.prepared] == [f"u{i:03d}" for i in range(16)]
    assert said and "cannot start parser processes" in said[0]
    assert not _children(os.getpid())
    assert alone


TAKEN_BACK_THEN_KILLED = r"""
import os, signal, sys
import numpy as np, orjson
sys.path.append("bench")
import workload
from app.worker.parse import Parsers, Stretch, pieces
from app.worker.run import wait_for

rng = np.random.default_rng(3)
lines = [orjson.dumps(workload.rollout(k, rng)) + b"\n" for k in range(64)]
first, second = b"".join(lines[:32]), b"".join(lines[32:])
pool = Parsers(1)
pool.warm()
assert wait_for(lambda: pool.ready, 30)
kid = next(iter(pool._pool._processes))
a = Stretch(None, pieces(first, "a.jsonl", 0, 0, 32, "native", None, 4))
b = Stretch(None, pieces(second, "a.jsonl", len(first), 32, 32, "native", None, 4))
pool.top_up([a, b])  # seven pieces queued for the one process
spare = pool._take_back([b])
assert spare is b.pieces[-1], "the last queued piece is claimed back"
spare.job = spare.fn(*spare.args)
os.kill(kid, signal.SIGKILL)  # then the process dies, with pieces queued after the one taken back
got = [p.identity[1] for s in (a, b) for p in pool.parsed(s, [b] if s is a else []).prepared]
pool.close()
print("parsed", len(got), got == [f"r{k:06d}" for k in range(64)])
"""


def test_a_piece_taken_back_then_a_parser_killed_leaves_no_job_unanswered(tmp_path):
    # Taking a queued piece back with Future.cancel() killed the pool's thread on Python 3.11
    # when a process then died (python/cpython#107219: it set an exception on the cancelled job),
    # and every job queued after it was never answered: the worker waited forever (found by a
    # tester killing parsers in a loop). Pieces are now claimed back by renaming their file.
    import subprocess

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", TAKEN_BACK_THEN_KILLED], cwd=root, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ["64", "True"], proc.stdout + proc.stderr[-3000:]
    assert "InvalidStateError" not in proc.stderr, proc.stderr[-3000:]


def test_sigterm_to_rollscope_ingest_removes_its_parser_files(tmp_path):
    # `timeout` and `docker stop` send SIGTERM: the ingest stops as on Ctrl-C (exit 143), and
    # the folder its parser process's pieces pass through goes with it.
    import subprocess

    from app.worker import handoff

    root = Path(__file__).resolve().parents[2]
    f = _agentic_file(tmp_path / "agentic.jsonl", 1200, seed=4)
    env = {**os.environ, "PYTHONPATH": str(root), "ROLLSCOPE_DATABASE_URL": f"sqlite:///{tmp_path / 'i.db'}"}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "ingest", str(f)], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    import tempfile

    bases = [Path(handoff.SHM), Path(tempfile.gettempdir())]

    def folders() -> list[Path]:
        return [d for b in bases if b.is_dir() for d in b.glob(f"{handoff.PREFIX}{proc.pid}-*")]

    try:
        assert wait_for(lambda: bool(folders()) or proc.poll() is not None, 120)
        assert folders(), "no parser process was started"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, out
    assert not folders()
