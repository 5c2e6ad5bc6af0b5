"""The analytics pages through the real HTTP app on SQLite and Postgres: every registered chart
with its JSON twin, CSV and drill-down URLs; the step page; task changes; compare; search with
its deep links, maintained through replacement."""
from __future__ import annotations

import csv
import io

import pytest
from sqlmodel import Session

from app import charts
from app.queries import search as search_q
from app.queries import search_query
from app.queries.steps import StepRange, heatmap_tasks, step_stats
from ingest import demo
from tests.helpers import ingest, rollout, write_jsonl


@pytest.fixture
def demo_run(engine, tmp_path):
    path = tmp_path / "demo.jsonl"
    demo.write(path, steps=6, groups=3, group_size=4, tokenizer=False)
    report = ingest(engine, path)
    assert report.ok
    return "demo-grpo"


def test_every_chart_json_csv_html_and_drilldown(client, demo_run):
    for chart_id, chart in charts.REGISTRY.items():
        d = client.get(f"/runs/{demo_run}/charts/{chart_id}.json").json()
        assert d["chart"]["id"] == chart_id and d["chart"]["caption"] == chart.caption
        fig = d["figure"]
        assert "layout" in fig
        points = 0
        for t in fig["data"]:
            urls = t["customdata"] if t["type"] != "heatmap" else [u for row in t["customdata"] for u in row]
            assert urls and all(u.startswith("/runs/demo-grpo/") for u in urls), chart_id
            points += len(urls) if t["type"] != "heatmap" else sum(v is not None for row in t["z"] for v in row)
        if chart_id in ("endings", "reward", "task_heatmap", "lengths", "turns", "latency", "groups", "advantages",
                        "no_gradient", "staleness", "reward_components"):
            assert fig["data"], chart_id  # the demo records all of these
        resp = client.get(f"/runs/{demo_run}/charts/{chart_id}.csv")
        assert resp.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(resp.text)))
        assert len(rows) <= points and (not points or rows)
        page = client.get(f"/runs/{demo_run}/charts/{chart_id}")
        assert page.status_code == 200 and chart.title in page.text


def test_chart_numbers_match_the_rollouts(client, demo_run):
    rows = []
    url = f"/runs/{demo_run}/rollouts.json?limit=1000"
    rows = client.get(url).json()["rollouts"]
    fig = client.get(f"/runs/{demo_run}/charts/endings.json").json()["figure"]
    errors = next(t for t in fig["data"] if t["name"] == "error")
    for step, share, link in zip(errors["x"], errors["y"], errors["customdata"]):
        at = [r for r in rows if r["step"] == step]
        # figures keep 6 significant digits (app.charts.SIGNIFICANT)
        assert share == pytest.approx(sum(r["ending"] == "error" for r in at) / len(at), rel=1e-5)
        assert link == f"/runs/{demo_run}/rollouts?step={step}&ending=error"
    reward = client.get(f"/runs/{demo_run}/charts/reward.json").json()["figure"]
    mean0 = next(t for t in reward["data"] if t["name"] == "mean (errors scored 0)")
    for step, m in zip(mean0["x"], mean0["y"]):
        vals = [0.0 if r["ending"] == "error" else r["reward"] for r in rows if r["step"] == step
                and (r["ending"] == "error" or r["reward"] is not None)]
        assert m == pytest.approx(sum(vals) / len(vals), rel=1e-5)


def test_count_chart_points_open_exactly_their_rollouts(client, demo_run):
    """A chart whose points count rollouts (staleness, findings): the list each point links to
    totals its value, in the page list, the API list and the export."""
    seen = 0
    for chart_id in ("staleness", "findings"):
        fig = client.get(f"/runs/{demo_run}/charts/{chart_id}.json").json()["figure"]
        for t in fig["data"]:
            for url, y in zip(t["customdata"], t["y"]):
                path, _, query = url.partition("?")
                assert client.get(f"{path}.json?{query}").json()["total"] == y, (chart_id, t["name"], url)
                seen += 1
    staleness = client.get(f"/runs/{demo_run}/charts/staleness.json").json()["figure"]["data"]
    assert len(staleness) >= 2 and seen  # the demo samples from more than one policy version
    one = staleness[1]
    step, y, url = one["x"][0], one["y"][0], one["customdata"][0]
    assert url == f"/runs/{demo_run}/rollouts?step={step}&staleness={one['name'].split()[0]}"
    api = client.get(f"/api/v1/runs/{demo_run}/rollouts?{url.partition('?')[2]}&limit=1000").json()
    assert len(api["items"]) == y
    assert 'name="staleness"' in client.get(url).text
    assert client.get(f"/runs/{demo_run}/rollouts.json?staleness=-1").status_code == 422
    # a filter whose value is 0 is a filter (the count once came from the step rollups, unfiltered)
    rows = client.get(f"/runs/{demo_run}/rollouts.json?limit=1000").json()["rollouts"]
    zero = client.get(f"/runs/{demo_run}/rollouts.json?reward_max=0&limit=1000").json()
    assert (zero["total"] == len(zero["rollouts"])
            == sum(r["reward"] is not None and r["reward"] <= 0 for r in rows) < len(rows))


