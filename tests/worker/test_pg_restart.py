"""The Postgres server really restarted (`pg_ctlcluster ... restart`) twice while the worker
ingests: afterwards every rollout is present exactly once and every spooled line was committed
once (issue 6, "Database restart").

It restarts the whole server, which every other test shares, so it runs only with
ROLLSCOPE_TEST_PG_RESTART=1: `make test` (and so CI) runs it alone after the parallel run (as
root or the postgres user, on a Debian-style cluster found with `pg_lsclusters` on the test
server's port). test_db_outage.py covers the same path in the parallel run by cutting only its
own connections."""
from __future__ import annotations

import os
import subprocess
import time

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.db import models
from app.db.engine import make_engine
from app.worker.run import wait_for
from ingest.formats.native import write_line
from tests.conftest import PG_URL, _pg_admin
from tests.helpers import rollout
from tests.worker import new_pg_database, start_worker, stop_worker_and_drop

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.skipif(
    os.environ.get("ROLLSCOPE_TEST_PG_RESTART") != "1",
    reason="restarts the shared Postgres server, so `make test` runs it alone afterwards "
           "(ROLLSCOPE_TEST_PG_RESTART=1)")]

R = models.Rollout.__table__
S = models.SpoolFile.__table__
Q = models.Quarantine.__table__
BATCHES, PER_BATCH = 8, 40


def _cluster() -> tuple[str, str]:
    """(version, name) of the cluster serving the test server's port, from `pg_lsclusters`."""
    port = str(make_url(PG_URL).port or 5432)
    out = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        ver, name, p, *_ = line.split()
        if p == port:
            return ver, name
    raise RuntimeError(f"no cluster on port {port}: {out}")


def restart_postgres() -> None:
    ver, name = _cluster()
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", ver, name, "restart"], check=True, timeout=120)


def _admin_when_up():
    assert wait_for(lambda: _up(), 60), "Postgres did not come back"
    return _pg_admin()


def _up() -> bool:
    try:
        with _pg_admin():
            return True
    except Exception:  # noqa: BLE001 - still starting
        return False


def test_worker_loses_and_doubles_nothing_across_real_server_restarts(tmp_path, restart=restart_postgres):
    name, url = new_pg_database("rs_restart")
    spool = tmp_path / "spool" / "restart"
    spool.mkdir(parents=True)
    f = spool / "r.jsonl"
    proc = start_worker(url, tmp_path / "spool")
    engine = make_engine(url)

    def count(stmt) -> int:
        try:
            with engine.connect() as conn:
                return conn.execute(stmt).scalar_one() or 0
        except sa.exc.DBAPIError:
            return -1

    n = BATCHES * PER_BATCH
    try:
        for k in range(BATCHES):
            with f.open("ab") as out:
                out.write(b"".join(write_line(rollout(f"r{k}-{i}", step=k)) for i in range(PER_BATCH)))
            if k in (2, 5):  # mid-ingest: the worker has lines left to read
                time.sleep(0.3)
                restart()
                _admin_when_up().close()
        assert wait_for(lambda: count(sa.select(sa.func.count()).select_from(R)) == n, 180), \
            count(sa.select(sa.func.count()).select_from(R))
        assert wait_for(lambda: count(sa.select(sa.func.sum(S.c.records))) == n, 60)
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count(sa.distinct(R.c.rollout_id)))).scalar_one() == n
            assert conn.execute(sa.select(sa.func.sum(S.c.rejected))).scalar_one() == 0
            assert conn.execute(sa.select(sa.func.count()).select_from(Q)).scalar_one() == 0
            row = conn.execute(sa.select(S.c.offset, S.c.line)).one()
        assert row.offset == f.stat().st_size and row.line == n  # every line read once, to the end
    finally:
        err = stop_worker_and_drop(proc, engine, name, admin=_admin_when_up)
    assert proc.returncode == 0 and "Traceback" not in err, err[-3000:]
