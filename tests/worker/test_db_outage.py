"""A database that goes away: the worker's connections are cut (every backend of its database
terminated, as a restart does) while it ingests; it reconnects with backoff and every rollout is
present exactly once. The CLI against an unreachable database prints one line, no traceback.

(The shared Postgres server is not restarted: other test runs use it. Terminating this test
database's backends is what a restart does to the worker's connections.)"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import sqlalchemy as sa

from app.db import models
from app.db.engine import make_engine
from app.worker.run import wait_for
from ingest.formats.native import write_line
from tests.conftest import ROOT, _pg_admin
from tests.helpers import rollout
from tests.worker import new_pg_database, start_worker

R = models.Rollout.__table__


def test_worker_survives_its_connections_being_cut(tmp_path):
    name, url = new_pg_database("rs_outage")
    spool = tmp_path / "spool" / "outage"
    spool.mkdir(parents=True)
    f = spool / "r.jsonl"
    proc = start_worker(url, tmp_path / "spool")
    engine = make_engine(url)

    def stored() -> int:
        try:
            with engine.connect() as conn:
                return conn.execute(sa.select(sa.func.count()).select_from(R)).scalar_one()
        except sa.exc.DBAPIError:
            return -1

    try:
        for k in range(6):
            with f.open("ab") as out:
                out.write(b"".join(write_line(rollout(f"r{k}-{i}", step=k)) for i in range(30)))
            time.sleep(0.5)
            with _pg_admin() as admin:  # cut every connection of the worker's database
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
        assert wait_for(lambda: stored() == 180, 120), stored()
    finally:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1].decode()
        engine.dispose()
        with _pg_admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert proc.returncode == 0 and "Traceback" not in err, err[-3000:]


def test_cli_against_an_unreachable_database_prints_one_line(tmp_path):
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none"}
    data = tmp_path / "r.jsonl"
    data.write_bytes(write_line(rollout("a")))
    out = subprocess.run([sys.executable, "-m", "app.cli", "ingest", str(data)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 3 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("database: postgresql+psycopg://postgres@127.0.0.1:1/none")
    assert len(lines) == 2 and "the database is unreachable" in lines[1] and "re-run" in lines[1]
    debug = subprocess.run([sys.executable, "-m", "app.cli", "--debug", "ingest", str(data)], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert "Traceback" in debug.stderr
