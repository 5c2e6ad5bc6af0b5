"""Scopes on /api/v1 over real HTTP, on SQLite and Postgres: no token 401, a revoked token 401, a
read token cannot write or delete, write labels and notes (per token, shown on the pages,
filterable, kept through re-ingest), admin deletes a run with everything of it; each request is
logged with its token's name. The client does the same over TCP."""
from __future__ import annotations

import logging

import sqlalchemy as sa

from app import auth
from rollscope.client import ApiError, Client
from tests.browser import live_server
from tests.helpers import ingest, rollout, write_jsonl


def _seed(engine, tmp_path, name="a.jsonl", reward=1.0):
    rs = [rollout("x", run="r/1", step=1, reward=reward, task={"key": "t1"}),
          rollout("y", run="r/1", step=1, reward=0.0, task={"key": "t2"}, group="g1", index=0),
          rollout("z", run="other", step=1, task={"key": "t1"})]
    assert ingest(engine, write_jsonl(tmp_path / name, rs)).ok


def _bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_scopes_labels_notes_and_delete(client, engine, tmp_path, caplog):
    _seed(engine, tmp_path)
    read, _ = auth.issue(engine, "read", "dashboard")
    alice, _ = auth.issue(engine, "write", "alice")
    bob, _ = auth.issue(engine, "write", "bob")
    admin, _ = auth.issue(engine, "admin", "ops")
    revoked, old = auth.issue(engine, "admin", "old")
    assert client.get("/api/v1/runs", headers=_bearer(revoked)).status_code == 200  # works until revoked
    assert [t.pk for t in auth.revoke(engine, str(old.pk))] == [old.pk]
    label_url = "/api/v1/runs/r%2F1/rollouts/x/labels/reward-hacking"

    assert client.put(label_url).status_code == 401
    r = client.put(label_url, headers=_bearer(read))
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    assert client.delete("/api/v1/runs/r%2F1", headers=_bearer(read)).status_code == 403
    assert client.delete("/api/v1/runs/r%2F1", headers=_bearer(alice)).status_code == 403
    assert client.delete("/api/v1/runs/r%2F1").status_code == 401
    assert client.get("/api/v1/runs", headers=_bearer("rs_not-a-token")).status_code == 401

    with caplog.at_level(logging.INFO, logger="rollscope.access"):
        assert client.put(label_url, headers=_bearer(alice)).status_code == 204
    assert any("PUT /api/v1/runs/r%2F1/rollouts/x/labels/reward-hacking 204" in m and "token=alice" in m
               for m in caplog.messages), caplog.messages
    assert client.put(label_url, headers=_bearer(alice)).status_code == 204  # idempotent
    assert client.put(label_url, headers=_bearer(bob)).status_code == 204
    assert client.put("/api/v1/runs/r%2F1/rollouts/x/labels/bad%20label", headers=_bearer(bob)).status_code == 422
    labels = client.get("/api/v1/runs/r%2F1/rollouts/x/labels").json()["items"]
    assert [(l["label"], l["author"]) for l in labels] == [("reward-hacking", "alice"), ("reward-hacking", "bob")]
    assert client.put("/api/v1/runs/r%2F1/rollouts/x/notes", json={"text": "<b>looks</b> hacked"},
                      headers=_bearer(alice)).status_code == 204
    assert client.put("/api/v1/runs/r%2F1/rollouts/x/notes", json={"text": "hacked, step 1"},
                      headers=_bearer(alice)).status_code == 204  # replaces alice's
    assert client.put("/api/v1/runs/r%2F1/steps/1/notes", json={"text": "lr spike"},
                      headers=_bearer(bob)).status_code == 204
    assert client.put("/api/v1/runs/r%2F1/steps/1/notes", json={}, headers=_bearer(bob)).status_code == 422

    # filterable, shown, and escaped on the pages
    rows = client.get("/api/v1/runs/r%2F1/rollouts", params={"label": "reward-hacking"}).json()["items"]
    assert [r["rollout_id"] for r in rows] == ["x"]
    page = client.get("/runs/r%2F1/rollouts.json", params={"label": "reward-hacking"}).json()
    assert [(r["rollout_id"], r["labels"]) for r in page["rollouts"]] == [("x", ["reward-hacking"])]
    d = client.get("/runs/r%2F1/rollouts/x.json").json()
    assert [n["text"] for n in d["notes"]] == ["hacked, step 1"] and len(d["labels"]) == 2
    html = client.get("/runs/r%2F1/rollouts/x").text
    assert "reward-hacking" in html and "note by alice" in html and "<b>looks" not in html
    assert "lr spike" in client.get("/runs/r%2F1").text

    # kept through re-ingest of changed content (the rollout row is replaced)
    _seed(engine, tmp_path, "b.jsonl", reward=0.25)
    d = client.get("/runs/r%2F1/rollouts/x.json").json()
    assert d["reward"] == 0.25 and len(d["labels"]) == 2 and d["notes"][0]["author"] == "alice"

    # a token removes only its own
    assert client.delete(label_url, headers=_bearer(alice)).status_code == 204
    assert client.delete(label_url, headers=_bearer(alice)).status_code == 404
    assert [l["author"] for l in client.get("/api/v1/runs/r%2F1/rollouts/x/labels").json()["items"]] == ["bob"]

    notes = client.get("/api/v1/runs/r%2F1/rollouts/x/notes").json()["items"]
    assert [(n["author"], n["text"], n["step"]) for n in notes] == [("alice", "hacked, step 1", None)]
    assert notes[0]["updated_at"].endswith("Z")
    assert [n["text"] for n in client.get("/api/v1/runs/r%2F1/steps/1/notes").json()["items"]] == ["lr spike"]
    assert client.delete("/api/v1/runs/r%2F1/rollouts/x/notes", headers=_bearer(bob)).status_code == 404
    assert client.delete("/api/v1/runs/r%2F1/rollouts/x/notes", headers=_bearer(alice)).status_code == 204
    assert client.get("/api/v1/runs/r%2F1/rollouts/x/notes").json()["items"] == []
    assert client.put("/api/v1/runs/r%2F1/steps/1/notes", json={"text": "again"},
                      headers=_bearer(alice)).status_code == 204
    assert client.delete("/api/v1/runs/r%2F1/steps/1/notes", headers=_bearer(bob)).status_code == 204
    assert [n["author"] for n in client.get("/api/v1/runs/r%2F1/steps/1/notes").json()["items"]] == ["alice"]

    # admin deletes the run, with its rollouts, labels and notes; other runs stay
    assert client.delete("/api/v1/runs/r%2F1", headers=_bearer(revoked)).status_code == 401
    assert client.delete("/api/v1/runs/r%2F1", headers=_bearer(admin)).status_code == 204
    assert client.get("/api/v1/runs/r%2F1").status_code == 404
    assert client.delete("/api/v1/runs/r%2F1", headers=_bearer(admin)).status_code == 404
    assert [r["id"] for r in client.get("/api/v1/runs").json()["items"]] == ["other"]
    from sqlmodel import SQLModel

    with engine.connect() as conn:  # no table keeps a row of the deleted run; the other run keeps its own
        for table in SQLModel.metadata.sorted_tables:
            if "run_id" in table.c:
                left = conn.execute(sa.select(sa.func.count()).select_from(table).where(table.c.run_id == "r/1"))
                assert left.scalar_one() == 0, table.name
        rt = SQLModel.metadata.tables["run_task_rollup"]
        assert conn.execute(sa.select(sa.func.count()).select_from(rt).where(rt.c.run_id == "other")).scalar_one() == 1
    _seed(engine, tmp_path, "c.jsonl")  # ingested again: nothing of the old labels or notes comes back
    assert client.get("/api/v1/runs/r%2F1/rollouts/x/labels").json()["items"] == []
    assert client.get("/api/v1/runs/r%2F1/steps/1/notes").json()["items"] == []


def test_client_writes_with_its_token(db_url, engine, tmp_path):
    _seed(engine, tmp_path)
    write, _ = auth.issue(engine, "write", "trainer")
    admin, _ = auth.issue(engine, "admin", "ops")
    with live_server(db_url) as base:
        with Client(base, write) as c:
            c.label("r/1", "y", "zero-reward")
            c.note("r/1", "check this", rollout_id="y")
            assert [r["rollout_id"] for r in c.rollouts("r/1", label="zero-reward")] == ["y"]
            try:
                c.delete_run("r/1")
                raise AssertionError("a write token deleted a run")
            except ApiError as e:
                assert e.status == 403
        with Client(base, admin) as c:
            c.delete_run("r/1")
            assert [r["id"] for r in c.runs()] == ["other"]
