"""Findings as stored and shown: group findings computed at ingest and recomputed when a member
changes, the indexed filter, pages that never recompute a check, and the migration of old kinds."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from app.db import models
from app.db.engine import make_engine
from app.db.migrate import alembic_config, upgrade
from app.queries.common import R
from app.queries.findings import has_finding
from tests.helpers import ingest, rollout, write_jsonl


def _group(prefix: str, indices, size: int, group: str = "g"):
    rs = [rollout(f"{prefix}{n}", group=group, index=i, reward=float(n % 2)) for n, i in enumerate(indices)]
    for r in rs:
        r.group.size = size
    return rs


def _group_rows(engine, group: str):
    F = models.Finding.__table__
    with engine.connect() as conn:
        return conn.execute(sa.select(F.c.kind, F.c.message, F.c.rollout_pk, F.c.run_id)
                            .where(F.c.group_id == group, F.c.severity != "skipped").order_by(F.c.pk)).all()


def test_group_findings_are_stored_recomputed_and_filterable(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", _group("a", [0, 1], 3)))
    assert [(k, m, pk, run) for k, m, pk, run in _group_rows(engine, "g")] == [
        ("group_size_mismatch", "declared size 3 but 2 members", None, "r1")]
    listed = client.get("/runs/r1/rollouts.json?flag=group_size_mismatch").json()["rollouts"]
    assert sorted(r["rollout_id"] for r in listed) == ["a0", "a1"]
    # a third member arrives in another file: the group is whole, its finding goes
    ingest(engine, write_jsonl(tmp_path / "b.jsonl", [_group("b", [2], 3)[0]]))
    assert _group_rows(engine, "g") == []
    assert client.get("/runs/r1/rollouts.json?flag=group_size_mismatch").json()["rollouts"] == []
    # a member is replaced (same id, other content) and now repeats index 0
    moved = _group("b", [0], 3)[0]
    ingest(engine, write_jsonl(tmp_path / "c.jsonl", [moved]))
    assert [k for k, *_ in _group_rows(engine, "g")] == ["duplicate_group_index"]
    d = client.get("/runs/r1/groups/g.json").json()
    assert d["warnings"] == ["duplicate indices #0 ×2"]
    assert [(f["kind"], f["label"]) for f in d["findings"]] == [("duplicate_group_index", "duplicate group index")]
    rows = client.get("/runs/r1/rollouts.json?flag=duplicate_group_index").json()["rollouts"]
    assert sorted(r["rollout_id"] for r in rows) == ["a0", "a1", "b0"]
    assert "duplicate_group_index" in client.get("/runs/r1/rollouts").text.split('name="flag"')[1].split("</select>")[0]
    # re-ingesting the same data changes nothing
    before = _group_rows(engine, "g")
    ingest(engine, tmp_path / "c.jsonl")
    assert _group_rows(engine, "g") == before


def test_the_filter_is_an_exists_on_the_finding_table_not_a_like():
    sql = str(sa.select(R.c.pk).where(has_finding("token_drift")))
    assert "EXISTS" in sql and "finding.kind" in sql and "LIKE" not in sql.upper()
    group_sql = str(sa.select(R.c.pk).where(has_finding("group_size_mismatch")))
    assert "finding.group_id" in group_sql and "finding.rollout_pk IS NULL" in group_sql
    index_cols = {tuple(c.name for c in ix.columns) for ix in models.Finding.__table__.indexes}
    assert ("kind", "rollout_pk") in index_cols and ("run_id", "group_id") in index_cols


def test_page_shows_empty_response_only_where_the_stored_check_fired(client, engine, tmp_path):
    # The source recorded the turn's tokens but no text: the check deliberately does not fire.
    r = rollout("t", messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}])
    e = rollout("e", messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}])
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [r, e]))
    d = client.get("/runs/r1/rollouts/t.json").json()
    assert d["findings"] == [] and not any(m["empty_response"] for m in d["messages"])
    assert "(empty response" not in client.get("/runs/r1/rollouts/t").text
    d = client.get("/runs/r1/rollouts/e.json").json()
    assert [f["kind"] for f in d["findings"]] == ["empty_response"]
    assert [m["empty_response"] for m in d["messages"]] == [False, True]
    assert "(empty response, 3 tokens" in client.get("/runs/r1/rollouts/e").text


def test_migration_renames_old_len_mismatch_kinds(empty_db_url):
    eng = make_engine(empty_db_url, writer=True)
    try:
        cfg = alembic_config()
        with eng.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0002")
            conn.execute(sa.text("INSERT INTO run (id, type, created_at) VALUES ('r', 'train', CURRENT_TIMESTAMP)"))
            conn.execute(sa.text(
                "INSERT INTO rollout (run_id, rollout_id, attempt, ending, reward_status, n_nodes, n_turns,"
                " n_tool_calls,"
                " n_tokens, n_trained_tokens, n_branches, flags, content_hash, ingested_at) VALUES ('r', 'x', 0,"
                " 'unknown', 'ok', 0, 0, 0, 0, 0, 0, :flags, 'h', CURRENT_TIMESTAMP)"),
                {"flags": '["logprob_len_mismatch", "mask_len_mismatch", "token_drift"]'})
            pk = conn.execute(sa.text("SELECT pk FROM rollout")).scalar_one()
            for kind in ("logprob_len_mismatch", "mask_len_mismatch", "token_drift"):
                conn.execute(sa.text("INSERT INTO finding (rollout_pk, kind, severity, message) "
                                     "VALUES (:pk, :k, 'error', '')"),
                             {"pk": pk, "k": kind})
        upgrade(eng)
        with eng.connect() as conn:
            kinds = sorted(conn.execute(sa.text("SELECT kind FROM finding")).scalars())
            flags = conn.execute(sa.select(models.Rollout.__table__.c.flags)).scalar_one()
        assert kinds == ["array_len_mismatch", "array_len_mismatch", "token_drift"]
        assert flags == ["array_len_mismatch", "token_drift"]
    finally:
        eng.dispose()
