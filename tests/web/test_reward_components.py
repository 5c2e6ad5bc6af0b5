"""Reward components (issue 23 part 4) through the real HTTP app on SQLite and Postgres: the demo
run's `correct` and `format` components on its rollout page (and twin), group page, chart, and the
rollouts list's component filter and sort (page and API); a judge's explanation is escaped; a
replaced rollout's components are replaced, a re-ingest adds none."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from app.db import models
from ingest import demo
from tests.helpers import ingest, rollout, write_jsonl

RC = models.RewardComponent.__table__


def test_demo_components_on_every_page(client, engine, tmp_path):
    path = tmp_path / "demo.jsonl"
    demo.write(path, steps=3, groups=2, group_size=3, tokenizer=False)
    assert ingest(engine, path).ok
    with engine.connect() as conn:
        n = conn.execute(sa.select(sa.func.count()).select_from(RC)).scalar()
    assert n == 3 * 2 * 3 * 2
    assert ingest(engine, path).ok  # re-ingest: unchanged, adds nothing
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(RC)).scalar() == n
    run = "demo-grpo"
    rows = client.get(f"/runs/{run}/rollouts.json?limit=100").json()["rollouts"]
    rid = next(r["rollout_id"] for r in rows if r["reward"])
    d = client.get(f"/runs/{run}/rollouts/{rid}.json").json()
    comps = {c["name"]: c for c in d["reward_components"]}
    assert set(comps) == {"correct", "format"}
    assert comps["format"]["weight"] == 0.1
    assert comps["format"]["contribution"] == comps["format"]["score"] * 0.1
    assert sum(c["share"] for c in comps.values()) == 1.0 or abs(sum(c["share"] for c in comps.values()) - 1) < 1e-9
    page = client.get(f"/runs/{run}/rollouts/{rid}").text
    assert 'id="reward-components"' in page and 'data-component="format"' in page
    # the group page: a column per component, a score per member
    group = rows[0]["group_id"]
    g = client.get(f"/runs/{run}/groups/{group}.json").json()
    assert [c["name"] for c in g["components"]] == ["correct", "format"]
    assert all(set(m["components"]) == {"correct", "format"} for m in g["members"])
    assert "reward components per member" in client.get(f"/runs/{run}/groups/{group}").text
    # the chart: one line per component, each point opening its step's page
    fig = client.get(f"/runs/{run}/charts/reward_components.json").json()["figure"]
    assert {t["name"] for t in fig["data"]} == {"correct", "format"}
    for t in fig["data"]:
        assert t["x"] == [0, 1, 2] and t["customdata"] == [f"/runs/{run}/steps/{s}" for s in t["x"]]
    want = {s: [r for r in rows if r["step"] == s] for s in (0, 1, 2)}
    correct = next(t for t in fig["data"] if t["name"] == "correct")
    for s, y in zip(correct["x"], correct["y"]):
        scores = [client.get(f"/runs/{run}/rollouts/{r['rollout_id']}.json").json()["rewards"]["correct"]["score"]
                  for r in want[s]]
        assert y == pytest.approx(sum(scores) / len(scores), rel=1e-5)  # figures keep 6 significant digits
    # the filter on the page's twin and the API (one Filters); the sort on the list (the API has none)
    for base, key in ((f"/runs/{run}/rollouts.json", "rollouts"), (f"/api/v1/runs/{run}/rollouts", "items")):
        items = client.get(f"{base}?component=correct&component_min=1&limit=100").json()[key]
        assert {r["rollout_id"] for r in items} == {r["rollout_id"] for r in rows if r["reward"] >= 1}
        assert client.get(f"{base}?component=nope").json()[key] == []
        assert client.get(f"{base}?component_min=1").status_code == 422
    base = f"/runs/{run}/rollouts.json?sort=-component:format&limit=5"
    first = client.get(base).json()
    second = client.get(f"{base}&after={first['next']}").json()
    fmt = {r["rollout_id"]: client.get(f"/runs/{run}/rollouts/{r['rollout_id']}.json").json()["rewards"]["format"]
           ["score"] for r in rows}
    got = [fmt[r["rollout_id"]] for r in first["rollouts"] + second["rollouts"]]
    assert got == sorted(got, reverse=True) and len(set(r["rollout_id"] for r in first["rollouts"]
                                                        + second["rollouts"])) == 10
    back = client.get(f"{base}&before={second['prev']}").json()
    assert [r["rollout_id"] for r in back["rollouts"]] == [r["rollout_id"] for r in first["rollouts"]]
    mid = second["rollouts"][2]["rollout_id"]  # a rollout page walks the list it came from
    nav = client.get(f"/runs/{run}/rollouts/{mid}.json?list=sort%3D-component%3Aformat").json()["list_nav"]
    assert nav["prev"] == second["rollouts"][1]["rollout_id"] and nav["next"] == second["rollouts"][3]["rollout_id"]
    html = client.get(f"/runs/{run}/rollouts?component=format&component_max=0.5")
    assert html.status_code == 200 and "sort by format" in html.text


def test_explanation_escaped_and_components_replaced(client, engine, tmp_path):
    r = rollout("j1", step=0, reward=None, rewards={
        "judge": {"score": 0.5, "weight": 2.0, "explanation": "<script>alert(1)</script> ok"},
        "length": {"score": 1.0, "weight": 0.0}})
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [r]))
    d = client.get("/runs/r1/rollouts/j1.json").json()
    assert d["reward"] == 1.0
    assert d["reward_components"][0]["explanation"] == "<script>alert(1)</script> ok"
    page = client.get("/runs/r1/rollouts/j1").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; ok" in page and "<script>alert(1)" not in page
    r = rollout("j1", step=0, reward=None, rewards={"judge": {"score": 0.25, "weight": 2.0}})
    ingest(engine, write_jsonl(tmp_path / "b.jsonl", [r]))
    with engine.connect() as conn:
        assert conn.execute(sa.select(RC.c.name, RC.c.score)).all() == [("judge", 0.25)]
    # sorted by a component, the rollouts without it come last
    ingest(engine, write_jsonl(tmp_path / "c.jsonl", [rollout("none", step=0, reward=0.0)]))
    ids = [r["rollout_id"] for r in client.get("/runs/r1/rollouts.json?sort=component:judge").json()["rollouts"]]
    assert ids == ["j1", "none"]
