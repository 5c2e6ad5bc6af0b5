"""Unchanged data skips the work (ingest/known.py, app/store/known.py): a native line stored with
these very bytes is counted unchanged without being decoded, checked or written, and every other
line takes the full path, with the same counts and the same stored result as before."""
from __future__ import annotations

import sqlalchemy as sa

from app.db import models
from ingest import stages
from ingest.formats.native import write_line
from tests.helpers import ingest, rollout, write_jsonl

R = models.Rollout.__table__


def rows(engine) -> dict[str, tuple]:
    with engine.connect() as conn:
        return {r.rollout_id: (r.reward, r.raw_hash, r.content_hash, r.pk)
                for r in conn.execute(sa.select(R.c.rollout_id, R.c.reward, R.c.raw_hash, R.c.content_hash, R.c.pk))}


def test_an_unchanged_file_is_not_decoded_again(engine, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [rollout(f"a{i}") for i in range(250)])
    with stages.measure() as first:
        report = ingest(engine, path)
    assert report.total.inserted == 250 and first["decode"][1] == 250 and first["checks"][1] == 250
    before = rows(engine)
    assert all(len(raw) == 32 for _, raw, _, _ in before.values())  # each rollout keeps its line's hash
    with stages.measure() as again:
        report = ingest(engine, path)
    assert (report.total.inserted, report.total.replaced, report.total.unchanged) == (0, 0, 250)
    assert report.total.runs == {"r1"} and set(report.total.outcomes.values()) == {"unchanged"}
    assert "decode" not in again and "checks" not in again and "rows" not in again
    assert again["write"][1] == 1  # only the file's final look at its quarantine entries, empty
    assert again["hash"][1] == 250  # hashed, looked up, skipped
    assert rows(engine) == before


def test_a_changed_line_is_still_read_and_replaced(engine, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [rollout(f"a{i}") for i in range(5)])
    ingest(engine, path)
    before = rows(engine)
    write_jsonl(path, [rollout(f"a{i}", reward=0.0 if i == 3 else 1.0) for i in range(5)])
    with stages.measure() as table:
        report = ingest(engine, path)
    assert (report.total.replaced, report.total.unchanged, report.total.replaced_ids) == (1, 4, [("r1", "a3", 0)])
    assert table["decode"][1] == 1  # only the changed line
    after = rows(engine)
    assert after["a3"][0] == 0.0 and after["a3"][1] != before["a3"][1] and after["a3"][2] != before["a3"][2]
    assert {k: v for k, v in after.items() if k != "a3"} == {k: v for k, v in before.items() if k != "a3"}


def test_the_same_bytes_read_another_way_are_not_taken_for_known(engine, tmp_path):
    # the run a record falls under is part of what its bytes mean: --run makes other rollouts
    path = write_jsonl(tmp_path / "a.jsonl", [rollout("a1")])
    ingest(engine, path)
    report = ingest(engine, path, run="other")
    assert report.total.inserted == 1 and report.total.unchanged == 0
    again = ingest(engine, path, run="other")
    assert again.total.unchanged == 1 and again.total.runs == {"other"}


def test_an_id_met_twice_in_a_file_is_read_in_full_and_the_last_line_wins(engine, tmp_path):
    # a0's stored copy comes from its last line; on re-ingest the first line is held back for it
    # (app/store/write.py `decide`: "later") and nothing is rewritten (it used to replace a0 twice)
    path = tmp_path / "a.jsonl"
    path.write_bytes(write_line(rollout("a0", reward=0.0)) + write_line(rollout("a1"))
                     + write_line(rollout("a0", reward=1.0)))
    first = ingest(engine, path)
    again = ingest(engine, path)
    for report in (first, again):
        assert report.total.repeated == 1
    assert (first.total.inserted, first.total.replaced) == (2, 0)
    assert (again.total.inserted, again.total.replaced, again.total.unchanged) == (0, 0, 2)
    assert rows(engine)["a0"][0] == 1.0 and rows(engine)["a1"][0] == 1.0


def test_a_database_away_at_the_look_up_makes_the_lines_unknown_not_lost():
    # the look-up is an optimisation: when it cannot run, the lines are read in full and their
    # batch waits out the outage with the writer's own retries
    from app.db.engine import make_engine
    from app.store.known import known_lookup

    gone = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/test")  # nothing listens on port 1
    try:
        assert known_lookup(gone)(["0" * 32]) == {}
    finally:
        gone.dispose()
