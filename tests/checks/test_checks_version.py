"""Which checks ran on a rollout is kept (`rollout.checks_version`, migration 0026), so the run
page's checks table tells "checked, nothing found" from "not run": a check added after a rollout
was stored (its `since` later than the rollout's version), or a rollout stored before versions
were kept (an upgraded database). `rollscope recheck` runs today's checks and stamps them.
Real SQLite and Postgres, the real migrations, the real CLI and app."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from app.db.migrate import alembic_config, upgrade
from ingest import checks
from tests.helpers import ingest, rollout, run_cli, write_jsonl

# The kinds of each checks version. A check added later declares `since=<the next version>` and is
# listed here under it: a rollout stamped with an older version then shows it as not run.
KINDS_BY_VERSION = {1: 38}


def test_every_check_declares_the_version_that_first_runs_it():
    by_version: dict[int, int] = {}
    for c in checks.REGISTRY.values():
        by_version[c.since] = by_version.get(c.since, 0) + 1
    assert by_version == KINDS_BY_VERSION, "a new check declares since=<next version> and is counted here"
    assert checks.version() == max(KINDS_BY_VERSION)


def _table(client, run: str) -> dict[str, dict]:
    return {c["kind"]: c for c in client.get(f"/runs/{run}.json").json()["checks"]}


def _three(engine, tmp_path) -> None:
    rs = [rollout(i, run="cv", group="g", index=k, reward=float(k)) for k, i in enumerate("abc")]
    assert ingest(engine, write_jsonl(tmp_path / "cv.jsonl", rs)).total.inserted == 3


def test_a_check_newer_than_a_rollouts_version_is_not_run_on_it_until_recheck(client, engine, db_url, tmp_path):
    _three(engine, tmp_path)
    fresh = _table(client, "cv")
    assert {(c["not_run"], c["unrecorded"]) for c in fresh.values()} == {(0, 0)}
    assert all(c["checked"] + c["skipped"] == 3 for c in fresh.values())
    with engine.connect() as conn:
        assert set(conn.execute(sa.text("SELECT checks_version FROM rollout")).scalars()) == {checks.version()}
    # two rollouts as a registry older than every check stamped them (version 0)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE rollout SET checks_version = 0 WHERE rollout_id IN ('a', 'b')"))
    assert run_cli("rebuild-analytics", "--run", "cv", "--db", db_url).returncode == 0
    old = _table(client, "cv")
    assert {c["not_run"] for c in old.values()} == {2}
    assert all(c["checked"] == max(0, 1 - c["skipped"]) for c in old.values()), old
    html = client.get("/runs/cv").text
    assert "(not run on 2)" in html and "rollscope recheck --run cv" in html
    assert run_cli("recheck", "--run", "cv", "--db", db_url).returncode == 0
    assert _table(client, "cv") == fresh
    assert "not run on" not in client.get("/runs/cv").text


def test_rollouts_stored_before_versions_were_kept_are_counted_as_unrecorded(client, engine, db_url, tmp_path):
    _three(engine, tmp_path)
    fresh = _table(client, "cv")
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0025_page_indexes")  # a database from before 0026, with its rollouts
    upgrade(engine)  # 0026: checks_version NULL, the rollups recomputed at the head
    table = _table(client, "cv")
    assert {(c["unrecorded"], c["checked"], c["not_run"]) for c in table.values()} == {(3, 0, 0)}
    assert [c["rollouts"] for c in table.values()] == [c["rollouts"] for c in fresh.values()]  # findings kept
    html = client.get("/runs/cv").text
    assert "3 rollouts of this run were stored before Rollscope kept which checks ran" in html
    assert run_cli("recheck", "--run", "cv", "--db", db_url).returncode == 0
    assert _table(client, "cv") == fresh
