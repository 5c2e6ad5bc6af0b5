"""The dashboard through the real HTTP app on a real database: JSON twins, the worked example,
filters and keyset pagination, escaping of trace text."""
from __future__ import annotations

import pytest

from tests.conftest import data_path
from tests.helpers import ingest, rollout, write_jsonl


def worked_example(tmp_path):
    """domain.md: 8 samples, rewards (1,1,1,0,0,0,0,0), the last two are errors."""
    rewards = [1, 1, 1, 0, 0, 0, 0, 0]
    endings = ["submitted"] * 5 + ["truncated"] + ["error"] * 2
    return write_jsonl(tmp_path / "group.jsonl", [
        rollout(f"r{i}", group="g1", index=i, reward=float(rw), ending=e)
        for i, (rw, e) in enumerate(zip(rewards, endings))])


def test_worked_example_through_group_json_twin(client, engine, tmp_path):
    report = ingest(engine, worked_example(tmp_path))
    assert report.ok and report.total.inserted == 8
    d = client.get("/runs/r1/groups/g1.json").json()
    assert d["policies"]["errors_as_zero"]["mean"] == pytest.approx(0.375)
    assert d["policies"]["errors_dropped"]["mean"] == pytest.approx(0.5)
    adv = {m["rollout_id"]: m["advantage"] for m in d["members"]}
    assert adv["r0"]["errors_as_zero"] == pytest.approx(0.625)
    assert adv["r0"]["errors_dropped"] == pytest.approx(0.5)
    assert adv["r5"]["errors_dropped"] == pytest.approx(-0.5)  # truncated: scored normally
    assert adv["r6"]["errors_as_zero"] == pytest.approx(-0.375)
    assert adv["r6"]["errors_dropped"] is None  # errored: no gradient
    # the same through the Accept header, and the HTML page shows both
    assert client.get("/runs/r1/groups/g1", headers={"Accept": "application/json"}).json() == d
    html = client.get("/runs/r1/groups/g1").text
    assert "0.375" in html and "0.500" in html and "+0.625" in html and "no gradient" in html


def test_every_page_has_a_json_twin(client, engine, tmp_path):
    ingest(engine, worked_example(tmp_path))
    for url in ["/runs", "/runs/r1", "/runs/r1/rollouts", "/runs/r1/rollouts/r0", "/runs/r1/groups/g1", "/quarantine"]:
        page = client.get(url)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), url
        assert 'rel="alternate" type="application/json"' in page.text
        twin = client.get(url.split("?")[0] + ".json")
        assert twin.status_code == 200 and twin.headers["content-type"] == "application/json", url
    assert client.get("/runs/nope.json").status_code == 404
    assert client.get("/runs/r1/rollouts/nope.json").json() == {
        "error": {"code": "not_found", "message": "no rollout 'nope' in run 'r1'", "field": None}}


def test_run_page_steps_and_charts(client, engine, tmp_path):
    rs = []
    for step in range(3):
        for i in range(4):
            ending = "error" if i == 3 else "submitted"
            rs.append(rollout(f"s{step}-{i}", step=step, group=f"g{step}", index=i,
                              reward=1.0 if i < step + 1 else 0.0, ending=ending))
    ingest(engine, write_jsonl(tmp_path / "run.jsonl", rs))
    d = client.get("/runs/r1.json").json()
    assert [s["step"] for s in d["steps"]] == [0, 1, 2]
    s2 = d["steps"][2]
    assert s2["endings"]["error"] == 1 and s2["endings"]["submitted"] == 3
    # step 2: rewards 1,1,1 and the error (stored reward 0 or 1 is ignored: scored 0 / dropped)
    assert s2["mean_reward"] == pytest.approx(3 / 4)
    assert s2["mean_reward_no_errors"] == pytest.approx(1.0)
    fig = d["charts"]["ending_rates"]
    error_trace = next(t for t in fig["data"] if t["name"] == "error")
    assert error_trace["y"] == [0.25, 0.25, 0.25]
    assert error_trace["customdata"][1] == "/runs/r1/rollouts?step=1&ending=error"
    # one reward chart: the registry's, fetched from its twin (none embedded)
    assert "reward" not in d["charts"] and [c["id"] for c in d["analytics"]["charts"]].count("reward") == 1


