"""The paired comparison through the real HTTP app on SQLite and Postgres: two runs ingested
from native JSONL, `/compare.json`'s `paired` section (its shape is what the MCP server reads),
the page, the side-by-side task page and its twin, and their errors."""
from __future__ import annotations

import pytest

from tests.helpers import ingest, rollout, write_jsonl

EVIL = "<script>alert('task')</script>&amp;"


def _two_runs(engine, tmp_path):
    """base and new over tasks whose answers are known: `up` improves, `down` regresses (an
    errored rollout with a stored reward 1 scores 0), `flat` the same, `one` has a single
    rollout in base, `old` is only in base, EVIL's name must be escaped."""
    rs = []

    def add(run, task, rewards, step_of=lambda i: i % 2, ending=lambda i: "submitted"):
        rs.extend(rollout(f"{run}-{task}-{i}", run=run, step=step_of(i), reward=r, ending=ending(i),
                          task={"key": task}) for i, r in enumerate(rewards))

    add("base", "up", [0.0] * 7 + [1.0])
    add("new", "up", [1.0] * 7 + [0.0])
    add("base", "down", [1.0] * 8)
    add("new", "down", [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], ending=lambda i: "error" if i == 7 else "submitted")
    add("base", "flat", [0.2, 0.4, 0.6, 0.8])
    add("new", "flat", [0.8, 0.6, 0.4, 0.2])
    add("base", "one", [0.5])
    add("new", "one", [0.5, 1.0])
    add("base", "old", [1.0, 0.0])
    add("base", EVIL, [0.0, 1.0])
    add("new", EVIL, [1.0, 0.0, 1.0])
    rs.append(rollout("new-nostep", run="new", step=None, reward=None, ending="truncated", task={"key": "flat"}))
    report = ingest(engine, write_jsonl(tmp_path / "runs.jsonl", rs))
    assert report.ok


def test_paired_section_of_compare_json(client, engine, tmp_path):
    _two_runs(engine, tmp_path)
    d = client.get("/compare.json?runs=base,new").json()
    assert d["paired_note"] is None
    p = d["paired"]
    assert p["runs"] == ["base", "new"] and p["level"] == 0.95 and p["tasks_total"] == 6
    by = {t["task"]: t for t in p["tasks"]}
    assert set(by) == {"up", "down", "flat", "one", "old", EVIL}
    # beyond their interval first: the regression (|diff| 0.75) and the improvement (0.75)
    assert {t["task"] for t in p["tasks"][:2]} == {"up", "down"}
    assert by["up"]["verdict"] == "improved" and by["up"]["ci_low"] > 0
    assert by["up"]["diff"] == pytest.approx(0.75) and (by["up"]["n_a"], by["up"]["n_b"]) == (8, 8)
    # the errored rollout's stored reward 1 is scored 0: 1 of 8, as compare's task table
    assert by["down"]["mean_b"] == pytest.approx(1 / 8) and by["down"]["verdict"] == "regressed"
    assert by["down"]["ci_high"] < 0
    table = {t["task"]: t for t in d["tasks"]}
    for key, t in by.items():
        assert [t["mean_a"], t["mean_b"]] == [pytest.approx(m) if m is not None else None
                                              for m in table[key]["mean_reward"]], key
    # the rollout without a reward counts nowhere
    assert by["flat"]["n_b"] == 4 and by["flat"]["diff"] == 0.0 and by["flat"]["verdict"] == "unclear"
    assert by["one"]["ci_low"] is None and by["one"]["note"] == "fewer than 2 rollouts in a run: no interval"
    assert by["old"]["diff"] is None and by["old"]["note"] == "not in run B" and by["old"]["verdict"] is None
    assert p["tasks"][-1]["task"] == "old"  # the task not compared comes last
    assert p["verdicts"] == {"regressed": 1, "improved": 1, "unclear": 3}
    assert (p["shared_tasks"], p["only_a"], p["only_b"]) == (5, 1, 0)
    # sign test: up, one and EVIL better in B, down worse, flat a tie, old left out: 2·5/16
    assert p["sign_test"] == {"n_plus": 3, "n_minus": 1, "ties": 1, "p": 0.625}
    assert by["up"]["urls"] == ["/runs/base/rollouts.json?task=up", "/runs/new/rollouts.json?task=up"]
    assert by["up"]["url"] == "/compare/task.json?runs=base%2Cnew&task=up"
    assert p["next_url"] is None and p["offset"] == 0
    # a step range leaves the stepless rollouts out and the other steps
    ranged = {t["task"]: t for t in client.get("/compare.json?runs=base,new&steps=1").json()["paired"]["tasks"]}
    assert (ranged["up"]["n_a"], ranged["up"]["n_b"]) == (4, 4) and "steps=1" in ranged["up"]["url"]
    assert client.get("/compare.json?runs=base,new&paired_offset=5").json()["paired"]["tasks"][0]["task"] == \
        p["tasks"][5]["task"]


