"""URLs and query values through the real HTTP app on SQLite and Postgres: empty and out-of-range
values, NUL, ids with slashes and `%`, next links and quarantine paging, node links to other
branches and pages, the finding filter, and validation errors rendered for the client."""
from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from sqlmodel import Session

from app.db.models import Quarantine
from ingest.schema import Rollout
from tests.conftest import data_path
from tests.helpers import ingest, rollout, write_jsonl


def _case(engine, name: str, run: str = "cases"):
    assert ingest(engine, data_path("cases", name), run=run).ok


# --- empty filter fields -------------------------------------------------------------------

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
        err = r.json()["error"]
        assert (err["code"] == "invalid" and err["field"] == bad.split("=")[0]
                and err["message"].startswith(err["field"]))


# --- run ids with slashes ------------------------------------------------------------------

def _walk(client, url: str) -> None:
    """A page and its JSON twin both answer 200, the twin found through the page's own link."""
    page = client.get(url)
    assert page.status_code == 200, url
    alt = re.search(r'rel="alternate" type="application/json" href="([^"]+)"', page.text).group(1)
    twin = client.get(alt.replace("&amp;", "&"))
    assert twin.status_code == 200 and twin.headers["content-type"] == "application/json", alt


def _page(twin_url: str) -> str:
    """The page of a JSON twin's URL (`/runs/x.json?a=1` → `/runs/x?a=1`)."""
    path, sep, query = twin_url.partition("?")
    return path.removesuffix(".json") + sep + query


def test_run_group_and_rollout_ids_with_slashes(client, engine, tmp_path):
    run = "team/exp-12"
    # ids chosen to collide with the routes' own words if slashes were taken literally
    rs = [rollout("a/b", run=run, group="g/1", index=0, step=3),
          rollout("x/rollouts/y", run=run, group="g/rollouts", index=0, step=3),
          rollout("plain", run="team", group="g", index=0, step=1),
          rollout("r", run="odd/rollouts", step=0)]
    ingest(engine, write_jsonl(tmp_path / "s.jsonl", rs))
    runs = {r["id"]: r for r in client.get("/runs.json").json()["runs"]}
    assert runs[run]["url"] == "/runs/team%2Fexp-12.json"  # the twin links to twins
    assert client.get("/runs/a%2Fb").status_code == 404  # no such run, but routed, not a 500
    d = client.get(runs[run]["url"]).json()
    assert d["run"]["id"] == run and d["totals"]["rollouts"] == 2
    _walk(client, _page(runs[run]["url"]))
    _walk(client, _page(d["run"]["rollouts_url"]))
    _walk(client, _page(d["steps"][0]["url"]))
    chart = client.get(d["charts"]["ending_rates"]["data"][0]["customdata"][0].replace("/rollouts?", "/rollouts.json?"))
    assert [r["rollout_id"] for r in chart.json()["rollouts"]] == ["a/b", "x/rollouts/y"]
    listing = client.get(d["run"]["rollouts_url"]).json()
    assert {r["rollout_id"] for r in listing["rollouts"]} == {"a/b", "x/rollouts/y"}
    for row in listing["rollouts"]:
        _walk(client, _page(row["url"]))
        _walk(client, _page(row["group_url"]))
        detail = client.get(row["url"]).json()
        assert detail["rollout"]["rollout_id"] == row["rollout_id"] and detail["run"]["id"] == run
        text = client.get(detail["messages"][1]["content_url"])
        assert text.status_code == 200 and text.text == "4"
        group = client.get(row["group_url"]).json()
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
    rows = client.get(_page(row["url"]) + "/rollouts.json").json()["rollouts"]
    assert rows[0]["rollout_id"] == "100%2F done"
    assert client.get(rows[0]["url"]).json()["rollout"]["rollout_id"] == "100%2F done"
    assert client.get(rows[0]["group_url"]).json()["group"]["id"] == "g%"