def test_step_range_and_moving_average(client, demo_run):
    d = client.get(f"/runs/{demo_run}/charts/reward.json?steps=2-4&smooth=3").json()
    xs = {x for t in d["figure"]["data"] for x in t["x"]}
    assert xs == {2, 3, 4}
    names = [t["name"] for t in d["figure"]["data"]]
    assert "mean (errors scored 0) (avg 3)" in names and "mean (errors scored 0)" in names  # raw kept
    assert d["run"]["url"] == "/runs/demo-grpo.json"  # the twin's links go to twins, its points to pages
    assert d["charts"][0]["url"].startswith("/runs/demo-grpo/charts/") and d["charts"][0]["url"].endswith(
        ".json?steps=2-4&smooth=3")
    assert all(u.startswith("/runs/demo-grpo/") and ".json" not in u
               for t in d["figure"]["data"] for u in t["customdata"])
    html = client.get(f"/runs/{demo_run}/charts/reward?steps=2-4&smooth=3").text
    assert 'href="/runs/demo-grpo/charts/endings?steps=2-4&amp;smooth=3"' in html
    assert client.get(f"/runs/{demo_run}/charts/reward.json?steps=4-2").status_code == 422
    assert client.get(f"/runs/{demo_run}/charts/reward.json?steps=abc").status_code == 422
    assert client.get(f"/runs/{demo_run}/charts/nope.json").status_code == 404


def test_step_page_tells_the_story(client, engine, tmp_path):
    rs = [rollout(f"a{i}", run="r1", step=3, group="g1", index=i, reward=float(i % 2),
                  ending="error" if i >= 6 else "submitted", task={"key": "t<b>1</b>"}) for i in range(8)]
    for r in rs[6:]:
        r.ending.detail = "sandbox_crash"
    rs += [rollout(f"b{i}", run="r1", step=3, group="g2", index=i, reward=1.0, task={"key": "t2"}) for i in range(4)]
    rs += [rollout(f"c{i}", run="r1", step=2, group="g0", index=i, reward=0.5, task={"key": "t<b>1</b>"})
           for i in range(4)]
    ingest(engine, write_jsonl(tmp_path / "s.jsonl", rs))
    d = client.get("/runs/r1/steps/3.json").json()
    assert d["rollouts"] == 12 and d["previous_url"] == "/runs/r1/steps/2.json" and d["next_url"] is None
    # the twin links to twins, each answering JSON; the page links to pages
    links = [d["run"]["url"], d["previous_url"], d["rollouts_url"], d["charts_url"], d["task_changes_url"],
             *(e["url"] for e in d["endings"]), *(h["url"] for h in d["history"]),
             *(g["url"] for g in d["groups"]["table"]),
             *(t["url"] for t in d["tasks"]), *(r["url"] for r in d["no_gradient"]["rollouts"])]
    assert d["run"]["url"] == "/runs/r1.json" and d["rollouts_url"] == "/runs/r1/rollouts.json?step=3"
    assert d["charts_url"] == "/runs/r1/charts/reward.json?steps=0-23"
    assert d["task_changes_url"] == "/runs/r1/task-changes.json?a=2&b=3"
    for link in dict.fromkeys(links):
        resp = client.get(link)
        assert resp.status_code == 200 and resp.headers["content-type"] == "application/json", link
    assert client.get("/runs/r1/steps/3", headers={"Accept": "application/json"}).json()["previous_url"] \
        == "/runs/r1/steps/2.json"
    err = next(e for e in d["endings"] if e["ending"] == "error")
    assert err["count"] == 2 and err["details"] == [{"detail": "sandbox_crash", "count": 2}]
    assert [h["step"] for h in d["history"]] == [2, 3]
    assert d["groups"]["table"][0]["group_id"] == "g1"  # most affected first
    assert d["groups"]["zero_variance"]["errors_dropped"] == 1  # g2: all 1.0
    reasons = {r["rollout_id"]: r["reason"] for r in d["no_gradient"]["rollouts"]}
    assert reasons == {"a6": "error_dropped", "a7": "error_dropped", "b0": "zero_variance_group",
                       "b1": "zero_variance_group", "b2": "zero_variance_group", "b3": "zero_variance_group"}
    task = next(t for t in d["tasks"] if t["task"] == "t<b>1</b>")
    assert task["previous_mean_reward"] == 0.5 and task["errors"] == 2
    html = client.get("/runs/r1/steps/3").text
    assert "t&lt;b&gt;1&lt;/b&gt;" in html and "<b>1</b>" not in html and "sandbox_crash" in html
    assert 'href="/runs/r1/steps/2"' in html and 'href="/runs/r1/rollouts?step=3"' in html and ".json?" not in html
    assert client.get("/runs/r1/steps/9").status_code == 404
    assert client.get("/runs/r1/steps/x").status_code == 422
    changes = client.get("/runs/r1/task-changes.json?a=2&b=3").json()
    t1 = next(t for t in changes["tasks"] if t["task"] == "t<b>1</b>")
    assert t1["endings"]["error"] == [0, 2] and t1["url_b"] == "/runs/r1/rollouts.json?step=3&task=t%3Cb%3E1%3C%2Fb%3E"
    assert (changes["run"]["url"], changes["a_url"], changes["b_url"]) == \
        ("/runs/r1.json", "/runs/r1/steps/2.json", "/runs/r1/steps/3.json")
    assert {r["step"] for r in client.get(t1["url_a"]).json()["rollouts"]} == {2}
    html = client.get("/runs/r1/task-changes?a=2&b=3").text
    assert 'href="/runs/r1/steps/2"' in html and "rollouts.json" not in html
    csv_text = client.get("/runs/r1/task-changes.csv?a=2&b=3").text
    assert "t<b>1</b>" in csv_text and "/runs/r1/rollouts?step=3" in csv_text  # the download links to pages


