"""A database that goes away: the worker's connections are cut (every backend of its database
terminated, as a restart does) while it ingests; it reconnects with backoff and every rollout is
present exactly once. The CLI against an unreachable database prints one line, no traceback.

(The shared Postgres server is not restarted: other test runs use it. Terminating this test
database's backends is what a restart does to the worker's connections.)"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import sqlalchemy as sa

from app.db import models
from app.db.engine import make_engine
from app.worker.run import wait_for
from ingest.formats.native import write_line
from tests.conftest import ROOT, _pg_admin
from tests.helpers import rollout, run_cli
from tests.worker import new_pg_database, start_worker, stop_worker_and_drop

pytestmark = pytest.mark.slow

R = models.Rollout.__table__


@pytest.mark.postgres
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
        err = stop_worker_and_drop(proc, engine, name)
    assert proc.returncode == 0 and "Traceback" not in err, err[-3000:]


def test_cli_against_an_unreachable_database_prints_one_line(tmp_path):
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none",
           "ROLLSCOPE_DB__RETRY_SECONDS": "0"}
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


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    """`rollscope ARGS` in-process (tests.helpers.run_cli): the entry point's retries, exit codes
    and lines as the installed command has them; the real interpreter is started above."""
    return run_cli(*args, env=env)


def test_a_database_down_at_start_is_retried_with_the_ingest_budget_then_one_line(tmp_path):
    """Down at start: tried again 0.5 s, 1 s, ... within ROLLSCOPE_DB__RETRY_SECONDS (30 s by
    default, the budget of a batch mid-ingest), the `database:` line printed once, then one
    error line saying how long it waited; the worker the same."""
    data = tmp_path / "r.jsonl"
    data.write_bytes(write_line(rollout("a")))
    env = {"ROLLSCOPE_DB__RETRY_SECONDS": "1.5"}
    t0 = time.monotonic()
    out = _cli("--db", "postgresql://postgres@127.0.0.1:1/x", "ingest", str(data), env=env)
    assert out.returncode == 3 and time.monotonic() - t0 >= 1.5 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("database: ") and sum(x.startswith("database: ") for x in lines) == 1
    assert [x.rsplit("retrying in ", 1)[1] for x in lines[1:-1]] == ["0.5 s", "1 s"], lines
    assert "the database is unreachable after retrying for 1.5 s" in lines[-1] and "re-run" in lines[-1]
    (tmp_path / "sp").mkdir()
    worker = _cli("--db", "postgresql://postgres@127.0.0.1:1/x", "worker", "--once", "--spool", str(tmp_path / "sp"),
                  env=env)
    lines = worker.stderr.strip().splitlines()
    assert worker.returncode == 3 and sum(x.startswith("database: ") for x in lines) == 1, lines
    assert sum("retrying in" in x for x in lines) == 2, lines


@pytest.mark.postgres
def test_a_database_that_comes_up_during_the_wait_is_used(tmp_path):
    """The server is unreachable at first (nothing listens on the port); once the CLI says it
    is retrying, a forwarder to the real Postgres opens there: the ingest goes through."""
    import socket
    import threading

    from sqlalchemy.engine import make_url

    from tests.helpers import _free_port

    name, url = new_pg_database("rs_late")
    real = make_url(url)
    port = _free_port()
    stop = threading.Event()

    def pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def forward() -> None:
        with socket.create_server(("127.0.0.1", port)) as srv:
            srv.settimeout(0.2)
            while not stop.is_set():
                try:
                    client, _ = srv.accept()
                except TimeoutError:
                    continue
                upstream = socket.create_connection((real.host, real.port or 5432))
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=forward, daemon=True)
    data = tmp_path / "r.jsonl"
    data.write_bytes(b"".join(write_line(rollout(f"r{i}")) for i in range(3)))
    try:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "--db",
                                 real.set(port=port).render_as_string(hide_password=False), "ingest", str(data)],
                                env={**os.environ, "ROLLSCOPE_DB__RETRY_SECONDS": "20"}, cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        err = []
        for line in proc.stderr:
            err.append(line)
            if "retrying in" in line:
                thread.start()
                break
        rest, more = proc.communicate(timeout=120)
        err.append(more)
        assert proc.returncode == 0, err
        assert "retrying in 0.5 s" in err[1] and "".join(err).count("database: ") == 1
        engine = make_engine(url)
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(R)).scalar_one() == 3
        engine.dispose()
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(5)
        with _pg_admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_database_url_of_another_kind_says_what_is_wrong(tmp_path):
    data = tmp_path / "r.jsonl"
    data.write_bytes(write_line(rollout("a")))
    for args in (("--db", "mysql://x", "ingest", str(data)), ("ingest", str(data), "--db=mysql://x")):
        out = _cli(*args, env={})
        assert out.returncode == 2 and "Traceback" not in out.stderr and "ValidationError" not in out.stderr
        assert "error: --db must be a sqlite:// or postgresql:// URL" in out.stderr, out.stderr
        assert "ROLLSCOPE_DATABASE_URL" not in out.stderr, out.stderr  # not set: not named
    for var in ("ROLLSCOPE_DATABASE_URL", "ROLLSCOPE_DB__URL"):  # the variable that was set is named
        out = _cli("ingest", str(data), env={var: "garbage://x"})
        assert (out.returncode == 2
                and f"error: {var} must be a sqlite:// or postgresql:// URL" in out.stderr), out.stderr
    out = _cli("ingest", str(data), env={"ROLLSCOPE_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
                                         "ROLLSCOPE_WORKER__BATCH_SIZE": "many"})
    assert out.returncode == 2 and "worker.batch_size" in out.stderr and "integer" in out.stderr, out.stderr