def test_rollout_filters_and_keyset_pages(client, engine, tmp_path):
    rs = [rollout(f"x{i:03d}", step=i % 5, reward=i / 100, ending="error" if i % 7 == 0 else "submitted",
                  group=f"g{i % 3}", task={"key": f"t{i % 2}"}) for i in range(60)]
    ingest(engine, write_jsonl(tmp_path / "many.jsonl", rs))
    seen, url = [], "/runs/r1/rollouts.json?limit=7"
    while url:
        d = client.get(url).json()
        seen += [r["rollout_id"] for r in d["rollouts"]]
        url = d["next_url"] and d["next_url"].replace("/rollouts?", "/rollouts.json?")
    assert sorted(seen) == sorted(r.id for r in rs) and len(seen) == 60
    steps = [client.get(f"/runs/r1/rollouts/{i}.json").json()["rollout"]["step"] for i in seen]
    assert steps == sorted(steps)
    d = client.get("/runs/r1/rollouts.json?step=2&ending=error").json()
    assert {r["rollout_id"] for r in d["rollouts"]} == {r.id for r in rs if r.step == 2 and r.ending.type == "error"}
    d = client.get("/runs/r1/rollouts.json?reward_min=0.2&reward_max=0.3&group=g1&task=t0").json()
    assert d["rollouts"] and all(0.2 <= r["reward"] <= 0.3 and r["group_id"] == "g1" and r["task_key"] == "t0"
                                 for r in d["rollouts"])
    assert client.get("/runs/r1/rollouts.json?ending=bogus").status_code == 422
    assert client.get("/runs/r1/rollouts.json?after=garbage").status_code == 422
    # htmx asks for the next rows only
    part = client.get("/runs/r1/rollouts?limit=5", headers={"HX-Request": "true"}).text
    assert "<tr" in part and "<html" not in part


def test_list_json_never_carries_bodies(client, engine, tmp_path):
    secret = "BODY-TEXT-" + "x" * 50
    ingest(engine, write_jsonl(tmp_path / "b.jsonl", [rollout("b0", messages=[
        {"role": "user", "content": secret}, {"role": "assistant", "content": secret}])]))
    assert secret not in client.get("/runs/r1/rollouts.json").text
    assert secret not in client.get("/runs/r1/rollouts").text
    assert secret in client.get("/runs/r1/rollouts/b0.json").text


HOSTILE = ['<script>alert("x")</script>', '<img src=x onerror=alert(1)>', '"><svg onload=alert(1)>']


def test_trace_text_is_escaped_everywhere(client, engine, tmp_path):
    msgs = [{"role": "user", "content": HOSTILE[0]},
            {"role": "assistant", "content": HOSTILE[1], "reasoning_content": HOSTILE[2],
             "tool_calls": [{"id": HOSTILE[2], "name": HOSTILE[0], "arguments": HOSTILE[1]}]},
            {"role": "tool", "tool_call_id": HOSTILE[2], "content": HOSTILE[1]}]
    r = rollout("x1", messages=msgs, group=HOSTILE[1], task={"key": HOSTILE[0]},
                ending="error", errors=[{"type": HOSTILE[0], "message": HOSTILE[1]}])
    r.ending.detail = HOSTILE[2]
    ingest(engine, write_jsonl(tmp_path / "x.jsonl", [r]))
    for url in ["/runs/r1/rollouts/x1", "/runs/r1/rollouts",
                "/runs/r1/groups/" + "%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"]:
        html = client.get(url).text
        for h in HOSTILE:
            assert h not in html, (url, h)
        assert "&lt;script&gt;" in html or "&lt;img" in html
    page = client.get("/runs/r1/rollouts/x1")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    node = client.get("/runs/r1/rollouts/x1.json").json()["messages"][2]
    full = client.get(node["content_url"])
    assert full.headers["content-type"].startswith("text/plain") and full.text == HOSTILE[1]


def test_non_finite_rewards_stay_strict_json(client, engine):
    """Case 10: NaN, null and Infinity rewards (non-strict JSON input)."""
    report = ingest(engine, data_path("cases", "10-nan-and-null-rewards.json"), run="r10")
    assert report.ok and report.total.inserted == 4
    raw = client.get("/runs/r10/groups/g1.json").text
    assert "NaN" not in raw and "Infinity" not in raw
    d = client.get("/runs/r10/groups/g1.json").json()
    assert {m["rollout_id"]: m["reward_status"] for m in d["members"]} == {
        "g1-0": "ok", "g1-1": "nan", "g1-2": "unscored", "g1-3": "inf"}
    assert d["excluded"] == {"count": 3, "of": 4}
    assert d["policies"]["errors_dropped"]["n"] == 1
    assert d["policies"]["errors_dropped"]["mean"] == 1.0
    html = client.get("/runs/r10/groups/g1").text
    assert "excluded from the baseline: 3 of 4" in html


