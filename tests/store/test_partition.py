"""`rollscope db partition` (app/db/partition.py) on the real Postgres: a migrated database with
ingested rollouts is partitioned with its rows intact, its pages and API answer as before, a
re-ingest adds nothing, a replaced rollout and a deleted run leave no orphan rows (the cascade
trigger), and a second conversion changes nothing. SQLite is refused before it is touched."""
from __future__ import annotations

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlmodel import Session
from typer.testing import CliRunner

from app.config import Settings
from app.db.engine import make_engine
from app.db.migrate import at_head
from app.db.partition import TABLES, NotPartitionable, partition, partition_count
from app.main import create_app
from app.queries.runs import delete_run
from tests.helpers import ingest, rollout, write_jsonl

POSTGRES = [pytest.param("postgres", marks=pytest.mark.postgres)]
CHILDREN = ("node", "finding", "rollout_detail", "reward_component", "search_doc", "rollout_signature")


def _rollouts(changed: str | None = None):
    """Two runs, groups of 4 (group checks write group findings), a tool error (signature rows),
    searchable text; `changed`: that rollout's assistant says more (a replacement on re-ingest,
    with as many rows of every kind)."""
    out = []
    for run in ("ra", "rb"):
        for i in range(8):
            rid = f"{run}-{i}"
            messages = [{"role": "user", "content": f"task {i}: list the files"},
                        {"role": "assistant", "content": f"running ls for {rid}" + (" now" if rid == changed else "")},
                        {"role": "user", "content": "done" if i % 3 else "error: permission denied"}]
            out.append(rollout(rid, run=run, step=i // 4, group=f"g{i // 4}", index=i % 4,
                               reward=float(i % 2), messages=messages,
                               ending="error" if i == 5 else "submitted", rewards={"pass": {"score": float(i % 2)}}))
    return out


def _counts(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar()
                for t in (*TABLES, *CHILDREN, "run")}


def _orphans(engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {t: conn.execute(sa.text(f"SELECT count(*) FROM {t} c WHERE c.rollout_pk IS NOT NULL AND NOT EXISTS "
                                         "(SELECT 1 FROM rollout r WHERE r.pk = c.rollout_pk)")).scalar()
                for t in CHILDREN}


PAGES = ("/runs/ra.json", "/runs/ra/rollouts.json", "/runs/ra/rollouts.json?ending=error",
         "/runs/ra/rollouts.json?sort=-reward", "/runs/ra/facets.json", "/runs/ra/rollouts/ra-5.json",
         "/runs/ra/groups/g1.json", "/runs/ra/steps/1.json", "/runs/ra/charts/reward.json",
         "/compare.json?runs=ra,rb", "/search.json?q=permission", "/api/v1/runs/ra/rollouts")


def _answers(url: str) -> dict[str, object]:
    app = create_app(Settings(database_url=url))
    with TestClient(app) as c:
        out = {}
        for path in PAGES:
            r = c.get(path)
            assert r.status_code == 200, (path, r.text[:300])
            out[path] = r.json()
    app.state.engine.dispose()
    return out


@pytest.mark.parametrize("db_url", POSTGRES, indirect=True)
def test_partitioning_keeps_rows_pages_and_reingest(tmp_path, db_url):
    engine = make_engine(db_url, writer=True)
    path = write_jsonl(tmp_path / "a.jsonl", _rollouts())
    assert ingest(engine, path).ok
    before, pages = _counts(engine), _answers(db_url)
    assert before["finding"] and before["search_doc"] and before["step_rollup"]

    done = partition(engine, 4)
    assert [(c.table, c.partitions, c.already) for c in done] == [(t, 4, False) for t in TABLES]
    assert {c.table: c.rows for c in done} == {t: before[t] for t in TABLES}
    with engine.connect() as conn:
        assert all(partition_count(conn, t) == 4 for t in TABLES)
        # every index made again covers every partition (an index "ON ONLY" the parent is INVALID)
        assert conn.execute(sa.text("SELECT count(*) FROM pg_index WHERE NOT indisvalid")).scalar() == 0
        n_indexes = lambda t: conn.execute(sa.text("SELECT count(*) FROM pg_index WHERE indrelid = to_regclass(:t)"),  # noqa: E731
                                           {"t": t}).scalar()
        assert all(n_indexes(f"{t}_p3") == n_indexes(t) > 0 for t in TABLES)
    assert at_head(engine)  # the schema keeps its revision: later migrations run from it
    assert _counts(engine) == before
    assert _answers(db_url) == pages

    report = ingest(engine, path)  # the same file again: nothing new
    assert report.ok and report.total.inserted == 0 and report.total.replaced == 0
    assert _counts(engine) == before

    changed = write_jsonl(tmp_path / "a.jsonl", _rollouts(changed="ra-2"))
    report = ingest(engine, changed)  # one replaced: its old nodes, findings, ... go by the trigger
    assert report.ok and report.total.replaced == 1
    assert _counts(engine) == before and not any(_orphans(engine).values())

    again = partition(engine, 8)  # a no-op, whatever the count asked
    assert [(c.table, c.partitions, c.already, c.rows) for c in again] == [(t, 4, True, 0) for t in TABLES]
    assert _counts(engine) == before

    with Session(engine) as s:  # the app's delete, then a bare DELETE: the trigger takes the children
        assert delete_run(session=s, run_id="ra") == 8
        s.commit()
    with engine.connect() as conn:
        assert conn.execute(sa.text("DELETE FROM rollout WHERE run_id = 'rb'")).rowcount == 8
        conn.commit()
    assert not any(_orphans(engine).values())
    engine.dispose()


def test_sqlite_is_refused_untouched(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'a.db'}", writer=True)
    with pytest.raises(NotPartitionable, match="need Postgres"):
        partition(engine)
    engine.dispose()
    from app.cli import app

    target = tmp_path / "b.db"
    res = CliRunner().invoke(app, ["--db", f"sqlite:///{target}", "db", "partition"])
    assert res.exit_code == 2 and "partitions need Postgres" in res.output
    assert not target.exists()
