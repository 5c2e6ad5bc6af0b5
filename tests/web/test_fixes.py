"""Web-side fixes from QA, each through the real HTTP app on SQLite and Postgres: empty and
out-of-range query values, ids with slashes, NUL, huge rewards, labelled means, group warnings,
quarantine paging, node links, token marks and the error page."""
from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from sqlmodel import Session

from app.db.models import Quarantine
from tests.conftest import data_path
from tests.helpers import ingest, rollout, write_jsonl


def _case(engine, name: str, run: str = "cases"):
    assert ingest(engine, data_path("cases", name), run=run).ok


def _article(html: str, idx: int) -> str:
    """The HTML of one message article."""
    start = html.index(f'id="node-{idx}"')
    end = html.find("</article>", start)
    return html[start:end]


# --- 1. empty filter fields -------------------------------------------------------------------

def test_empty_query_values_mean_no_filter(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [
        rollout("ok", step=1), rollout("bad", step=2, ending="error", reward=0.0)]))
    empty = "step=&ending=error&group=&task=&reward_min=&reward_max=&flag=&after=&limit="
    page = client.get(f"/runs/r1/rollouts?{empty}")
    assert page.status_code == 200 and "bad" in page.text
    d = client.get(f"/runs/r1/rollouts.json?{empty}").json()
    assert [r["rollout_id"] for r in d["rollouts"]] == ["bad"]
    assert d["filters"] == {"ending": "error"}
    assert len(client.get("/runs/r1/rollouts.json?ending=&step=").json()["rollouts"]) == 2
    assert client.get("/runs/r1/rollouts/ok.json?branch=&offset=&attempt=").status_code == 200
    for bad in ["step=abc", "reward_min=x", "reward_max=nan", "limit=ten", "step=1.5"]:
        r = client.get(f"/runs/r1/rollouts.json?{bad}")
        assert r.status_code == 422, bad
        assert isinstance(r.json()["detail"], list) and r.json()["detail"][0]["loc"][0] == "query"


# --- 2. run ids with slashes ------------------------------------------------------------------

def _walk(client, url: str) -> None:
    """A page and its JSON twin both answer 200, the twin found through the page's own link."""
    page = client.get(url)
    assert page.status_code == 200, url
    alt = re.search(r'rel="alternate" type="application/json" href="([^"]+)"', page.text).group(1)
    twin = client.get(alt.replace("&amp;", "&"))
    assert twin.status_code == 200 and twin.headers["content-type"] == "application/json", alt


def test_run_group_and_rollout_ids_with_slashes(client, engine, tmp_path):
    run = "team/exp-12"
    # ids chosen to collide with the routes' own words if slashes were taken literally
    rs = [rollout("a/b", run=run, group="g/1", index=0, step=3),
          rollout("x/rollouts/y", run=run, group="g/rollouts", index=0, step=3),
          rollout("plain", run="team", group="g", index=0, step=1),
          rollout("r", run="odd/rollouts", step=0)]
    ingest(engine, write_jsonl(tmp_path / "s.jsonl", rs))
    runs = {r["id"]: r for r in client.get("/runs.json").json()["runs"]}
    assert runs[run]["url"] == "/runs/team%2Fexp-12"
    assert client.get("/runs/a%2Fb").status_code == 404  # no such run, but routed, not a 500
    d = client.get(runs[run]["url"] + ".json").json()
    assert d["run"]["id"] == run and d["totals"]["rollouts"] == 2
    _walk(client, runs[run]["url"])
    _walk(client, d["run"]["rollouts_url"])
    _walk(client, d["steps"][0]["url"])
    chart = client.get(d["charts"]["ending_rates"]["data"][0]["customdata"][0].replace("/rollouts?", "/rollouts.json?"))
    assert [r["rollout_id"] for r in chart.json()["rollouts"]] == ["a/b", "x/rollouts/y"]
    listing = client.get(d["run"]["rollouts_url"] + ".json").json()
    assert {r["rollout_id"] for r in listing["rollouts"]} == {"a/b", "x/rollouts/y"}
    for row in listing["rollouts"]:
        _walk(client, row["url"])
        _walk(client, row["group_url"])
        detail = client.get(row["url"] + ".json").json()
        assert detail["rollout"]["rollout_id"] == row["rollout_id"] and detail["run"]["id"] == run
        text = client.get(detail["messages"][1]["content_url"])
        assert text.status_code == 200 and text.text == "4"
        group = client.get(row["group_url"] + ".json").json()
        assert [m["rollout_id"] for m in group["members"]] == [row["rollout_id"]]
    # the run named "team" is still its own run, and "odd/rollouts" is a run, not a listing
    assert client.get("/runs/team.json").json()["totals"]["rollouts"] == 1
    assert client.get("/runs/team/rollouts.json").json()["rollouts"][0]["rollout_id"] == "plain"
    assert client.get("/runs/odd%2Frollouts.json").json()["run"]["id"] == "odd/rollouts"
    assert client.get("/runs/odd%2Frollouts/rollouts/r.json").json()["rollout"]["run_id"] == "odd/rollouts"
    # ids typed with bare slashes keep working, and so do escapes of `%`
    assert client.get("/runs/team/exp-12/rollouts/a/b.json").json()["rollout"]["rollout_id"] == "a/b"
    assert client.get("/runs/team/exp-12/groups/g/1.json").status_code == 200
    assert client.get("/runs/team%2Fexp-12/rollouts/a%2Fb").status_code == 200


