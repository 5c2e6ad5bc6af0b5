"""The Trackio files frozen in tests/fixtures/realdata/trackio/v0.43.0/ (written by the real
trackio 0.43.0, see MANIFEST.md), read without trackio installed. The live comparison with what
trackio itself reads back is tests/producers/test_trackio.py."""
from __future__ import annotations

import sqlite3

from ingest.formats import registry
from ingest.formats.base import ReadContext
from ingest.source import RecordError, open_source
from tests.conftest import FIXTURES

V = FIXTURES / "realdata" / "trackio" / "v0.43.0"


def read(path, ctx=None):
    ctx = ctx or ReadContext()
    items = list(registry.get("trackio").read(open_source(path), ctx))
    assert not [i for i in items if isinstance(i, RecordError)]
    return {r.id: r for r in items}, ctx


def test_project_db():
    got, _ = read(V / "rl-project.db")
    with sqlite3.connect(f"file:{V / 'rl-project.db'}?immutable=1", uri=True) as conn:
        rows = conn.execute("SELECT id, step, log_id, key, trace_index FROM traces ORDER BY rowid").fetchall()
    assert list(got) == [r[0] for r in rows]
    for tid, step, log_id, key, index in rows:
        r = got[tid]
        assert (r.run.id, r.step, r.source["line"] > 0, r.source["project"]) == ("grpo-run", step, True, "rl-project")
        if index is None:
            assert r.group is None and r.reward == 0.25  # the single trace: `score`
        elif step < 2:
            assert (r.group.id, r.group.index) == (f"step{step}-prompt", None)
        else:
            assert (r.group.id, r.group.index, r.group.size) == (f"{log_id}:{key}", index, 4)
    first = got[rows[0][0]]
    assert first.metrics == {"reward_mean": 0.5, "kl": 0.0, "train/loss": 0.1}
    assert [n.message.role for n in first.nodes] == ["system", "user", "assistant", "tool", "assistant"]
    assert first.ending.type == "submitted" and first.policy is not None and first.extra["advantage"] == 0.5
    failed = [r for r in got.values() if any(n.message.extra.get("error") for n in r.nodes)]
    assert len(failed) == 3 and all(r.id.endswith(":rollouts:2") for r in failed)


def test_static_export_is_the_same_rollouts():
    db, _ = read(V / "rl-project.db")
    pq, _ = read(V / "static" / "aux" / "traces.parquet")
    assert list(pq) == list(db)
    for tid, r in pq.items():
        a, b = r.model_dump(exclude={"source"}), db[tid].model_dump(exclude={"source"})
        assert a == b, tid


def test_edge_db_endings():
    got, _ = read(V / "rl-edge.db")
    assert [r.ending.type for r in got.values()] == ["unknown", "error", "error", "length_cut", "submitted"]


def test_inbox_fragment_and_session_file():
    (fragment,) = sorted((V / "inbox").rglob("*.jsonl"))
    got, _ = read(fragment)
    assert len(got) == 13 and all(r.run.id == "grpo-run" for r in got.values())
    (session,) = sorted((V / "traces").rglob("*.jsonl"))
    got, ctx = read(session)
    assert got == {} and "trace session file" in ctx.notes[str(session)]
    got, ctx = read(V / "static" / "metrics.parquet")
    assert got == {} and "(no traces): not read" in ctx.notes[str(V / "static" / "metrics.parquet")]


def test_opening_leaves_no_wal_files(tmp_path):
    import shutil

    db = tmp_path / "p.db"
    shutil.copy(V / "rl-project.db", db)
    read(db)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.db"]


def test_a_run_still_logging_is_read_with_its_wal(tmp_path):
    """While trackio logs, the database is in WAL mode and recent rows may be only in `-wal`: the
    reader opens it read-only (not `immutable`) then, and sees them."""
    import shutil

    db = tmp_path / "live.db"
    shutil.copy(V / "rl-project.db", db)
    writer = sqlite3.connect(db)
    try:
        assert writer.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("UPDATE traces SET metadata = ? WHERE rowid = (SELECT MIN(rowid) FROM traces)",
                       (b'{"reward": 0.75}',))
        writer.commit()
        assert (tmp_path / "live.db-wal").stat().st_size > 0
        got, _ = read(db)
        assert next(iter(got.values())).reward == 0.75
    finally:
        writer.close()


def test_two_trackio_runs_with_one_name_stay_apart(tmp_path):
    import shutil

    db = tmp_path / "two.db"
    shutil.copy(V / "rl-project.db", db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE traces SET run_id = 'ffffffff00000000', id = 'x' || id WHERE step = 2")
    got, _ = read(db)
    runs = {r.run.id for r in got.values()}
    assert len(runs) == 2 and {r.run.name for r in got.values()} == {"grpo-run"}
    assert "grpo-run-ffffffff" in runs


def test_a_line_forced_as_trackio_that_is_no_fragment_is_rejected_naming_what_is_missing(tmp_path):
    """`--format trackio` on lines that are not inbox fragments: each is a RecordError naming its
    line and what it lacks, never dropped as zero records; a real fragment's system-metric and
    alert lines (no traces) are still passed over."""
    import json

    path = tmp_path / "tr.jsonl"
    path.write_text('{"a": 1}\n[1]\n{"v": 1, "kind": "weird", "project": "p", "run": "r"}\n'
                    '{"v": 1, "kind": "system_metric", "project": "p", "run": "r", "metrics": {}}\n')
    items = list(registry.get("trackio").read(open_source(path), ReadContext()))
    assert [(e.line, e.field) for e in items] == [(1, "v"), (2, None), (3, "kind")]
    assert "missing v, kind, project, run" in items[0].message and json.loads(items[0].raw) == {"a": 1}
    assert "got 'weird'" in items[2].message and "array" in items[1].message


def test_reward_breakdown_is_components_beside_the_reward(tmp_path):
    """Trackio metadata `reward_breakdown` (or `rewards` / `reward_components`): the finite parts
    become reward components (weight 1, not summed: `reward` stays the total)."""
    import shutil

    db = tmp_path / "b.db"
    shutil.copy(V / "rl-project.db", db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE traces SET metadata = ? WHERE rowid = (SELECT MIN(rowid) FROM traces)",
                     (b'{"reward": 0.9, "reward_breakdown": {"correct": 1.0, "format": -0.1, "judge": null}}',))
    got, _ = read(db)
    r = next(r for r in got.values() if r.reward == 0.9)
    assert {k: (v.score, v.weight) for k, v in r.rewards.items()} == {"correct": (1.0, 1.0), "format": (-0.1, 1.0)}
    assert r.total_reward() == 0.9 and r.extra["reward_components"]["judge"] is None
