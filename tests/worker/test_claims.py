"""Claims on spool files are tied to their worker's life on Postgres (app/worker/spool.py): a
worker SIGKILLed in the middle of a file is followed by one that takes the file over at once
(its session lock died with it), not after the 60 s lease; a live worker's claim is never taken;
a claim whose holder cannot be checked is waited for, and the worker says which file waits on
whose lease and until when. Real worker processes, real Postgres."""
from __future__ import annotations

import signal
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from app.db import models
from app.db.engine import make_engine
from app.db.migrate import upgrade
from app.worker.claims import LEASE
from app.worker.run import run, wait_for
from app.worker.spool import Spool
from ingest.formats.native import write_line
from tests.helpers import rollout
from tests.worker import new_pg_database, rollouts_stored, start_worker, stop_worker_and_drop

R, S = models.Rollout.__table__, models.SpoolFile.__table__
N = 600


def _claim(engine):
    with engine.connect() as conn:
        return conn.execute(sa.select(S.c.claimed_by, S.c.claimed_until, S.c.offset)).first()


@pytest.mark.postgres
@pytest.mark.slow
def test_a_worker_restarted_after_sigkill_takes_over_its_dead_predecessors_file_at_once(tmp_path, monkeypatch):
    name, url = new_pg_database("rs_claims")
    spool = tmp_path / "spool" / "c"
    spool.mkdir(parents=True)
    f = spool / "big.jsonl"
    f.write_bytes(b"".join(write_line(rollout(f"r{i:05d}")) for i in range(N)))
    monkeypatch.setenv("ROLLSCOPE_WORKER__BATCH_SIZE", "3")  # many small commits: the file stays claimed a while
    engine = make_engine(url)
    first = start_worker(url, tmp_path / "spool")
    second = None
    try:
        # killed in the middle of the file, while it holds the claim
        assert wait_for(lambda: rollouts_stored(engine) >= 30 and (_claim(engine) or (None,))[0] is not None, 60)
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        held, stored = _claim(engine), rollouts_stored(engine)
        assert held.claimed_by is not None and held.offset < f.stat().st_size, held
        killed_at = time.monotonic()
        # the successor reads the rest in big batches: what is proven is the takeover, not 190 small commits
        monkeypatch.setenv("ROLLSCOPE_WORKER__BATCH_SIZE", "200")
        second = start_worker(url, tmp_path / "spool")
        # the file is read on well before the dead worker's lease (60 s from its last commit) lapses
        assert wait_for(lambda: rollouts_stored(engine) > stored, LEASE.total_seconds() / 3), rollouts_stored(engine)
        assert time.monotonic() - killed_at < LEASE.total_seconds() / 3
        assert wait_for(lambda: rollouts_stored(engine) == N, 180), rollouts_stored(engine)
    finally:
        if first.poll() is None:
            first.kill()
        err = stop_worker_and_drop(second, engine, name) if second is not None else ""
    assert second.returncode == 0 and "Traceback" not in err, err[-3000:]
    assert f"{f}: taking over from worker {held.claimed_by}: its database session is gone" in err, err[-3000:]


@pytest.mark.postgres
def test_a_live_workers_claim_is_not_taken_and_an_unknown_holder_is_named_with_its_lease(tmp_path):
    name, url = new_pg_database("rs_claims")
    engine = make_engine(url, writer=True)
    upgrade(engine)
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "a.jsonl").write_bytes(write_line(rollout("a1")))
    live = Spool(engine, [spool])  # another worker, alive: it holds its session lock
    try:
        live.hold_session()
        live.sync_files()
        until = models.utcnow() + LEASE
        with engine.begin() as conn:
            conn.execute(S.update().values(claimed_by=live.worker_id, claimed_until=until))
        said: list[str] = []
        run(engine, [spool], once=True, log=said.append)
        assert rollouts_stored(engine) == 0 and _claim(engine).claimed_by == live.worker_id  # not taken
        assert not any("taking over" in m for m in said), said
        # a holder that names no session (an older worker) is waited for, and said so once
        with engine.begin() as conn:
            conn.execute(S.update().values(claimed_by="old-host:4242:abc123", claimed_until=until))
        said.clear()
        run(engine, [spool], once=True, log=said.append)
        assert rollouts_stored(engine) == 0
        waits = [m for m in said if "waits for worker old-host:4242:abc123's lease until "
                 f"{until:%Y-%m-%d %H:%M:%S} UTC" in m]
        assert len(waits) == 1 and waits[0].startswith(f"{spool / 'a.jsonl'}: "), said
        # once the lease has lapsed the file is read, and the takeover said
        with engine.begin() as conn:
            conn.execute(S.update().values(claimed_until=models.utcnow() - timedelta(seconds=1)))
        said.clear()
        run(engine, [spool], once=True, log=said.append)
        assert rollouts_stored(engine) == 1
        assert any("taking over from worker old-host:4242:abc123: its lease lapsed" in m for m in said), said
    finally:
        live.close()
        engine.dispose()
        from tests.conftest import _pg_admin

        with _pg_admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