def test_tasks_past_the_read_bound_are_compared_from_the_rollups_moments(client, engine, tmp_path, monkeypatch):
    """Bounded work at any run size: a task with more than EXACT_MAX scored rollouts in a run, or
    past READ_CAP rewards read (smallest tasks first), gets its interval from the rollups' moments
    (method "moments"), with the same verdicts here as from every reward; the page and its twin
    say how many, and the side-by-side page repeats the compare page's entry."""
    from app.views import paired
    _two_runs(engine, tmp_path)
    every = client.get("/compare.json?runs=base,new").json()["paired"]
    assert {t["method"] for t in every["tasks"] if t["verdict"]} == {"bootstrap"}
    assert every["from_moments"] == 0 and every["rewards_read"] == 48 and every["read_cap"] == paired.READ_CAP
    monkeypatch.setattr(paired, "EXACT_MAX", 2)  # up, down, flat and EVIL (n 8, 8, 4, 2|3): from moments
    few = client.get("/compare.json?runs=base,new").json()["paired"]
    by, was = {t["task"]: t for t in few["tasks"]}, {t["task"]: t for t in every["tasks"]}
    assert {k: t["method"] for k, t in by.items()} == {"up": "moments", "down": "moments", "flat": "moments",
                                                       EVIL: "moments", "one": "bootstrap", "old": None}
    assert {k: t["verdict"] for k, t in by.items()} == {k: t["verdict"] for k, t in was.items()}
    assert few["from_moments"] == 4 and few["rewards_read"] == 3 and few["sign_test"] == every["sign_test"]
    for k in ("up", "down", "flat"):  # the same means (the rollups' are the task table's), another interval
        assert by[k]["diff"] == pytest.approx(was[k]["diff"]) and (by[k]["n_a"], by[k]["n_b"]) == (was[k]["n_a"],
                                                                                                    was[k]["n_b"])
    assert by["flat"]["ci_low"] < 0 < by["flat"]["ci_high"] and by["up"]["ci_low"] > 0 > by["down"]["ci_high"]
    assert by["one"]["note"] == "fewer than 2 rollouts in a run: no interval"
    # the cap: 8 rewards read at most, the smallest tasks first (one: 3, EVIL: 5); the rest from moments
    monkeypatch.setattr(paired, "EXACT_MAX", 100)
    monkeypatch.setattr(paired, "READ_CAP", 8)
    capped = client.get("/compare.json?runs=base,new").json()["paired"]
    by = {t["task"]: t for t in capped["tasks"]}
    assert {k for k, t in by.items() if t["method"] == "bootstrap"} == {"one", EVIL}
    assert capped["rewards_read"] == 8 and capped["from_moments"] == 3
    assert {k: t["verdict"] for k, t in by.items()} == {k: t["verdict"] for k, t in was.items()}
    side = client.get("/compare/task.json?runs=base,new&task=up").json()["paired"]
    assert side == by["up"] | {"url": side["url"]} and side["method"] == "moments"
    html = client.get("/compare?runs=base,new").text
    assert "3 of the compared tasks had their interval from the rollups' moments" in html
    assert "past the 8 rewards a comparison reads (8 read)" in html
    assert "from the rollups' moments" in client.get("/compare/task?runs=base,new&task=up").text
    # over a step range the moments are summed from the step rows
    ranged = {t["task"]: t for t in client.get("/compare.json?runs=base,new&steps=0-1").json()["paired"]["tasks"]}
    assert ranged["up"]["method"] == "moments" and ranged["up"]["verdict"] == "improved"