def test_percent_in_ids_survives(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "p.jsonl", [rollout("100%2F done", run="r%25", group="g%")]))
    row = client.get("/runs.json").json()["runs"][0]
    assert row["id"] == "r%25"
    rows = client.get(row["url"] + "/rollouts.json").json()["rollouts"]
    assert rows[0]["rollout_id"] == "100%2F done"
    assert client.get(rows[0]["url"] + ".json").json()["rollout"]["rollout_id"] == "100%2F done"
    assert client.get(rows[0]["group_url"] + ".json").json()["group"]["id"] == "g%"


# --- 3. out-of-range values and NUL ---------------------------------------------------------------

@pytest.mark.parametrize("url", [
    "/runs/r1/rollouts?step=99999999999999999999999",
    "/runs/r1/rollouts?step=9999999999",
    "/runs/r1/rollouts?step=-9999999999",
    "/runs/r1/rollouts?after=99999999999999999999999:1",
    "/runs/r1/rollouts?after=1:99999999999",
    "/runs/r1/rollouts?reward_min=1e400",
    "/runs/r1/rollouts/x?attempt=99999999999",
    "/runs/r1/rollouts/x?branch=99999999999",
    "/runs/r1/rollouts/x?offset=99999999999",
    "/runs/r1/nodes/99999999999999999999/0.txt",
    "/runs/r1/nodes/1/99999999999999999999.txt",
    "/quarantine?before=99999999999",
])
def test_out_of_range_query_values_are_422(client, engine, tmp_path, url):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("x")]))
    assert client.get(url).status_code == 422


@pytest.mark.parametrize("url", [
    "/runs/r%001", "/runs/r1%00.json", "/runs/r1/rollouts/x%00", "/runs/r1/groups/g%00",
    "/runs/r1/rollouts?group=a%00b", "/runs/r1/rollouts?task=%00", "/runs/r1/rollouts?flag=x%00",
    "/runs/r1/rollouts?ending=%00", "/runs/r1/rollouts?after=%00", "/quarantine?file=a%00",
    "/runs/r1/rollouts/x?tokens=%00", "/runs/r1/nodes/1/0.txt?x=%00",
])
def test_nul_in_path_or_query_is_400(client, engine, tmp_path, url):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("x", group="g")]))
    r = client.get(url)
    assert r.status_code == 400, url
    assert "Content-Security-Policy" in r.headers
    assert client.get(url, headers={"Accept": "application/json"}).json() == {"detail": "NUL character in the URL"}


# --- 4. huge finite rewards -------------------------------------------------------------------------

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


