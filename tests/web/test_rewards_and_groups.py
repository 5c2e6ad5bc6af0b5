"""Rewards, means and groups through the real HTTP app on SQLite and Postgres: huge and subnormal
rewards neither overflow nor underflow, the runs list shows the run page's two means, a group
warns of extra members and duplicate indices, and a missing advantage says why."""
from __future__ import annotations

import re

import pytest

from tests.conftest import data_path
from tests.helpers import ingest, rollout, write_jsonl


def _case(engine, name: str, run: str = "cases"):
    assert ingest(engine, data_path("cases", name), run=run).ok


def test_huge_finite_rewards_do_not_overflow(client, engine, tmp_path):
    rs = [rollout(f"h{i}", group="g", index=i, reward=rw) for i, rw in enumerate([1e308, 1e308, -1e308, 1.7e308])]
    ingest(engine, write_jsonl(tmp_path / "h.jsonl", rs))
    assert client.get("/runs/r1/groups/g").status_code == 200
    raw = client.get("/runs/r1/groups/g.json")
    assert raw.status_code == 200 and "Infinity" not in raw.text and "NaN" not in raw.text
    d = raw.json()
    assert d["policies"]["errors_dropped"]["mean"] == pytest.approx(0.675e308)
    assert d["policies"]["errors_dropped"]["std"] > 0
    # the run page and the runs list sum rewards too (Postgres raises on float overflow)
    run = client.get("/runs/r1.json").json()
    assert run["steps"][0]["mean_reward"] == pytest.approx(0.675e308)
    assert client.get("/runs.json").json()["runs"][0]["mean_reward"] == pytest.approx(0.675e308)
    assert client.get("/runs").status_code == 200 and client.get("/runs/r1").status_code == 200


def test_subnormal_rewards_do_not_underflow(client, engine, tmp_path):
    """Postgres raises on float8 underflow too (5e-324 arithmetic): sums run in NUMERIC there."""
    rs = [rollout(f"t{i}", step=0, group="g", index=i, reward=rw) for i, rw in enumerate([5e-324, 1e-310, 0.5])]
    ingest(engine, write_jsonl(tmp_path / "t.jsonl", rs))
    for url in ("/runs", "/runs.json", "/runs/r1", "/runs/r1.json", "/runs/r1/groups/g.json"):
        assert client.get(url).status_code == 200, url
    assert client.get("/runs/r1.json").json()["steps"][0]["mean_reward"] == pytest.approx(0.5 / 3)


def test_runs_list_means_match_the_run_page(client, engine, tmp_path):
    # the errored rollout carries a stored reward of 1.0: scored 0, or dropped, never averaged in
    rs = [rollout("a", step=0, reward=1.0), rollout("b", step=1, reward=0.0),
          rollout("c", step=1, reward=1.0, ending="error"), rollout("d", step=1, reward=1.0)]
    ingest(engine, write_jsonl(tmp_path / "m.jsonl", rs))
    row = client.get("/runs.json").json()["runs"][0]
    totals = client.get("/runs/r1.json").json()["totals"]
    assert row["mean_reward"] == totals["mean_reward"] == pytest.approx(2 / 4)
    assert row["mean_reward_no_errors"] == totals["mean_reward_no_errors"] == pytest.approx(2 / 3)
    html = client.get("/runs").text
    assert 'title="errored rollouts scored 0">mean reward (errors scored 0)</th>' in html
    assert "mean reward (errors dropped)" in html and ">0.5<" in html and ">0.6667<" in html
    run_html = client.get("/runs/r1").text
    assert "mean reward (errors scored 0)" in run_html and "mean reward (errors dropped)" in run_html
    assert ">0.5<" in run_html and ">0.6667<" in run_html


def test_group_warns_of_extra_members_and_duplicate_indices(client, engine, tmp_path):
    rs = []
    for copy in range(3):  # the same 3 episodes, ingested from 3 files
        for i in range(3):
            r = rollout(f"f{copy}-e{i}", group="g", index=i)
            r.group.size = 3
            rs.append(r)
    ingest(engine, write_jsonl(tmp_path / "g.jsonl", rs))
    d = client.get("/runs/r1/groups/g.json").json()
    assert d["warnings"] == ["declared size 3 but 9 members", "duplicate indices #0 ×3, #1 ×3, #2 ×3"]
    assert ("declared size 3 but 9 members; duplicate indices #0 ×3, #1 ×3, #2 ×3"
            in client.get("/runs/r1/groups/g").text)
    ok = [rollout(f"k{i}", group="h", index=i) for i in range(2)]
    for r in ok:
        r.group.size = 2
    ingest(engine, write_jsonl(tmp_path / "h.jsonl", ok))
    assert client.get("/runs/r1/groups/h.json").json()["warnings"] == []
    assert "group-warning" not in client.get("/runs/r1/groups/h").text


def test_missing_advantages_say_why(client, engine):
    _case(engine, "10-nan-and-null-rewards.json", run="r10")
    html = client.get("/runs/r10/groups/g1").text
    d = client.get("/runs/r10/groups/g1.json").json()
    reasons = {m["rollout_id"]: m["no_advantage"] for m in d["members"]}
    assert reasons["g1-0"] == {"errors_as_zero": None, "errors_dropped": None}
    assert reasons["g1-1"] == {"errors_as_zero": "reward_excluded", "errors_dropped": "reward_excluded"}
    assert html.count("excluded (reward missing/NaN/inf)") == 6  # 3 excluded members × 2 columns


def test_errored_rollouts_say_no_gradient(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [
        rollout("ok", group="g", index=0, reward=1.0), rollout("err", group="g", index=1, ending="error"),
        rollout("nan", group="g", index=2, reward=float("nan"))]))
    html = client.get("/runs/r1/groups/g").text
    assert html.count("no gradient (error dropped)") == 1
    assert html.count("excluded (reward missing/NaN/inf)") == 2
    assert re.search(r'class="k">advantage[^<]*</span> <span class="missing">–', html) is None