def test_the_next_page_of_the_paired_section_keeps_the_steps_and_smoothing(client, engine, tmp_path, monkeypatch):
    from app.views import paired
    _two_runs(engine, tmp_path)
    monkeypatch.setattr(paired, "PAIRED_LIMIT", 2)
    p = client.get("/compare.json?runs=base,new&steps=0-9&smooth=5").json()["paired"]
    assert p["next_url"] == "/compare.json?runs=base%2Cnew&steps=0-9&smooth=5&paired_offset=2"
    last = client.get("/compare.json?runs=base,new&paired_offset=4").json()["paired"]
    assert last["next_url"] is None and len(last["tasks"]) == 2


def test_side_by_side_task_page_and_twin(client, engine, tmp_path):
    _two_runs(engine, tmp_path)
    d = client.get("/compare/task.json?runs=base,new&task=down").json()
    a, b = d["sides"]
    assert (a["run"]["id"], b["run"]["id"]) == ("base", "new") and (a["total"], b["total"]) == (8, 8)
    errored = next(r for r in b["rollouts"] if r["ending"] == "error")
    assert errored["reward"] == 1.0 and errored["url"] == "/runs/new/rollouts/new-down-7.json"
    assert client.get(errored["url"]).status_code == 200
    listed = client.get("/compare.json?runs=base,new").json()["paired"]["tasks"]
    assert d["paired"] == next(t for t in listed if t["task"] == "down") | {"url": d["paired"]["url"]}
    assert d["compare_url"] == "/compare.json?runs=base%2Cnew"
    html = client.get("/compare/task?runs=base,new&task=down")
    assert html.status_code == 200 and 'href="/runs/new/rollouts/new-down-7"' in html.text
    assert "regressed" in html.text and html.text.count('class="side"') == 2
    empty = client.get("/compare/task.json?runs=base,new&task=nowhere").json()
    assert [s["total"] for s in empty["sides"]] == [0, 0] and empty["paired"]["diff"] is None


def test_task_names_are_escaped_in_both_pages(client, engine, tmp_path):
    _two_runs(engine, tmp_path)
    page = client.get("/compare?runs=base,new").text
    task = client.get("/compare/task", params={"runs": "base,new", "task": EVIL}).text
    for html in (page, task):
        assert "<script>alert" not in html
        assert "&lt;script&gt;alert(&#39;task&#39;)&lt;/script&gt;&amp;amp;" in html
    assert 'id="compare-paired"' in page and "side by side" in page


def test_errors_and_more_than_two_runs(client, engine, tmp_path):
    _two_runs(engine, tmp_path)
    ingest(engine, write_jsonl(tmp_path / "third.jsonl", [rollout("x", run="third", task={"key": "up"})]))
    three = client.get("/compare.json?runs=base,new,third").json()
    assert three["paired"] is None and "exactly two runs" in three["paired_note"]
    assert "exactly two runs" in client.get("/compare?runs=base,new,third").text
    missing = client.get("/compare/task.json?runs=base,nope&task=up")
    assert missing.status_code == 404 and missing.json()["error"]["message"] == "no run 'nope'"
    assert client.get("/compare.json?runs=nope,new").json()["error"]["message"] == "no run 'nope'"
    for bad in ("runs=base,new", "runs=base,new,third&task=up", "runs=base&task=up", "runs=base,new&task=up&steps=x",
                "runs=base,new&task=" + "x" * 501):
        assert client.get(f"/compare/task.json?{bad}").status_code == 422, bad
    for bad in ("paired_offset=-1", "paired_offset=x", "paired_offset=99999999999"):
        assert client.get(f"/compare.json?runs=base,new&{bad}").status_code == 422, bad


BIG = "99999999999999999999999"