# --- 5. the runs list shows the run page's two means --------------------------------------------------

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
    assert "mean reward (errors dropped)" in html and "0.500" in html and "0.667" in html
    run_html = client.get("/runs/r1").text
    assert "mean reward (errors scored 0)" in run_html and "mean reward (errors dropped)" in run_html
    assert "0.500" in run_html and "0.667" in run_html


# --- 6. groups larger than declared ----------------------------------------------------------------

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
    assert "declared size 3 but 9 members; duplicate indices #0 ×3, #1 ×3, #2 ×3" in client.get("/runs/r1/groups/g").text
    ok = [rollout(f"k{i}", group="h", index=i) for i in range(2)]
    for r in ok:
        r.group.size = 2
    ingest(engine, write_jsonl(tmp_path / "h.jsonl", ok))
    assert client.get("/runs/r1/groups/h.json").json()["warnings"] == []
    assert "notice" not in client.get("/runs/r1/groups/h").text


# --- 7. quarantine ----------------------------------------------------------------------------------

def test_quarantine_counts_pages_filters_and_whole_file_records(client, engine):
    with Session(engine) as s:
        for i in range(5):
            s.add(Quarantine(source_file="a.jsonl", line=i + 1, field="reward", error=f"bad {i}", raw="{}",
                             raw_sha256=f"{i:064d}"))
        s.add(Quarantine(source_file="b.bin", line=None, field=None, error="not a trace file", raw=None,
                         raw_sha256="f" * 64))
        s.commit()
    d = client.get("/quarantine.json?limit=2").json()
    assert d["total"] == 6
    assert [r["file"] for r in d["records"]] == ["b.bin", "a.jsonl"]  # newest first
    seen = []
    url = "/quarantine.json?limit=2"
    while url:
        page = client.get(url).json()
        seen += [r["error"] for r in page["records"]]
        url = page["next_url"]
        assert url is None or (url.startswith("/quarantine.json?") and "limit=2" in url)
    assert seen == ["not a trace file", "bad 4", "bad 3", "bad 2", "bad 1", "bad 0"]
    f = client.get("/quarantine.json?file=a.jsonl").json()
    assert f["total"] == 6 and f["matching"] == 5 and {r["file"] for r in f["records"]} == {"a.jsonl"}
    html = client.get("/quarantine").text
    assert "6 records rejected" in html and "whole file" in html
    assert 'href="/quarantine?file=b.bin"' in html
    assert "older records" in client.get("/quarantine?limit=3").text
    assert "5 from" in client.get("/quarantine?file=a.jsonl&before=").text


# --- 8. node text belongs to its run ------------------------------------------------------------------

def test_node_text_only_under_its_own_run(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("x", run="r1"), rollout("y", run="r2")]))
    url = client.get("/runs/r1/rollouts/x.json").json()["messages"][0]["content_url"]
    assert client.get(url).text == "What is 2+2?"
    assert client.get(url.replace("/runs/r1/", "/runs/r2/")).status_code == 404
    assert client.get(url.replace("/runs/r1/", "/runs/nope/")).status_code == 404


# --- 9. next links keep their face and limit ------------------------------------------------------------

def test_rollouts_next_url_keeps_json_and_limit(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout(f"x{i}", step=i) for i in range(5)]))
    d = client.get("/runs/r1/rollouts.json?limit=2&ending=submitted").json()
    assert d["next_url"].startswith("/runs/r1/rollouts.json?") and "limit=2" in d["next_url"]
    assert "ending=submitted" in d["next_url"]
    seen = [r["rollout_id"] for r in d["rollouts"]]
    url = d["next_url"]
    while url:
        page = client.get(url)
        assert page.headers["content-type"] == "application/json"
        seen += [r["rollout_id"] for r in page.json()["rollouts"]]
        url = page.json()["next_url"]
    assert seen == [f"x{i}" for i in range(5)]
    html = client.get("/runs/r1/rollouts?limit=2").text
    assert re.search(r'href="/runs/r1/rollouts\?limit=2&amp;after=[^"]+"', html)
    assert "limit=" not in (client.get("/runs/r1/rollouts.json").json()["next_url"] or "")