# --- out-of-range values and NUL ---------------------------------------------------------------

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
    assert client.get(url, headers={"Accept": "application/json"}).json() == {
        "error": {"code": "bad_request", "message": "NUL character in the URL", "field": None}}


# --- quarantine ----------------------------------------------------------------------------------

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


# --- node text belongs to its run ------------------------------------------------------------------

def test_node_text_only_under_its_own_run(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("x", run="r1"), rollout("y", run="r2")]))
    url = client.get("/runs/r1/rollouts/x.json").json()["messages"][0]["content_url"]
    assert client.get(url).text == "What is 2+2?"
    assert client.get(url.replace("/runs/r1/", "/runs/r2/")).status_code == 404
    assert client.get(url.replace("/runs/r1/", "/runs/nope/")).status_code == 404


# --- next links keep their face and limit ------------------------------------------------------------

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


# --- validation errors: HTML for browsers, JSON for clients --------------------------------------------

def test_validation_errors_render_for_the_client(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("x")]))
    page = client.get("/runs/r1/rollouts?step=abc", headers={"Accept": "text/html"})
    assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
    assert "step: Input should be a valid integer" in page.text
    assert 'href=""' not in page.text and "application/json" not in page.text
    assert client.get("/runs/r1/rollouts.json?step=abc").json()["error"]["field"] == "step"
    assert client.get("/runs/r1/rollouts?step=abc", headers={"Accept": "application/json"}).status_code == 422
    missing = client.get("/runs/nope")
    assert missing.status_code == 404 and 'href=""' not in missing.text
    assert client.get("/no/such/page").headers["content-type"].startswith("text/html")


# --- node links reach other branches and pages ---------------------------------------------------------

def test_node_links_point_at_the_branch_and_page_holding_the_node(client, engine, tmp_path):
    _case(engine, "01-token-drift-retokenization.json")
    d = client.get("/runs/cases/rollouts/case01.json").json()  # branch 0; the drift is on branch 1
    drift = next(f for f in d["findings"] if f["kind"] == "token_drift")
    # the link goes to the drifting token itself (issue 9), in the JSON twin when JSON was asked (issue 12)
    assert drift["url"] == "/runs/cases/rollouts/case01.json?branch=1&offset=0#t-3"
    html = client.get("/runs/cases/rollouts/case01").text
    assert 'href="/runs/cases/rollouts/case01?branch=1&amp;offset=0#t-3"' in html
    assert client.get("/runs/cases/rollouts/case01.json?branch=1").json()["findings"][0]["url"] == "#t-3"

    msgs = []
    for i in range(60):
        msgs.append({"role": "user", "content": f"q{i}"} if i % 2 == 0 else
                    {"role": "assistant", "content": "" if i == 55 else f"a{i}"})
    ingest(engine, write_jsonl(tmp_path / "long.jsonl", [
        rollout("long", run="r1", messages=msgs, calls=[{"node": 1, "model": "m"}, {"node": 55, "model": "m"}])]))
    d = client.get("/runs/r1/rollouts/long.json").json()
    empty = next(f for f in d["findings"] if f["kind"] == "empty_response")
    assert empty["url"] == "/runs/r1/rollouts/long.json?branch=0&offset=50#m-55"
    assert [c["node_url"] for c in d["calls"]] == ["#m-1", "/runs/r1/rollouts/long.json?branch=0&offset=50#m-55"]
    html = client.get("/runs/r1/rollouts/long").text
    assert 'href="/runs/r1/rollouts/long?branch=0&amp;offset=50#m-55"' in html
    assert 'href="#m-1"' in html
    later = client.get("/runs/r1/rollouts/long.json?offset=50").json()
    assert next(f for f in later["findings"] if f["kind"] == "empty_response")["url"] == "#m-55"
    assert later["calls"][0]["node_url"] == "/runs/r1/rollouts/long.json?branch=0&offset=0#m-1"


