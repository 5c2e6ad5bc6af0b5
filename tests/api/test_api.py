"""/api/v1 over real HTTP (the app in-process through httpx), on SQLite and Postgres: every read
endpoint, the error shape, keyset pages, `fields=`, token arrays as JSON and NPZ, health."""
from __future__ import annotations

import io

import numpy as np

from tests.helpers import ingest, rollout, write_jsonl


def _seed(engine, tmp_path):
    rs = [rollout(f"s{s}-g{g}-r{i}", run="team/exp", step=s, group=f"s{s}-g{g}", index=i,
                  reward=[1.0, 0.0, 0.5, None][i], ending="error" if i == 1 else "submitted")
          for s in (1, 2) for g in (0, 1) for i in range(4)]
    rs.append(rollout("tools", run="team/exp", step=3, messages=[
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]}]))
    assert ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs)).ok
    return "team%2Fexp"


def test_runs_steps_metrics(client, engine, tmp_path):
    run = _seed(engine, tmp_path)
    runs = client.get("/api/v1/runs").json()["items"]
    assert [r["id"] for r in runs] == ["team/exp"] and runs[0]["rollouts"] == 17
    assert runs[0]["url"] == "/runs/team%2Fexp.json"
    d = client.get(f"/api/v1/runs/{run}").json()
    assert d["run"]["id"] == "team/exp" and d["totals"]["rollouts"] == 17
    steps = client.get(f"/api/v1/runs/{run}/steps").json()["items"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    # step 1: rewards 1.0, (error), 0.5 twice; errors as 0: (1+0+0.5)*2/6 = 0.5; dropped: 0.75
    assert steps[0]["mean_reward"] == 0.5 and steps[0]["mean_reward_no_errors"] == 0.75
    assert steps[0]["excluded"] == 2 and steps[0]["rates"]["error"] == 0.25
    m = client.get(f"/api/v1/runs/{run}/metrics").json()
    assert m["step"] == [1, 2, 3] and m["mean_reward"][:2] == [0.5, 0.5] and m["rates"]["error"][:2] == [0.25, 0.25]


def test_rollouts_filters_pages_fields(client, engine, tmp_path):
    run = _seed(engine, tmp_path)
    base = f"/api/v1/runs/{run}/rollouts"
    page = client.get(base, params={"step": 1, "limit": 3}).json()
    assert len(page["items"]) == 3 and page["limit"] == 3 and page["next"]
    seen = [r["rollout_id"] for r in page["items"]]
    while page["next_url"]:
        page = client.get(page["next_url"]).json()
        seen += [r["rollout_id"] for r in page["items"]]
    assert len(seen) == len(set(seen)) == 8
    only = client.get(base, params={"ending": "error", "fields": "rollout_id,ending,url"}).json()["items"]
    assert all(set(r) == {"rollout_id", "ending", "url"} and r["ending"] == "error" for r in only) and len(only) == 4
    assert only[0]["url"].endswith(".json")
    rewards = client.get(base, params={"reward_min": 0.5, "reward_max": 0.5, "fields": "reward"}).json()["items"]
    assert [r["reward"] for r in rewards] == [0.5] * 4
    assert client.get(base, params={"group": "s2-g1", "fields": "rollout_id"}).json()["items"][0] == {
        "rollout_id": "s2-g1-r0"}
    flagged = client.get(base, params={"flag": "unanswered_tool_call", "fields": "rollout_id"}).json()["items"]
    assert flagged == [{"rollout_id": "tools"}]
    for bad, field in [({"flag": "bogus"}, "flag"), ({"ending": "done"}, "ending"), ({"stepp": 3}, "stepp"),
                       ({"fields": "rollout_id,nope"}, "fields"), ({"after": "x"}, "after"), ({"limit": 0}, "limit"),
                       ({"step": 2**31}, "step")]:
        r = client.get(base, params=bad)
        assert r.status_code == 422 and r.json()["error"]["field"] == field, (bad, r.text)
        assert set(r.json()) == {"error"} and set(r.json()["error"]) == {"code", "message", "field"}


def test_one_rollout_branch_messages_and_tokens(client, engine, tmp_path):
    run = _seed(engine, tmp_path)
    d = client.get(f"/api/v1/runs/{run}/rollouts/s1-g0-r0").json()
    assert d["rollout"]["rollout_id"] == "s1-g0-r0" and d["rollout"]["step"] == 1
    assert [g["role"] for g in d["graph"]] == ["user", "assistant"] and d["branches"] == [[0, 1]]
    assert d["envelope"]["ending"]["type"] == "submitted"
    t = client.get(f"/api/v1/runs/{run}/rollouts/tools").json()
    assert "unanswered_tool_call" in [f["kind"] for f in t["findings"]]
    msgs = client.get(f"/api/v1/runs/{run}/rollouts/tools/branches/0/messages", params={"limit": 1}).json()
    assert msgs["total"] == 2 and msgs["next_offset"] == 1 and msgs["items"][0]["message"]["content"] == "go"
    last = client.get(f"/api/v1/runs/{run}/rollouts/tools/branches/0/messages", params={"offset": 1}).json()
    assert last["items"][0]["message"]["tool_calls"][0]["name"] == "f" and last["next_offset"] is None
    tok = client.get(f"/api/v1/runs/{run}/rollouts/s1-g0-r0/branches/0/tokens").json()
    assert tok["token_ids"] == [100, 101, 102, 110, 111, 112] and tok["node"] == [0, 0, 0, 1, 1, 1]
    assert tok["mask"] == [False] * 3 + [True] * 3 and tok["logprobs"] == [None] * 3 + [-0.5] * 3
    raw = client.get(f"/api/v1/runs/{run}/rollouts/s1-g0-r0/branches/0/tokens",
                     headers={"Accept": "application/x-ndarray"})
    assert raw.headers["content-type"] == "application/x-ndarray"
    arrays = np.load(io.BytesIO(raw.content))
    assert arrays["token_ids"].dtype == np.int32 and arrays["token_ids"].tolist() == tok["token_ids"]
    assert arrays["mask"].tolist() == tok["mask"] and np.isnan(arrays["logprobs"][:3]).all()
    assert client.get(f"/api/v1/runs/{run}/rollouts/s1-g0-r0/branches/1/tokens").json()["error"]["field"] == "branch"
    assert client.get(f"/api/v1/runs/{run}/rollouts/nope").status_code == 404


def test_groups_and_findings(client, engine, tmp_path):
    run = _seed(engine, tmp_path)
    g = client.get(f"/api/v1/runs/{run}/groups/s1-g0").json()
    assert g["policies"]["errors_dropped"]["mean"] == 0.75 and g["policies"]["errors_as_zero"]["mean"] == 0.5
    assert [m["advantage"]["errors_dropped"] for m in g["members"]] == [0.25, None, -0.25, None]
    f = client.get(f"/api/v1/runs/{run}/findings").json()
    assert ({x["rollout_id"] for x in f["items"] if x["kind"] == "unanswered_tool_call"} == {"tools"}
            and f["next"] is None)
    assert client.get(f"/api/v1/runs/{run}/findings", params={"kind": "nope"}).status_code == 422
    # a group-scope finding names its group, not a rollout, and links to the group's twin
    ingest(engine, write_jsonl(tmp_path / "zv.jsonl", [rollout(f"zv{i}", run="team/exp", step=4, group="zv", index=i,
                                                                reward=0.5) for i in range(3)]))
    for params in ({}, {"kind": "zero_variance_group"}):
        f = client.get(f"/api/v1/runs/{run}/findings", params=params)
        assert f.status_code == 200, f.text
        (zv,) = [x for x in f.json()["items"] if x["group_id"] == "zv"]
        assert zv["kind"] == "zero_variance_group" and zv["scope"] == "group" and zv["rollout_id"] is None
        assert zv["url"] == "/runs/team%2Fexp/groups/zv.json"
    tools = client.get(f"/api/v1/runs/{run}/findings", params={"kind": "unanswered_tool_call"}).json()["items"]
    assert tools[0]["scope"] == "rollout" and tools[0]["url"].startswith("/runs/team%2Fexp/rollouts/tools.json")
    assert client.get(f"/api/v1/runs/{run}/groups/nope").json()["error"]["code"] == "not_found"


def test_health_docs_and_openapi(client):
    for root in ("/api/v1", "/api/v1/"):
        index = client.get(root)
        assert index.status_code == 200 and index.json()["docs"] == "/api/docs", root
        assert client.get(index.json()["runs"]).status_code == 200
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["migration"]
    spec = client.get("/api/openapi.json").json()
    assert "/api/v1/runs/{run}/rollouts" in spec["paths"] and not any(p.startswith("/runs") for p in spec["paths"])
    docs = client.get("/api/docs")
    assert docs.status_code == 200 and "/static/vendor/swagger-ui-bundle-5.35.0.js" in docs.text
    assert "<script>" not in docs.text  # no inline script: the CSP forbids it
    assert client.get("/static/vendor/swagger-ui-bundle-5.35.0.js").status_code == 200


def test_readyz_is_503_when_the_schema_is_behind(client, engine):
    import sqlalchemy as sa

    with engine.begin() as conn:
        head = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0001'"))
    try:
        r = client.get("/readyz")
        assert (r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
                and "0001" in r.json()["error"]["message"])
        assert client.get("/healthz").status_code == 200  # alive, just not ready
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = :v"), {"v": head})


def test_run_totals_from_the_one_pass_rollups_are_exact(client, engine, tmp_path):
    """A run's totals come from the same pass as its steps (app.queries.common.reward_rollups,
    `total=True`); they equal the runs list's means, computed by a query of their own, and are
    exactly rounded across steps (a running float sum of these rewards gives 0.0 for the mean
    without errors, not 0.12)."""
    rewards = [0.1, 0.2, 0.3, 1e16, -1e16, 0.7]
    rs = [rollout(f"r{i}", run="exact", step=i % 3, reward=r, ending="error" if i == 5 else "submitted")
          for i, r in enumerate(rewards)]
    assert ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs)).ok
    listed = client.get("/api/v1/runs").json()["items"][0]
    totals = client.get("/api/v1/runs/exact").json()["totals"]
    assert totals["rollouts"] == 6 and totals["endings"]["error"] == 1
    assert totals["mean_reward"] == listed["mean_reward"]
    assert abs(totals["mean_reward"] - 0.1) < 1e-16  # 0.6 / 6, the error scored 0
    assert totals["mean_reward_no_errors"] == listed["mean_reward_no_errors"] == 0.12  # 0.6 / 5, exactly rounded
    steps = client.get("/api/v1/runs/exact/steps").json()["items"]
    assert sum(s["rollouts"] for s in steps) == totals["rollouts"]
