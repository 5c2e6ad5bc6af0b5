"""A run deleted while `rollscope ingest` writes into it: the later batches make the run again
and carry on (app/store/write.py `_ensure_runs`, every batch), and no error or quarantine entry
carries SQL text (app/store/prepare.py `cause`)."""
from __future__ import annotations

import time

import sqlalchemy as sa
from sqlmodel import Session

from app.db import models
from app.queries.runs import delete_run
from app.worker.sync import ingest_paths
from ingest.formats.base import ReadContext
from tests.helpers import rollout, write_jsonl

N, BATCH, DELETE_AT = 20, 5, 11  # the run is deleted when the 11th record has been read


def wait_for_rollouts(engine, n: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            if conn.execute(sa.select(sa.func.count()).select_from(models.Rollout.__table__)).scalar() >= n:
                return
        time.sleep(0.01)
    raise AssertionError(f"{n} rollouts never committed")


def test_deleting_the_run_between_batches_does_not_stop_the_ingest(tmp_path, engine):
    path = write_jsonl(tmp_path / "big.jsonl", [rollout(f"r{i}", run="race", step=i) for i in range(1, N + 1)])
    seen, deleted = [0], []

    def on_item(item):
        seen[0] += 1
        if seen[0] == DELETE_AT:
            wait_for_rollouts(engine, DELETE_AT - 1)  # batches 1-2 committed (Postgres writes them in a thread)
            with Session(engine) as s:
                deleted.append(delete_run(session=s, run_id="race"))
                s.commit()

    report = ingest_paths(engine, [path], ReadContext(), on_item=on_item, batch_size=BATCH)
    assert deleted and deleted[0] >= BATCH, report.errors  # it removed stored rollouts
    assert report.errors == []
    with engine.connect() as conn:
        ids = set(conn.execute(sa.select(models.Rollout.__table__.c.rollout_id)
                               .where(models.Rollout.__table__.c.run_id == "race")).scalars())
        assert {f"r{i}" for i in range(DELETE_AT, N + 1)} <= ids  # every later rollout is stored
        assert conn.execute(sa.select(models.Run.__table__.c.id)).scalars().all() == ["race"]
        assert conn.execute(sa.select(sa.func.count()).select_from(models.Quarantine.__table__)).scalar() == 0


def test_a_file_stopped_by_the_database_is_named_in_one_line_without_sql(tmp_path, engine, monkeypatch):
    """Whatever the database refuses that stops a file, its rejection says the driver's first line,
    never SQLAlchemy's statement and parameters (which hold trace text)."""
    import app.worker.sync as sync

    def refuse(*a, **kw):
        raise sa.exc.IntegrityError("INSERT INTO rollout (run_id, secret) VALUES (?, ?)", ("race", "hunter2"),
                                    Exception("FOREIGN KEY constraint failed\nDETAIL: more"))

    monkeypatch.setattr(sync, "store", refuse)
    path = write_jsonl(tmp_path / "big.jsonl", [rollout("r1", run="race")])
    report = ingest_paths(engine, [path], ReadContext(), batch_size=BATCH)
    [err] = report.errors
    assert err.message == "ingest of this file stopped: Exception: FOREIGN KEY constraint failed"
    with engine.connect() as conn:
        [(error, raw)] = conn.execute(sa.select(models.Quarantine.__table__.c.error,
                                                models.Quarantine.__table__.c.raw)).all()
    assert "INSERT" not in error and "hunter2" not in error and "\n" not in error