# --- the finding filter is a select ----------------------------------------------------------------------------

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
    # a kind no check produces is refused (it would list nothing), escaped on the error page
    odd = client.get("/runs/cases/rollouts?flag=" + quote("custom<kind>"))
    assert odd.status_code == 422 and "custom<kind>" not in odd.text and "flag must be a finding kind" in odd.text
    err = client.get("/runs/cases/rollouts.json?flag=dup%25").json()["error"]
    assert err["field"] == "flag" and err["code"] == "invalid"


def test_out_of_range_parameters_are_422_naming_the_field(engine, client, tmp_path):
    """A branch, node, offset, token position or radius out of range is refused, on the page and
    its twin, in the one error shape; values in range still answer 200."""
    fork = Rollout.model_validate({
        "schema": "rollscope/1", "id": "fork", "run": {"id": "rng"}, "step": 1, "reward": 1.0,
        "ending": {"type": "submitted"}, "group": {"id": "g", "index": 0},
        "nodes": [
            {"parent": None, "message": {"role": "user", "content": "pick"}, "token_ids": [1, 2], "mask": [False] * 2},
            {"parent": 0, "sampled": True, "message": {"role": "assistant", "content": "A"},
             "token_ids": [3, 4, 5], "mask": [True] * 3, "logprobs": [-0.1] * 3},
            {"parent": 0, "sampled": True, "message": {"role": "assistant", "content": "B"},
             "token_ids": [3, 6], "mask": [True] * 2, "logprobs": [-0.1] * 2}]})
    other = Rollout.model_validate(dict(fork.model_dump(mode="json", by_alias=True), id="other",
                                        group={"id": "g", "index": 1}))
    assert ingest(engine, write_jsonl(tmp_path / "in.jsonl", [fork, other])).ok
    page = "/runs/rng/rollouts/fork"
    ok = ["", "?branch=1", "?offset=1", "?focus=t-4", "?focus=m-2", "?at=4&radius=2048", "?node=1&from=0&to=3",
          "?vs=1", "?branch=1&vs=0", "?tokens=all"]
    for q in ok:
        for suffix in ("", ".json"):
            assert client.get(page + suffix + q).status_code == 200, suffix + q
    bad = {"?branch=2": "branch", "?branch=99": "branch", "?offset=2": "offset", "?focus=t-5": "focus",
           "?focus=t-999999": "focus", "?focus=m-7": "focus", "?branch=1&focus=t-4": "focus",
           "?at=5": "at", "?at=5&radius=999999": "radius", "?at=0&radius=2049": "radius",
           "?node=2&from=0&to=2": "node", "?node=1&from=4": "from", "?node=1&from=2&to=1": "to",
           "?node=1&from=0&to=9": "to", "?vs=2": "vs", "?branch=5&vs=0": "branch", "?tokens=some": "tokens"}
    for q, field in bad.items():
        for suffix in ("", ".json"):
            r = client.get(page + suffix + q)
            assert r.status_code == 422, (suffix + q, r.status_code)
            if suffix:
                err = r.json()["error"]
                assert err["code"] == "invalid" and err["field"] == field, (q, err)
            else:
                assert r.headers["content-type"].startswith("text/html")
    assert "0..1" in client.get(page + ".json?branch=99").json()["error"]["message"]
    # the group page: a diff names two members of the group
    group = "/runs/rng/groups/g"
    assert client.get(group + ".json?a=fork&b=other").status_code == 200
    for q, field in {"?a=fork&b=nobody": "b", "?a=nobody&b=fork": "a", "?a=fork": "b", "?b=fork": "a",
                     "?sort=bogus": "sort"}.items():
        r = client.get(group + ".json" + q)
        assert r.status_code == 422 and r.json()["error"]["field"] == field, (q, r.status_code, r.text[:200])
    assert client.get("/runs/rng/groups/nope.json?a=x&b=y").status_code == 404