# --- 10. validation errors: HTML for browsers, JSON for clients --------------------------------------------

def test_validation_errors_render_for_the_client(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("x")]))
    page = client.get("/runs/r1/rollouts?step=abc", headers={"Accept": "text/html"})
    assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
    assert "step: Input should be a valid integer" in page.text
    assert 'href=""' not in page.text and "application/json" not in page.text
    assert client.get("/runs/r1/rollouts.json?step=abc").json()["detail"][0]["loc"] == ["query", "step"]
    assert client.get("/runs/r1/rollouts?step=abc", headers={"Accept": "application/json"}).status_code == 422
    missing = client.get("/runs/nope")
    assert missing.status_code == 404 and 'href=""' not in missing.text
    assert client.get("/no/such/page").headers["content-type"].startswith("text/html")


# --- 11. node links reach other branches and pages ---------------------------------------------------------

def test_node_links_point_at_the_branch_and_page_holding_the_node(client, engine, tmp_path):
    _case(engine, "01-token-drift-retokenization.json")
    d = client.get("/runs/cases/rollouts/case01.json").json()  # branch 0; the drift is on branch 1
    drift = next(f for f in d["findings"] if f["kind"] == "token_drift")
    # the link goes to the drifting token itself (issue 9: a link to the position)
    assert drift["url"] == "/runs/cases/rollouts/case01?branch=1&offset=0#node-2-t3"
    html = client.get("/runs/cases/rollouts/case01").text
    assert 'href="/runs/cases/rollouts/case01?branch=1&amp;offset=0#node-2-t3"' in html
    assert client.get("/runs/cases/rollouts/case01.json?branch=1").json()["findings"][0]["url"] == "#node-2-t3"

    msgs = []
    for i in range(60):
        msgs.append({"role": "user", "content": f"q{i}"} if i % 2 == 0 else
                    {"role": "assistant", "content": "" if i == 55 else f"a{i}"})
    ingest(engine, write_jsonl(tmp_path / "long.jsonl", [
        rollout("long", run="r1", messages=msgs, calls=[{"node": 1, "model": "m"}, {"node": 55, "model": "m"}])]))
    d = client.get("/runs/r1/rollouts/long.json").json()
    empty = next(f for f in d["findings"] if f["kind"] == "empty_response")
    assert empty["url"] == "/runs/r1/rollouts/long?branch=0&offset=50#node-55"
    assert [c["node_url"] for c in d["calls"]] == ["#node-1", "/runs/r1/rollouts/long?branch=0&offset=50#node-55"]
    html = client.get("/runs/r1/rollouts/long").text
    assert 'href="/runs/r1/rollouts/long?branch=0&amp;offset=50#node-55"' in html
    assert 'href="#node-1"' in html
    later = client.get("/runs/r1/rollouts/long.json?offset=50").json()
    assert next(f for f in later["findings"] if f["kind"] == "empty_response")["url"] == "#node-55"
    assert later["calls"][0]["node_url"] == "/runs/r1/rollouts/long?branch=0&offset=0#node-1"


# --- 12. runs without training steps ------------------------------------------------------------------------

def test_run_without_steps_hides_charts(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("x", step=None), rollout("y", step=None)]))
    d = client.get("/runs/r1.json").json()
    assert d["charts"] is None and d["steps_recorded"] is False
    assert [s["step"] for s in d["steps"]] == [None] and d["steps"][0]["rollouts"] == 2
    html = client.get("/runs/r1").text
    assert "figure" not in html and "fig-endings" not in html
    assert "No training steps recorded: ingest with <code>--step</code> or include <code>step</code>" in html
    assert '<a href="/runs/r1/rollouts">–</a>' in html
    ingest(engine, write_jsonl(tmp_path / "b.jsonl", [rollout("z", run="r2", step=4)]))
    assert client.get("/runs/r2.json").json()["charts"] is not None
    assert "fig-endings" in client.get("/runs/r2").text


# --- 13. the token legend -------------------------------------------------------------------------------------