def test_compare_two_runs(client, engine, tmp_path):
    rs = [rollout(f"x{s}-{i}", run="base", step=s, reward=float(i % 2), task={"key": "t1"})
          for s in range(3) for i in range(4)]
    rs += [rollout(f"y{s}-{i}", run="new", step=s, reward=1.0, ending="error" if i == 0 else "submitted",
                   task={"key": "t1"}) for s in range(3) for i in range(4)]
    rs.append(rollout("y-nostep", run="new", step=None, reward=0.0, ending="truncated", task={"key": "t1"}))
    ingest(engine, write_jsonl(tmp_path / "c.jsonl", rs))
    d = client.get("/compare.json?runs=base,new").json()
    assert [r["id"] for r in d["runs"]] == ["base", "new"]
    # a rollout without a step counts in the totals as on the run page, and not in a step range
    assert [r["rollouts"] for r in d["runs"]] == [12, 13]
    assert next(e for e in d["endings"] if e["ending"] == "truncated")["counts"] == [0, 1]
    ranged = client.get("/compare.json?runs=base,new&steps=0-2").json()
    assert [r["rollouts"] for r in ranged["runs"]] == [12, 12], ranged
    assert [r["url"] for r in d["runs"]] == ["/runs/base.json", "/runs/new.json"]
    assert d["tasks"][0]["urls"] == ["/runs/base/rollouts.json?task=t1", "/runs/new/rollouts.json?task=t1"]
    assert client.get(d["tasks"][0]["urls"][1]).json()["total"] == 13
    html = client.get("/compare?runs=base,new").text
    assert 'href="/runs/base"' in html and "rollouts.json" not in html
    err = next(e for e in d["endings"] if e["ending"] == "error")
    assert err["counts"] == [0, 3] and err["delta"] == pytest.approx(3 / 13)
    fig = client.get(d["charts"]["reward"]["json_url"]).json()["figure"]
    names = [t["name"] for t in fig["data"]]
    assert "base: mean (errors scored 0)" in names and "new: mean (errors scored 0)" in names
    # 9 of 13 scored 1 (errors scored 0)
    assert d["tasks"][0]["mean_reward"] == [pytest.approx(0.5), pytest.approx(9 / 13)]
    assert client.get("/compare").status_code == 422
    assert client.get("/compare.json?runs=base,missing").status_code == 404
    assert client.get("/compare?runs=base,new").status_code == 200
    rows = list(csv.DictReader(io.StringIO(client.get(d["charts"]["endings"]["csv_url"]).text)))
    assert {r["series"] for r in rows} >= {"base: submitted", "new: error"}
    assert client.get("/compare/charts/task_heatmap.json?runs=base,new").status_code == 404
    assert client.get("/compare/charts/reward.json?runs=base").status_code == 422


