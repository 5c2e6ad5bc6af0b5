"""A rollout page's prev / next walk the exact rollouts list the reader came from (its filters,
prefix ones included, and its sort); `agent=(none)`; refused values (negative steps, unknown
run, missing step) answer in the one error shape."""
from __future__ import annotations

import re
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tests.helpers import ingest, rollout, write_jsonl


def _fixture(engine, tmp_path):
    rewards = [0.5, 0.1, 0.9, None, 0.3, 0.7]
    rs = [rollout(f"r{i}", step=3, reward=rewards[i], task={"key": f"calc/{i}" if i < 4 else f"text/{i}"},
                  **({"episode": {"id": f"e{i}", "agent": "solver"}} if i % 2 else {}))
          for i in range(6)]
    rs.append(rollout("other-step", step=4, reward=0.2, task={"key": "calc/x"}))
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs))


def _walk(client, first: str, listq: str) -> list[str]:
    """Follow `next` from `first` to the end of the list."""
    seen, url = [], f"/runs/r1/rollouts/{first}.json?list={listq}"
    while url:
        nav = client.get(url).json()["list_nav"]
        seen.append(url.split("/rollouts/")[1].split(".json")[0])
        url = nav["next_url"]
    return seen


def test_prev_next_follow_prefix_filters_and_sort(client, engine, tmp_path):
    _fixture(engine, tmp_path)
    # the list by reward: its rows carry the whole query (filters and sort)
    page = client.get("/runs/r1/rollouts?step=3&sort=reward").text
    rows = re.findall(r'<td><a href="/runs/r1/rollouts/([^"?]+)\?list=([^"]+)"', page)
    assert [r for r, _ in rows] == ["r1", "r4", "r0", "r5", "r2", "r3"]  # reward ascending, missing last
    listq = rows[0][1]
    assert parse_qs(unquote(listq)) == {"step": ["3"], "sort": ["reward"]}
    assert _walk(client, "r1", listq) == ["r1", "r4", "r0", "r5", "r2", "r3"]
    nav = client.get(f"/runs/r1/rollouts/r0.json?list={listq}").json()["list_nav"]
    assert (nav["prev"], nav["next"]) == ("r4", "r5")
    assert parse_qs(urlsplit(nav["list_url"]).query) == {"step": ["3"], "sort": ["reward"]}
    # descending: the missing reward still last, as the list shows it
    desc = client.get("/runs/r1/rollouts.json?step=3&sort=-reward").json()["list_query"]
    assert _walk(client, "r2", quote(desc, safe="")) == ["r2", "r5", "r0", "r4", "r1", "r3"]
    # a task prefix (the QA case: no prev / next at all before)
    prefix = "task%3Dcalc%252F%252A"  # task=calc/*
    nav = client.get(f"/runs/r1/rollouts/r2.json?list={prefix}").json()["list_nav"]
    assert (nav["prev"], nav["next"]) == ("r1", "r3")
    assert _walk(client, "r0", prefix) == ["r0", "r1", "r2", "r3", "other-step"]
    # prefix and sort together, with an agent filter
    both = "task%3Dcalc%252F%252A%26sort%3D-reward%26agent%3Dsolver"
    assert _walk(client, "r1", both) == ["r1", "r3"]
    nav = client.get(f"/runs/r1/rollouts/r3?list={both}").text
    assert 'data-prev="/runs/r1/rollouts/r1?list=' in nav and 'data-next=""' in nav


def test_no_agent_is_a_real_filter(client, engine, tmp_path):
    _fixture(engine, tmp_path)
    d = client.get("/runs/r1/rollouts.json").json()
    none = [v for v in d["facets"]["agent"] if v["value"] == "(none)"]
    assert none and none[0]["count"] == 4 and none[0]["params"] == {"agent": "(none)"}
    got = client.get("/runs/r1/rollouts.json?agent=(none)").json()
    assert sorted(r["rollout_id"] for r in got["rollouts"]) == ["other-step", "r0", "r2", "r4"]
    assert got["total"] == 4
    chosen = next(v for v in got["facets"]["agent"] if v["value"] == "(none)")
    assert chosen["active"] and chosen["params"] == {}
    assert client.get("/runs/r1/rollouts.json?agent=solver").json()["total"] == 3
    html = client.get("/runs/r1/rollouts").text
    assert 'href="/runs/r1/rollouts?agent=%28none%29">(none)</a>' in html
    # with a step filter the facet comes from the rollups: the same value
    step = client.get("/runs/r1/rollouts.json?step=3").json()["facets"]["agent"]
    assert {v["value"]: v["count"] for v in step} == {"(none)": 3, "solver": 3}
    # facets.json takes the list's whole query (reward, label, sort) and counts what the list does
    for q in ("reward_min=0.5", "reward_max=0.2&sort=-reward", "label=nothing-has-it",
              "step=3&reward_min=0&sort=turns"):
        listed = client.get(f"/runs/r1/rollouts.json?{q}").json()
        alone = client.get(f"/runs/r1/facets.json?{q}")
        assert alone.status_code == 200, (q, alone.text)
        assert alone.json()["total"] == listed["total"] and alone.json()["facets"] == listed["facets"], q
    assert client.get("/runs/r1/facets.json?sort=bogus").status_code == 422


def test_refused_values_answer_in_the_error_shape(client, engine, tmp_path):
    _fixture(engine, tmp_path)
    for url in ("/runs/r1/rollouts.json?step=-1", "/api/v1/runs/r1/rollouts?step=-1"):
        r = client.get(url)
        assert r.status_code == 422, url
        assert r.json()["error"]["field"] == "step" and r.json()["error"]["code"] == "invalid"
    assert client.get("/runs/r1/rollouts?step=-1").status_code == 422
    assert client.get("/runs/r1/rollouts.json?step=0").status_code == 200
    r = client.get("/search.json?q=error&run=nope")
    assert r.status_code == 404 and r.json()["error"]["field"] == "run" and "nope" in r.json()["error"]["message"]
    assert client.get("/search.json?q=error&run=r1").status_code == 200
    assert client.get("/runs/r1/steps/999.json").status_code == 404
    r = client.get("/runs/r1/task-changes.json?a=3&b=999")
    assert r.status_code == 404 and r.json()["error"]["field"] == "b"
    r = client.get("/runs/r1/task-changes.json?a=2&b=4")
    assert r.status_code == 404 and r.json()["error"]["field"] == "a"
    ok = client.get("/runs/r1/task-changes.json?a=3&b=4")
    assert ok.status_code == 200 and ok.json()["tasks"]
    assert client.get("/runs/nope/task-changes.json?a=3&b=4").status_code == 404
