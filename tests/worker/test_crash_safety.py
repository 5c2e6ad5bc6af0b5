"""Crash safety, proven: rollouts are written into a spool while workers are SIGKILLed at random
moments and restarted; afterwards every rollout is stored exactly once, equal in content to a
clean ingest of the same files. SQLite with one worker, Postgres with two at once."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from app.db import models
from app.db.engine import make_engine
from app.worker.run import wait_for
from app.worker.sync import ingest_paths
from ingest.formats.base import ReadContext
from ingest.formats.native import write_line
from tests.conftest import ROOT
from tests.helpers import rollout
from tests.worker import rollouts_stored

pytestmark = pytest.mark.slow

R, S, Q = models.Rollout.__table__, models.SpoolFile.__table__, models.Quarantine.__table__
N = 240


def _lines(n: int) -> list[bytes]:
    out = []
    for i in range(n):
        msgs = [{"role": "user", "content": f"task {i}"}, {"role": "assistant", "content": "x" * (i % 50)}]
        out.append(write_line(rollout(f"r{i:04d}", step=i // 40, group=f"g{i // 8}", index=i % 8, reward=i % 3 / 2,
                                      messages=msgs)))
    return out


def _append_slowly(files: list[Path], lines: list[bytes], rng: random.Random, done: threading.Event) -> None:
    """Append the lines across the files in random pieces (a line may arrive in two writes)."""
    for k, ln in enumerate(lines):
        f = files[k % len(files)]
        cut = rng.randrange(len(ln)) if rng.random() < 0.3 else len(ln)
        with f.open("ab") as out:
            out.write(ln[:cut])
            out.flush()
            if cut < len(ln):
                time.sleep(rng.random() * 0.02)
                out.write(ln[cut:])
        if k % 10 == 0:
            time.sleep(rng.random() * 0.05)
    done.set()


def _start(env, spool: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--spool", str(spool), "--poll", "0.05"],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _stored(engine) -> list[tuple]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(R.c.rollout_id, R.c.attempt, R.c.content_hash, R.c.n_nodes, R.c.step,
                                             R.c.group_id, R.c.source_file)).all())


def _crash_run(db_url: str, tmp_path: Path, workers: int, seed: int, batch: int = 200) -> None:
    rng = random.Random(seed)
    spool = tmp_path / "spool" / "crash-run"
    spool.mkdir(parents=True)
    files = [spool / "a.jsonl", spool / "b.jsonl"]
    lines = _lines(N)
    # a small batch makes a restarted worker find many stretches waiting: its parser process
    # (app/worker/parse.py) reads ahead while it writes, and is killed with it
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": db_url, "ROLLSCOPE_WORKER__BATCH_SIZE": str(batch),
           "ROLLSCOPE_WORKER__PARSERS": "1"}
    engine = make_engine(db_url)
    procs = [_start(env, tmp_path / "spool") for _ in range(workers)]
    done = threading.Event()
    writer = threading.Thread(target=_append_slowly, args=(files, lines, rng, done), daemon=True)
    writer.start()
    kills = 0
    deadline = time.monotonic() + 240
    try:
        # At least 3 kills even when a quiet machine drains the spool first: a kill after the
        # last line still proves a restart resumes from its offsets and adds nothing.
        while (not done.is_set() or rollouts_stored(engine) < N or kills < 3) and time.monotonic() < deadline:
            time.sleep(0.3 + rng.random() * 1.5)
            if kills < 6:
                k = rng.randrange(workers)
                procs[k].send_signal(signal.SIGKILL)
                procs[k].wait(30)
                kills += 1
                procs[k] = _start(env, tmp_path / "spool")
        assert wait_for(lambda: rollouts_stored(engine) == N, 120), rollouts_stored(engine)
        time.sleep(1.0)  # nothing more arrives
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        errs = [p.communicate(timeout=60)[1].decode() for p in procs]
    assert kills >= 3
    assert all("Traceback" not in e for e in errs), errs
    got = _stored(engine)
    assert len(got) == N and len({g[0] for g in got}) == N
    with engine.connect() as conn:
        offsets = {r.name: (r.offset, r.line) for r in conn.execute(sa.select(S))}
        assert conn.execute(sa.select(sa.func.count()).select_from(Q)).scalar_one() == 0
    assert offsets == {str(f): (f.stat().st_size, N // 2) for f in files}
    engine.dispose()
    # a clean ingest of the same files stores the same rollouts, byte for byte
    clean = make_engine(f"sqlite:///{tmp_path / 'clean.db'}", writer=True)
    from app.db.migrate import upgrade

    upgrade(clean)
    ingest_paths(clean, files, ReadContext())
    assert _stored(clean) == got
    clean.dispose()


def test_sigkill_loses_nothing_sqlite(tmp_path):
    _crash_run(f"sqlite:///{tmp_path / 'crash.db'}", tmp_path, workers=1, seed=1, batch=5)


@pytest.mark.postgres
def test_sigkill_loses_nothing_postgres_two_workers(tmp_path):
    import uuid

    from sqlalchemy.engine import make_url

    from tests.conftest import PG_URL, _pg_admin

    name = f"rs_crash_{uuid.uuid4().hex[:10]}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        _crash_run(make_url(PG_URL).set(database=name).render_as_string(hide_password=False), tmp_path,
                   workers=2, seed=2, batch=7)
    finally:
        with _pg_admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