def test_ids_ending_in_json_open_as_pages(client, engine, tmp_path):
    """`.json` asks for the twin, unless the id itself ends in `.json`."""
    rs = [rollout("x.json", run="r.json", group="g.json", index=0), rollout("y", run="r.json", group="g.json", index=1)]
    assert ingest(engine, write_jsonl(tmp_path / "j.jsonl", rs)).ok
    for url in ("/runs/r.json", "/runs/r.json/rollouts/x.json", "/runs/r.json/groups/g.json"):
        page = client.get(url)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), url
        twin = client.get(url + ".json")
        assert twin.status_code == 200 and twin.headers["content-type"] == "application/json", url
    assert client.get("/runs/r.json/rollouts/y.json").json()["rollout"]["rollout_id"] == "y"
    assert client.get("/runs/r.json/rollouts/x.json.json").json()["rollout"]["rollout_id"] == "x.json"


def test_an_id_ending_in_json_beside_the_same_id_without_it_has_its_own_page(client, engine, tmp_path):
    """Rollouts `a` and `a.json`, runs `r` and `r.json`: `/rollouts/a.json` is `a`'s twin, so the
    page of `a.json` is linked as `a%2Ejson` (app.urls.q), and every link the pages give reaches
    the id it names."""
    from app import urls

    rs = [rollout(i, run=run, group="g", index=k) for run in ("r", "r.json") for k, i in enumerate(("a", "a.json"))]
    assert ingest(engine, write_jsonl(tmp_path / "j.jsonl", rs)).ok
    assert urls.rollout("r.json", "a.json") == "/runs/r%2Ejson/rollouts/a%2Ejson"
    for run in ("r", "r.json"):
        for rid in ("a", "a.json"):
            page = client.get(urls.rollout(run, rid))
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), (run, rid)
            assert client.get(urls.rollout(run, rid, json=True)).json()["rollout"]["rollout_id"] == rid, (run, rid)
        assert client.get(urls.run(run, json=True)).json()["run"]["id"] == run
        listed = client.get(urls.rollouts(run)).text
        assert f'href="{urls.rollout(run, "a.json")}' in listed and f'href="{urls.rollout(run, "a")}' in listed
    # a bare `.json` is the twin of the id without it; a hand-typed one still finds a lone id
    assert client.get("/runs/r/rollouts/a.json").json()["rollout"]["rollout_id"] == "a"
    assert client.get("/runs/r.json").json()["run"]["id"] == "r"
    assert client.get("/runs/r/rollouts/a%2ejson").headers["content-type"].startswith("text/html")
    missing = client.get("/runs/r/rollouts/b%2Ejson.json")
    assert missing.status_code == 404 and "'b.json'" in missing.json()["error"]["message"]
    # the links training code prints (the client's `rollout_url`, `rollscope link`) are the app's
    from rollscope.client import rollout_url
    from tests.helpers import run_cli

    assert rollout_url("r.json", "a.json", base="http://h") == "http://h" + urls.rollout("r.json", "a.json")
    printed = run_cli("link", "--base", "http://h", "r.json", "a.json").stdout.split()
    assert "http://h" + urls.rollout("r.json", "a.json") in printed
    assert client.get(urls.rollout("r.json", "a.json")).headers["content-type"].startswith("text/html")


def test_dot_segments_are_not_ids(engine, tmp_path):
    """"." and ".." would be collapsed by browsers as path segments: refused at ingest."""
    import json

    path = tmp_path / "dots.jsonl"
    lines = [json.dumps(dict(rollout("fine").to_json_dict(), id=i)) for i in (".", "..", "fine")]
    path.write_text("\n".join(lines) + "\n")
    report = ingest(engine, path)
    assert report.total.inserted == 1 and [e.line for e in report.errors] == [1, 2]
    assert all(e.field == "id" for e in report.errors)


def test_source_roles_and_retries_are_explained(client, engine, tmp_path):
    import json

    path = tmp_path / "roles.jsonl"
    path.write_text(json.dumps({"rollout_id": "w", "reward": 1.0, "messages": [
        {"role": "wizard", "content": "abracadabra"}, {"role": "assistant", "content": "ok"}]}) + "\n")
    assert ingest(engine, path, run="roles").ok
    d = client.get("/runs/roles/rollouts/w.json").json()
    assert d["messages"][0]["role"] == "user" and d["messages"][0]["source_role"] == "wizard"
    assert "source role: wizard" in client.get("/runs/roles/rollouts/w").text
    rs = [rollout("a", run="rt", attempt=0, ending="error"), rollout("a", run="rt", attempt=1)]
    assert ingest(engine, write_jsonl(tmp_path / "rt.jsonl", rs)).ok
    assert client.get("/runs/rt.json").json()["totals"]["retries"] == 1
    assert "1 rollout is a retry" in client.get("/runs/rt").text
