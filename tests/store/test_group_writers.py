"""Two writers storing members of one group at the same moment: the group's findings are stored
once, computed from all its members (Postgres; SQLite has one writer at a time)."""
from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from app.db import models
from app.store.prepare import prepare_all
from app.store.write import ensure_run, write_in
from ingest.schema import Rollout

F = models.Finding.__table__


def members(ids: list[str]) -> list[Rollout]:
    """Members of group g of run r, each with reward 0.5 and group size 4: together they form a
    zero-variance group."""
    return [Rollout.model_validate({
        "id": rid, "run": {"id": "r"}, "step": 0, "reward": 0.5, "group": {"id": "g", "index": int(rid[1:]), "size": 4},
        "nodes": [{"message": {"role": "user", "content": "q"}},
                  {"parent": 0, "message": {"role": "assistant", "content": "a"}, "sampled": True}]})
        for rid in ids]


def group_findings(engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.select(F.c.kind, F.c.message).where(
            F.c.rollout_pk.is_(None), F.c.run_id == "r", F.c.group_id == "g").order_by(F.c.kind))]


def test_concurrent_writers_store_group_findings_once(engine):
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite serialises writers with its database lock; the race needs two Postgres writers")
    with engine.begin() as conn:
        ensure_run(conn, "r")  # committed, so neither writer waits on the other's run row
    first, first_errors = prepare_all(members(["m0", "m1"]))
    second, second_errors = prepare_all(members(["m2", "m3"]))
    c1 = engine.connect()
    t1 = c1.begin()
    write_in(c1, first, first_errors)  # holds the group's lock until it commits

    done = threading.Event()

    def second_writer():
        with engine.begin() as c2:
            write_in(c2, second, second_errors)
        done.set()

    thread = threading.Thread(target=second_writer)
    thread.start()
    time.sleep(1.0)
    assert not done.is_set(), "the second writer must wait for the first's group lock"
    t1.commit()
    c1.close()
    thread.join(timeout=30)
    assert done.is_set()
    kinds = [k for k, _ in group_findings(engine)]
    assert kinds.count("zero_variance_group") == 1, kinds
    assert "group_size_mismatch" not in kinds  # computed from all four members, not the first two