def test_compare_runs_whose_id_holds_a_comma(client, engine, tmp_path):
    """The runs list's checkboxes send `runs=` once per run, each value one id: `a,b` is a run;
    the compare links write `runs=` once per run when an id holds a comma."""
    from app import urls

    rs = [rollout(f"{run}-{i}", run=run, step=0, reward=float(i)) for run in ("a,b", "r", "a", "b") for i in range(2)]
    ingest(engine, write_jsonl(tmp_path / "c.jsonl", rs))
    d = client.get("/compare.json?runs=a%2Cb&runs=r").json()
    assert [r["id"] for r in d["runs"]] == ["a,b", "r"]
    assert [r["id"] for r in client.get("/compare.json?runs=a,b").json()["runs"]] == ["a", "b"]  # one value: split
    assert urls.compare(["a,b", "r"]) == "/compare?runs=a%2Cb&runs=r"
    assert client.get(urls.compare(["a,b", "r"])).status_code == 200
    for chart in d["charts"].values():
        assert client.get(chart["json_url"]).status_code == 200 and "runs=a%2Cb&runs=r" in chart["json_url"]


def test_search_hits_link_to_messages_and_follow_replacement(client, engine, tmp_path):
    msgs = [{"role": "user", "content": "Please fix the <script>alert(1)</script> zanzibar bug in /opt/kumquat/run.sh"},
            {"role": "assistant", "content": "Looking at zanzibar now"}]
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("q1", run="r1", messages=msgs),
                                                      rollout("q2", run="r2", messages=[msgs[0]])]))
    d = client.get("/search.json?q=zanzibar").json()
    assert len(d["hits"]) == 2 and d["total_matches"] == 3  # grouped by rollout
    assert {h["run_id"] for h in d["hits"]} == {"r1", "r2"}
    one = client.get("/search.json?q=zanzibar&run=r1").json()["hits"]
    assert len(one) == 1 and {m["node_idx"] for m in one[0]["matches"]} == {0, 1}
    assert one[0]["counts"] == {"message": 2}
    hit = next(m for m in one[0]["matches"] if m["node_idx"] == 1)
    assert hit["role"] == "assistant" and any(s["hit"] and s["text"].lower() == "zanzibar" for s in hit["snippet"])
    resp = client.get(hit["url"], follow_redirects=False)
    assert resp.status_code == 307 and resp.headers["location"] == "/runs/r1/rollouts/q1?branch=0&offset=0#node-1"
    html = client.get("/search?q=zanzibar+bug").text
    assert "<mark>zanzibar</mark>" in html.lower() and "<script>alert" not in html
    assert client.get("/search.json?q=zanzibar+nowhere").json()["hits"] == []
    # words inside markup and paths are words on both databases (Postgres's parser keeps tags apart)
    for word in ("script", "kumquat", "opt"):
        assert client.get(f"/search.json?q={word}").json()["total_matches"] == 2, word
    # paging
    first = client.get("/search.json?q=zanzibar&limit=1").json()
    assert len(first["hits"]) == 1 and first["next_url"].startswith("/search.json?q=zanzibar&after=")
    assert all(h["url"].startswith(f"/runs/{h['run_id']}/rollouts/{h['rollout_id']}.json") for h in first["hits"])
    assert client.get(first["hits"][0]["url"]).headers["content-type"] == "application/json"
    rest = client.get(first["next_url"]).json()
    assert len(rest["hits"]) == 1 and rest["hits"][0]["run_id"] != first["hits"][0]["run_id"]
    page = client.get("/search?q=zanzibar&limit=1").text
    assert ('href="/search?q=zanzibar&amp;after=' in page
            and ".json" not in page.split("<main", 1)[-1].split("</main>")[0])
    # a replaced rollout's old text leaves the index with it
    ingest(engine, write_jsonl(tmp_path / "b.jsonl", [rollout("q1", run="r1", messages=[
        {"role": "user", "content": "now about quokka"}, {"role": "assistant", "content": "ok"}])]))
    assert {h["run_id"] for h in client.get("/search.json?q=zanzibar").json()["hits"]} == {"r2"}
    assert len(client.get("/search.json?q=quokka").json()["hits"]) == 1
    if engine.dialect.name == "sqlite":  # the FTS5 index holds exactly the stored documents
        with engine.begin() as conn:  # rank 1: compare with the content table (raises when they differ)
            conn.exec_driver_sql("INSERT INTO search_fts(search_fts, rank) VALUES ('integrity-check', 1)")
    assert client.get("/search.json?q=%22%27%28%29*").json()["hits"] == []  # no words: nothing


