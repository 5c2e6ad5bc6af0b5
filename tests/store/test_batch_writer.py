"""The batched store (app/store/write.py): a constant number of statements per batch, the
per-rollout fallback when a batch fails, and the hooks that run inside the batch transaction."""
from __future__ import annotations

import sqlalchemy as sa

from app.db import models
from app.store import outage, write
from app.store.prepare import content_hash, prepare
from tests.helpers import ingest, rollout, write_jsonl

R = models.Rollout.__table__


def count(engine, table) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()


def statements(engine, fn):
    n = [0]

    def on_execute(*_a):
        n[0] += 1

    sa.event.listen(engine, "before_cursor_execute", on_execute)
    try:
        result = fn()
    finally:
        sa.event.remove(engine, "before_cursor_execute", on_execute)
    return n[0], result


def test_a_batch_of_200_costs_at_most_11_statements(engine, tmp_path, monkeypatch):
    # the writer's own statements (hooks: the test below); the group pass reads the members, then
    # the one-member groups of their steps (split_group's siblings: one summary query), deletes and
    # inserts; prompt texts are read only at steps that have one-member groups (none here)
    monkeypatch.setattr(write, "BATCH_HOOKS", [])
    path = write_jsonl(tmp_path / "a.jsonl", [rollout(f"a{i}", group=f"g{i % 8}", index=i // 8) for i in range(400)])
    n, report = statements(engine, lambda: ingest(engine, path))
    assert report.total.inserted == 400 and report.total.batches == 2 and report.total.fallbacks == 0
    # every batch makes its runs (a run deleted mid-ingest is made again); + the call's one look at
    # the file's quarantine entries (`has_entries`); + per 200 lines read, one look-up of their raw
    # hashes (app/store/known.py: a SELECT, and on SQLite its BEGIN)
    assert n <= 2 * (11 + 2) + 1, n
    # unchanged on re-ingest: fewer still; one changed rollout replaces only itself
    n, again = statements(engine, lambda: ingest(engine, path))
    assert again.total.unchanged == 400 and n <= 2 * 5, n
    write_jsonl(path, [rollout(f"a{i}", group=f"g{i % 8}", index=i // 8, reward=0.0 if i == 7 else 1.0)
                       for i in range(400)])
    n, third = statements(engine, lambda: ingest(engine, path))
    assert (third.total.replaced, third.total.unchanged, third.total.replaced_ids) == (1, 399, [("r1", "a7", 0)])
    assert n <= 2 * 11 and count(engine, R) == 400 and count(engine, models.Node.__table__) == 800


def test_the_analytics_hooks_cost_at_most_13_statements_per_batch_whatever_the_steps(engine, tmp_path, monkeypatch):
    # rollups (the steps of the batch's groups, the steps' rows, their findings, their old task
    # rows, one upsert per step and task table, the run-task rows read and upserted; Postgres adds
    # a lock statement for the steps and one for the run-task rows), step alerts (the run's steps
    # with their alerts, the judged steps' and windows' rows; a write only when an alert comes or
    # goes: app/store/step_alerts.py) and search (one executemany; SQLite adds the INSERT ... SELECT
    # into its FTS5 index): the same cost whether a batch touches one step or twenty
    for n_steps, run in ((1, "one"), (20, "many")):
        path = write_jsonl(tmp_path / f"{run}.jsonl", [
            rollout(f"a{i}", run=run, group=f"g{i % 8}-{i % n_steps}", index=i // 8, step=i % n_steps,
                    task={"key": f"t{i % 5}"})
            for i in range(400)])
        with_hooks, report = statements(engine, lambda: ingest(engine, path))
        assert report.total.inserted == 400 and report.total.batches == 2
        monkeypatch.setattr(write, "BATCH_HOOKS", [])
        without, _ = statements(engine, lambda: ingest(engine, write_jsonl(tmp_path / f"{run}2.jsonl", [
            rollout(f"a{i}", run=run + "2", group=f"g{i % 8}-{i % n_steps}", index=i // 8, step=i % n_steps,
                    task={"key": f"t{i % 5}"}) for i in range(400)])))
        monkeypatch.undo()
        assert with_hooks - without <= 2 * 13, (n_steps, with_hooks, without)


def test_the_hash_is_the_canonical_json_and_prepare_matches(engine):
    r = rollout("x1")
    assert prepare(r).summary["content_hash"] == content_hash(r)
    other = rollout("x1", reward=0.5)
    assert content_hash(other) != content_hash(r)


def test_hooks_see_inserted_and_deleted_rows_in_the_same_transaction(engine, tmp_path, monkeypatch):
    seen = []

    def hook(conn, written):
        # inside the transaction: the rows just written are visible to it
        pks = [row["pk"] for row in written.inserted]
        here = conn.execute(sa.select(sa.func.count()).select_from(R).where(R.c.pk.in_(pks))).scalar_one()
        seen.append(([r["rollout_id"] for r in written.inserted], [r["rollout_id"] for r in written.deleted],
                     here, {r["step"] for r in written.inserted}))

    monkeypatch.setattr(write, "BATCH_HOOKS", [hook])
    path = write_jsonl(tmp_path / "a.jsonl", [rollout("a"), rollout("b", step=3)])
    ingest(engine, path)
    assert seen == [(["a", "b"], [], 2, {0, 3})]
    write_jsonl(path, [rollout("a"), rollout("b", step=3, reward=0.0)])
    ingest(engine, path)
    assert seen[1] == (["b"], ["b"], 1, {3})


def test_a_failing_batch_is_written_one_by_one_and_only_the_bad_rollout_is_lost(engine, tmp_path, monkeypatch):
    def refuse_bad(conn, written):
        if any(r["rollout_id"] == "bad" for r in written.inserted):
            raise ValueError("this hook refuses 'bad'")

    monkeypatch.setattr(write, "BATCH_HOOKS", [refuse_bad])
    path = write_jsonl(tmp_path / "a.jsonl", [rollout("ok1"), rollout("bad"), rollout("ok2")])
    report = ingest(engine, path)
    assert report.total.fallbacks == 1 and report.total.inserted == 2
    (err,) = report.errors
    assert err.line == 2 and "cannot store rollout 'bad'" in err.message and "refuses" in err.message
    with engine.connect() as conn:
        assert sorted(conn.execute(sa.select(R.c.rollout_id)).scalars()) == ["ok1", "ok2"]
    assert count(engine, models.Quarantine.__table__) == 1


def test_rejections_are_quarantined_with_their_batch(engine, tmp_path, monkeypatch):
    monkeypatch.setattr(write, "BATCH_HOOKS", [])  # the writer's own statements
    path = tmp_path / "mixed.jsonl"
    good = write_jsonl(tmp_path / "g.jsonl", [rollout("g1"), rollout("g2")]).read_bytes().splitlines(keepends=True)
    path.write_bytes(good[0] + b'{"schema": "rollscope/1", "id": \n' + good[1])
    n, report = statements(engine, lambda: ingest(engine, path))
    assert report.total.inserted == 2 and [e.line for e in report.errors] == [2]
    # (+ 2: the look-up of the lines' raw hashes, app/store/known.py, and on SQLite its BEGIN)
    assert count(engine, models.Quarantine.__table__) == 1 and n <= 10 + 2
    again = ingest(engine, path)
    assert again.total.unchanged == 2 and count(engine, models.Quarantine.__table__) == 1


def test_a_transaction_that_gives_way_to_another_writer_is_tried_again_not_quarantined(engine, tmp_path, monkeypatch):
    # Postgres aborts one of two deadlocked transactions (40P01): not the data's fault. The batch
    # and its one-by-one fallback are tried again; every rollout lands, none is quarantined.
    import psycopg

    monkeypatch.setattr(outage, "retry_waits", lambda _seconds=0: [0.01] * 3)
    left = [3]  # the batch, its fallback, and the fallback's retry each give way once

    def gives_way(conn, written):
        if left[0]:
            left[0] -= 1
            raise sa.exc.OperationalError("SELECT pg_advisory_xact_lock(...)", {},
                                          psycopg.errors.DeadlockDetected("deadlock detected"))

    monkeypatch.setattr(write, "BATCH_HOOKS", [*write.BATCH_HOOKS, gives_way])
    report = ingest(engine, write_jsonl(tmp_path / "d.jsonl", [rollout(f"d{i}") for i in range(5)]))
    assert left[0] == 0 and report.total.inserted == 5 and report.total.rejected == 0
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(models.Quarantine.__table__)).scalar_one() == 0
        assert conn.execute(sa.select(sa.func.count()).select_from(R)).scalar_one() == 5
