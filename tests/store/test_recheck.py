"""`rollscope recheck`: rollouts stored before a check existed get its findings without
re-ingesting, labels survive, and a later re-ingest of the same file adds nothing."""
from __future__ import annotations

import sqlalchemy as sa
from typer.testing import CliRunner

from app.cli import app
from app.db import models
from tests.conftest import FIXTURES
from tests.helpers import ingest

F = models.Finding.__table__
R = models.Rollout.__table__
L = models.Label.__table__
TAU = FIXTURES / "realdata" / "tau-bench"


def findings(engine) -> list[tuple]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(R.c.rollout_id, F.c.kind, F.c.node_idx, F.c.position)
                                   .join(R, R.c.pk == F.c.rollout_pk).where(R.c.run_id == "tau")).all())


def test_recheck_restores_findings_and_keeps_labels(engine, db_url, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    ingest(engine, TAU, run="tau")
    before = findings(engine)
    assert any(kind == "duplicate_tool_call_id" for _, kind, _, _ in before)
    with engine.begin() as conn:  # as if stored before the checks existed
        conn.execute(F.delete())
        some_id = conn.execute(sa.select(R.c.rollout_id).where(R.c.run_id == "tau").limit(1)).scalar_one()
        conn.execute(L.insert().values(run_id="tau", rollout_id=some_id, label="reward-hacking", author="alice",
                                       created_at=models.utcnow()))
        n_rollouts = conn.execute(sa.select(sa.func.count()).select_from(R)).scalar_one()
    assert findings(engine) == []

    res = CliRunner().invoke(app, ["recheck", "--run", "tau"])
    assert res.exit_code == 0, res.output
    assert f"re-checked {n_rollouts} rollouts of tau" in res.output
    assert findings(engine) == before
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(R)).scalar_one() == n_rollouts
        assert conn.execute(sa.select(L.c.rollout_id)).scalar_one() == some_id

    again = ingest(engine, TAU, run="tau").total  # the re-checked rows are what the file holds
    assert (again.inserted, again.replaced) == (0, 0) and again.unchanged == n_rollouts


def test_recheck_of_unknown_run_exits_2(engine, db_url, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    res = CliRunner().invoke(app, ["recheck", "--run", "nope"])
    assert res.exit_code == 2 and "has no stored rollouts" in res.output
