"""The per-rollout fallback keeps every rule of the batch path (app/store/write.py `decide`): the
later file of an ingest wins, `force` replaces, and records that land clear their quarantine
entries, the whole-file one included. Each batch here fails on one rollout the database refuses
(a batch hook, as a column refuses a value it cannot hold), so it is written again one rollout
per savepoint; on SQLite and Postgres."""
from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from app.db import models
from app.store import write
from app.store.write import store
from tests.helpers import ingest, rollout, write_jsonl

R, Q = models.Rollout.__table__, models.Quarantine.__table__


def bad(rid: str = "bad"):
    return rollout(rid)


@pytest.fixture(autouse=True)
def refuse_bad(monkeypatch):
    """The database refuses the rollout "bad" (inside the batch's transaction, like a value no
    column holds): its batch fails and is written again one rollout per savepoint."""
    def refuse(conn, written):
        if any(r["rollout_id"] == "bad" for r in written.inserted):
            raise ValueError("the database refuses this rollout")

    monkeypatch.setattr(write, "BATCH_HOOKS", [*write.BATCH_HOOKS, refuse])


def rows(engine) -> list[tuple]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(R.c.rollout_id, R.c.pk, R.c.reward, R.c.source_file)).all())


def entries(engine) -> list[tuple]:
    with engine.connect() as conn:
        return sorted((Path(f).name, n) for f, n in conn.execute(sa.select(Q.c.source_file, Q.c.line)))


def test_the_fallback_keeps_the_later_file_of_an_ingest(engine, tmp_path):
    folder = tmp_path / "two"
    folder.mkdir()
    # the earlier file holds the rollout no column can hold: its batches always fall back
    write_jsonl(folder / "a.jsonl", [*(rollout(f"x{i}", reward=0.0) for i in range(3)), bad()])
    write_jsonl(folder / "b.jsonl", [rollout(f"x{i}", reward=1.0) for i in range(3)])
    first = ingest(engine, folder)
    assert first.total.fallbacks == 1 and first.total.rejected == 1
    assert (first.total.inserted, first.total.replaced, first.total.repeated) == (3, 0, 3)
    before = rows(engine)
    assert [(r.reward, Path(r.source_file).name) for r in before] == [(1.0, "b.jsonl")] * 3
    again = ingest(engine, folder)
    assert again.total.fallbacks == 1
    # a.jsonl's records are skipped in the fallback too (b.jsonl has them), b.jsonl's unchanged
    assert (again.total.inserted, again.total.replaced, again.total.unchanged, again.total.repeated) == (0, 0, 3, 3)
    assert rows(engine) == before  # same rows, same keys: nothing rewritten back and forth


def test_the_fallback_clears_the_quarantine_entries_of_records_that_land(engine, tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"neither": "a rollout"}\n')  # no reader knows it: rejected as a whole
    assert not ingest(engine, path).ok
    assert entries(engine) == [("r.jsonl", None)]
    path.write_bytes(write_jsonl(tmp_path / "g.jsonl", [rollout("a")]).read_bytes() + b'{"id": \n')
    assert ingest(engine, path).total.inserted == 1
    assert entries(engine) == [("r.jsonl", 2)]  # the whole-file entry went, the torn line stays
    path.write_bytes(write_jsonl(tmp_path / "g.jsonl", [rollout("a"), rollout("b"), bad()]).read_bytes())
    report = ingest(engine, path)
    assert report.total.fallbacks == 1 and (report.total.inserted, report.total.unchanged) == (1, 1)
    assert report.total.cleared == 1  # line 2 landed: its entry went
    assert entries(engine) == [("r.jsonl", 3)]  # the rollout no column holds, on its line


def test_the_fallback_clears_a_whole_file_entry(engine, tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_bytes(b'{"neither": "a rollout"}\n')
    assert not ingest(engine, path).ok
    assert entries(engine) == [("w.jsonl", None)]
    write_jsonl(path, [rollout("a"), bad(), rollout("c")])
    report = ingest(engine, path)
    assert report.total.fallbacks == 1 and report.total.inserted == 2
    assert entries(engine) == [("w.jsonl", 2)]  # read record by record: the whole-file entry went


def test_the_fallback_replaces_unchanged_rollouts_with_force(engine):
    first = store(engine, [rollout("a"), rollout("b")])
    assert first.inserted == 2 and first.fallbacks == 0
    pks = [r.pk for r in rows(engine)]
    forced = store(engine, [rollout("a"), rollout("b"), bad()], force=True)
    assert forced.fallbacks == 1 and forced.replaced == 2 and forced.rejected == 1
    assert forced.outcomes[("r1", "a", 0)] == "replaced" and forced.outcomes[("r1", "bad", 0)] == "rejected"
    assert [r.pk for r in rows(engine)] != pks
    plain = store(engine, [rollout("a"), rollout("b"), bad()])
    assert plain.fallbacks == 1 and plain.unchanged == 2 and plain.replaced == 0