def test_token_legend_only_when_it_explains_something(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("none", tokens=False), rollout("ids")]))
    assert 'class="legend"' not in client.get("/runs/r1/rollouts/none").text
    html = client.get("/runs/r1/rollouts/ids").text
    assert 'class="legend"' in html and "no tokenizer stored" in html
    assert html.count("tok-id") >= 6  # every bare id is set apart
    _case(engine, "08-utf8-split-across-tokens.json")  # token text from source-recorded bytes
    html = client.get("/runs/cases/rollouts/08-utf8-split-across-tokens%23variant_a").text
    assert 'class="legend"' in html and "no tokenizer stored" not in html and "tok-id" not in html


# --- 14. one badge for lost bytes -------------------------------------------------------------------------------

def test_bytes_lost_upstream_is_one_badge(client, engine):
    _case(engine, "08-utf8-split-across-tokens.json")
    html = client.get("/runs/cases/rollouts/08-utf8-split-across-tokens%23variant_b").text
    header = _article(html, 0).split("</header>")[0]
    assert header.count('class="flag') == 1
    assert header.count("bytes lost upstream") == 1 and ">bytes_lost_upstream<" not in header


# --- 15. suspected padding at token level -----------------------------------------------------------------------

def test_suspected_padding_marks_its_tokens(client, engine):
    _case(engine, "04-logprobs-length-mismatch.json")
    d = client.get("/runs/cases/rollouts/case04b.json").json()
    toks = [t for m in d["messages"] for t in m["tokens"]]
    assert [t["suspect"] for t in toks] == [False] * 4 + [True] * 2
    html = client.get("/runs/cases/rollouts/case04b").text
    assert html.count("tok-suspect") == 2 and "suspected padding" in html
    assert "tok-suspect" not in client.get("/runs/cases/rollouts/case04a").text


# --- 16. every call sharing a duplicated id ----------------------------------------------------------------------

def test_duplicate_tool_call_id_lists_every_call(client, engine):
    _case(engine, "05-duplicate-tool-call-ids.json")
    d = client.get("/runs/cases/rollouts/case05.json").json()
    dup = {f["detail"]["id"]: f["calls"] for f in d["findings"] if f["kind"] == "duplicate_tool_call_id"}
    assert [(c["node"], c["position"]) for c in dup["call_X"]] == [(1, 0), (3, 0)]
    assert [(c["node"], c["position"]) for c in dup["call_Y"]] == [(5, 0), (5, 1)]
    findings = client.get("/runs/cases/rollouts/case05").text.split('class="findings"')[1].split("</section>")[0]
    for text in ['href="#node-1">#1 call 0</a>', 'href="#node-3">#3 call 0</a>',
                 'href="#node-5">#5 call 0</a>', 'href="#node-5">#5 call 1</a>']:
        assert text in findings


# --- 17. why an advantage is missing ----------------------------------------------------------------------------

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


# --- 18. the finding filter is a select ----------------------------------------------------------------------------

def test_finding_filter_is_a_select_of_known_kinds(client, engine):
    _case(engine, "05-duplicate-tool-call-ids.json")
    html = client.get("/runs/cases/rollouts").text
    select = html.split('<select name="flag">')[1].split("</select>")[0]
    for kind in ["array_len_mismatch", "suspected_logprob_padding", "token_drift", "duplicate_tool_call_id",
                 "unanswered_tool_call", "empty_response", "non_finite_reward", "bytes_lost_upstream"]:
        assert f'<option value="{kind}"' in select
    assert 'name="flag" value' not in html
    picked = client.get("/runs/cases/rollouts?flag=duplicate_tool_call_id").text
    assert '<option value="duplicate_tool_call_id" selected>' in picked and "case05" in picked
    odd = client.get("/runs/cases/rollouts?flag=" + quote("custom<kind>"))
    assert odd.status_code == 200 and '<option value="custom&lt;kind&gt;" selected>' in odd.text
    assert client.get("/runs/cases/rollouts.json?flag=dup%25").json()["rollouts"] == []  # % is not a wildcard