def test_step_notes_on_the_step_page_and_its_twin(client, engine, tmp_path):
    from app import auth

    ingest(engine, write_jsonl(tmp_path / "n.jsonl", [rollout(f"s{s}", run="r/1", step=s) for s in (2, 3)]))
    bob, _ = auth.issue(engine, "write", "bob")
    h = {"Authorization": f"Bearer {bob}"}
    assert client.put("/api/v1/runs/r%2F1/steps/3/notes", json={"text": "lr <i>spike</i>"},
                      headers=h).status_code == 204
    assert client.put("/api/v1/runs/r%2F1/steps/2/notes", json={"text": "warmup done"}, headers=h).status_code == 204
    d = client.get("/runs/r%2F1/steps/3.json").json()
    assert [(n["author"], n["text"], n["step"]) for n in d["notes"]] == [("bob", "lr <i>spike</i>", 3)]
    assert d["notes"][0]["updated_at"].endswith("Z")
    assert client.get("/runs/r%2F1/steps/2.json").json()["notes"][0]["text"] == "warmup done"
    html = client.get("/runs/r%2F1/steps/3").text
    assert 'id="notes"' in html and "lr &lt;i&gt;spike&lt;/i&gt;" in html and "<i>spike" not in html
    assert "warmup done" not in html
    r = client.put("/api/v1/runs/r%2F1/steps/999/notes", json={"text": "nowhere"}, headers=h)
    assert r.status_code == 404 and r.json()["error"]["field"] == "step" and "999" in r.json()["error"]["message"]
    assert client.get("/api/v1/runs/r%2F1/steps/999/notes").json()["items"] == []


def test_each_chart_reads_only_the_sections_it_draws(engine, demo_run):
    """A chart reads only its `sections` of each step's stats: the figure is the one drawn from
    the whole documents."""
    with Session(engine) as s:
        full = step_stats(session=s, run_id=demo_run)
        tasks = heatmap_tasks(session=s, run_id=demo_run, steps=StepRange(), limit=charts.HEATMAP_TASKS)
    for chart in charts.REGISTRY.values():
        with Session(engine) as s:
            part = step_stats(session=s, run_id=demo_run, sections=chart.sections)
        assert [p.stats for p in part] == [{k: f.stats[k] for k in chart.sections if k in f.stats} for f in full]
        assert charts.figure(chart, demo_run, part, tasks) == charts.figure(chart, demo_run, full, tasks), chart.id


def test_search_pages_the_same_through_a_words_matches_or_the_newest_messages(engine, tmp_path, monkeypatch):
    """Postgres searches a rare word through its matches and a common one by walking the newest
    texts: both give the same pages."""
    rs = [rollout(f"s{i}", step=i, messages=[{"role": "user", "content": f"quokka number {i}"},
                                             {"role": "assistant", "content": "quokka" if i % 2 else "nothing"}])
          for i in range(7)]
    ingest(engine, write_jsonl(tmp_path / "s.jsonl", rs))
    query = search_query.parse("quokka", run="r1")

    def pages():
        out, after = [], None
        with Session(engine) as s:
            while True:
                res = search_q.search(session=s, query=query, limit=3, after=after)
                out.append([(g.rollout_id, [(m["node_idx"], m["snippet"]) for m in g.matches]) for g in res.rollouts])
                after = res.next
                if after is None:
                    return out, res.facets

    rare = pages()
    monkeypatch.setattr(search_q, "RARE_MATCHES", 1)
    assert pages() == rare and sum(len(g[1]) for p in rare[0] for g in p) == 10
    assert [n for _, n in rare[1]["step"]] == [1] * 7


def test_a_download_suffix_a_page_lacks_is_a_404_not_a_bad_parameter(client, demo_run):
    for url in (f"/runs/{demo_run}/steps/3.csv", f"/runs/{demo_run}/steps/3.txt",
                f"/runs/{demo_run}/charts/reward.txt"):
        r = client.get(url)
        assert r.status_code == 404, url
        err = r.json()["error"]
        assert err["code"] == "not_found" and err["field"] is None and "download" in err["message"], url
    assert client.get(f"/runs/{demo_run}/steps/3.json").status_code == 200
    assert client.get(f"/runs/{demo_run}/steps/x.json").status_code == 422  # a bad step is still one
