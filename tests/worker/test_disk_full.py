"""Disk full: the SQLite database sits on a small tmpfs that fills up while the worker ingests.
Ingestion stops with a clear error, nothing is quarantined for it and nothing already stored is
damaged; when space returns (the tmpfs is grown) it resumes by itself, and every rollout is
stored exactly once.

Mounting a tmpfs needs root (CAP_SYS_ADMIN); elsewhere the test is skipped and says so."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from app.db import models
from app.db.engine import make_engine
from app.db.migrate import upgrade
from app.worker.run import wait_for
from ingest.formats.native import write_line
from tests.conftest import ROOT
from tests.helpers import rollout

pytestmark = pytest.mark.slow

R = models.Rollout.__table__
Q = models.Quarantine.__table__
N = 120
TEXT = "tool output line with numbers 0123456789 " * 100  # ~4 KB per message


def _mount(where, size: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


def big(rid: str):
    messages = [{"role": "user", "content": f"{rid} {TEXT}"}]
    for k in range(4):
        messages += [{"role": "assistant", "content": f"turn {k} {TEXT}"}, {"role": "user", "content": TEXT}]
    return rollout(rid, messages=messages)


def test_worker_stops_on_a_full_disk_and_resumes_when_space_returns(tmp_path):
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount(disk, "640k"):
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN); the disk-full test cannot run here")
    url = f"sqlite:///{disk / 'rs.db'}"
    spool = tmp_path / "spool"
    spool.mkdir()
    proc = None
    engine = make_engine(url)
    try:
        upgrade(engine)  # the schema fits; the rollouts do not
        (spool / "r.jsonl").write_bytes(b"".join(write_line(big(f"r{i}")) for i in range(N)))
        env = {**os.environ, "ROLLSCOPE_DATABASE_URL": url}
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--spool", str(spool), "--poll", "0.05"],
                                env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

        def count(table) -> int:
            with engine.connect() as conn:
                return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()

        time.sleep(8)  # the worker fills the disk and waits
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        stored_while_full = count(R)
        assert stored_while_full < N
        assert count(Q) == 0  # a full disk is not the records' fault
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar_one() == "ok"

        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)  # space returns
        assert wait_for(lambda: count(R) == N, 120), count(R)
        assert count(Q) == 0
        with engine.connect() as conn:
            ids = conn.execute(sa.select(R.c.rollout_id)).scalars().all()
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar_one() == "ok"
        assert sorted(ids) == sorted(f"r{i}" for i in range(N))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            err = proc.communicate(timeout=60)[1]
        engine.dispose()
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
    assert proc.returncode == 0 and "Traceback" not in err, err[-3000:]
    assert "disk is full" in err, err[-3000:]


def test_cli_ingest_waits_for_space_and_finishes(tmp_path):
    """`rollscope ingest` retries a full disk (about 30 s) instead of quarantining records; space
    that returns meanwhile lets it finish with everything stored once."""
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount(disk, "640k"):
        pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN); the disk-full test cannot run here")
    url = f"sqlite:///{disk / 'rs.db'}"
    engine = make_engine(url)
    try:
        upgrade(engine)
        data = tmp_path / "r.jsonl"
        data.write_bytes(b"".join(write_line(big(f"r{i}")) for i in range(N)))
        env = {**os.environ, "ROLLSCOPE_DATABASE_URL": url}
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "ingest", str(data)], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(6)
        assert proc.poll() is None  # waiting for space, not failed
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "Traceback" not in err, err[-3000:]
        assert f"{N} new" in out and "0 rejected" in out, out
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(R)).scalar_one() == N
            assert conn.execute(sa.select(sa.func.count()).select_from(Q)).scalar_one() == 0
    finally:
        engine.dispose()
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