@pytest.mark.parametrize("url", [
    f"/compare.json?runs=base,new&steps={BIG}", f"/compare.json?runs=base,new&steps=1-{BIG}",
    f"/compare.json?runs=base,new&steps={BIG}-", "/compare.json?runs=base,new&steps=-2147483648",
    f"/compare/task.json?runs=base,new&task=up&steps={BIG}", f"/compare/charts/endings.json?runs=base,new&steps={BIG}",
    f"/runs/base/charts/endings.json?steps={BIG}", f"/runs/base.json?steps={BIG}",
    f"/runs/base/rollouts.json?steps={BIG}", f"/api/v1/runs/base/rollouts?steps={BIG}",
    f"/search.json?q=x&steps={BIG}", f"/search.json?q=x%20step:{BIG}", "/search.json?q=x&steps=2147483648",
    f"/runs/base/steps/{BIG}.json", f"/compare.json?runs=base,new&paired_offset={BIG}",
    f"/runs/base/task-changes.json?a=0&b={BIG}",
])
def test_a_step_above_int32_is_a_422_naming_it(client, engine, tmp_path, url):
    """Every step or count in a URL past 2147483647 (a Postgres INTEGER) is refused with a 422
    naming the parameter, never a 500 (OverflowError) from the database."""
    _two_runs(engine, tmp_path)
    r = client.get(url)
    assert r.status_code == 422, (url, r.status_code, r.text[:300])
    err = r.json()["error"]
    name = "step" if "/steps/" in url or "step:" in url else url.rsplit("?", 1)[-1].rsplit("&", 1)[-1].split("=")[0]
    assert name in (err.get("field") or "") + err["message"], (url, err)


def test_the_largest_step_is_still_taken(client, engine, tmp_path):
    _two_runs(engine, tmp_path)
    for url in ("/compare.json?runs=base,new&steps=2147483647", "/compare.json?runs=base,new&steps=0-2147483647",
                "/search.json?q=x&steps=00002147483647"):
        assert client.get(url).status_code == 200, url


def test_runs_with_no_task_in_common(client, engine, tmp_path):
    """B has other tasks and no rewards at all: nothing is compared, both runs' tasks are listed
    (compared first: none; then A's "not in run B", then B's "not in run A") with no verdict, and
    the summary says plainly that the runs share no task; a task in both runs but scored in one
    only is listed too ("no scored reward in run B")."""
    _two_runs(engine, tmp_path)
    ingest(engine, write_jsonl(tmp_path / "norew.jsonl", [
        rollout(f"nr-{t}-{i}", run="norew", step=i, reward=None, task={"key": t})
        for t in ("other/a", "other/b", "up", EVIL) for i in range(3)]))
    d = client.get("/compare.json?runs=base,norew").json()["paired"]
    by = {t["task"]: t for t in d["tasks"]}
    assert set(by) == {"up", "down", "flat", "one", "old", EVIL, "other/a", "other/b"}
    assert d["tasks_total"] == 8 and d["shared_tasks"] == 0 and (d["only_a"], d["only_b"]) == (4, 2)
    assert d["verdicts"] == {"regressed": 0, "improved": 0, "unclear": 0}
    assert d["sign_test"]["p"] is None and all(t["verdict"] is None and t["diff"] is None for t in d["tasks"])
    assert by["other/a"]["note"] == "not in run A" and by["old"]["note"] == "not in run B"
    assert by["up"]["note"] == "no scored reward in run B" and by["up"]["n_a"] == 8 and by["up"]["n_b"] == 0
    html = client.get("/compare?runs=base,norew").text
    summary = html[html.index('id="paired-summary"'):]
    summary = summary[:summary.index("</p>")]
    assert "No task in common" in summary and "unclear" not in summary and "regressed" not in summary
    assert "4 only in A (base), 2 only in B (norew)" in summary and "2 in both without a scored reward" in summary
    assert html.count("not in run A") == 2 and "&lt;script&gt;" in html and "<script>alert" not in html
    one = client.get("/compare/task.json?runs=base,norew&task=other/a").json()["paired"]
    assert one["note"] == "not in run A" and one["verdict"] is None and one["n_b"] == 0
    page = client.get("/compare/task?runs=base,norew&task=other/a").text
    assert "not in run A: not compared" in page
    assert "A has no scored rollout, B has no scored rollout" in page and "over 0" not in page
    up = client.get("/compare/task?runs=base,norew&task=up").text
    up = " ".join(up[up.index('id="task-paired"'):up.index("(errors scored 0)")].split())
    assert up.endswith("A 0.125 over 8 scored rollouts, B has no scored rollout"), up
    both = client.get("/compare/task.json?runs=base,norew&task=up").json()["paired"]
    assert both == by["up"] | {"url": both["url"]}
