"""Pages (issue 23), through the real app on SQLite: the header's navigation, times and numbers
as a person reads them, unknown query parameters on pages (ignored) and in the API (refused),
404s that name what is missing, the collapsed "could not decide" line, static files (versioned,
cached, gzip), the twin of a huge rollout kept small, links for training logs, the thin-baseline
note and one trained-token count (the list's twin and CSV carry it as `gradient_tokens`), compare and
attempt 404s, `rollout_url(run, id)` and a ROLLSCOPE_URL that is no URL, long names and paths in
clipped cells."""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers import ingest, rollout, write_jsonl

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # lean: the pages are dialect-free

AWKWARD = [0.8406250000000001, 0.1 + 0.2, -2.0000000000000004, 1 / 3]
PAGES = ["/runs", "/runs/r1", "/runs/r1/rollouts", "/runs/r1/rollouts/g0", "/runs/r1/groups/G", "/runs/r1/steps/1",
         "/runs/r1/groups/T", "/search?q=2", "/ingest", "/quarantine", "/runs/r1/task-changes?a=1&b=1"]


@pytest.fixture
def run_r1(engine, tmp_path):
    """Group G: four awkward rewards and one error; group T: one scored member, three errors
    (its errors-dropped baseline rests on 1 of 4); `text`: a conversation without tokens."""
    rs = [rollout(f"g{i}", group="G", index=i, reward=r, step=1) for i, r in enumerate(AWKWARD)]
    rs.append(rollout("err", group="G", index=4, reward=None, ending="error", step=1))
    rs += [rollout(f"t{i}", group="T", index=i, reward=0.5 if i == 0 else None,
                   ending="submitted" if i == 0 else "error", step=1) for i in range(4)]
    rs.append(rollout("text", tokens=False, step=1))
    assert ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs)).ok


@SQLITE
def test_every_page_has_the_nav_and_prints_times_and_numbers_for_a_person(client, run_r1):
    for url in [*PAGES, "/api/docs", "/runs/nope"]:
        html = client.get(url).text
        nav = re.search(r'<nav class="site"[^>]*>(.*?)</nav>', html, re.S)
        assert nav, url
        assert [a for a in re.findall(r'href="([^"]+)"', nav.group(1))] == \
            ["/runs", "/search", "/ingest", "/quarantine", "/api/docs"], url
        assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d", html), url  # no raw ISO with microseconds
        for raw in ("0.8406250000000001", "0.30000000000000004", "-2.0000000000000004", "0.3333333333"):
            assert raw not in html, (url, raw)
    group = client.get("/runs/r1/groups/G").text
    assert "reward</span> 0.8406</div>" in group and "reward</span> -2</div>" in group
    assert "reward</span> 0.3333</div>" in group and "Dr.GRPO +0.9458" in group  # advantages signed
    meta = client.get("/runs/r1").text
    stamp = re.search(r'<time datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)" title="([^"]+ UTC)">([^<]+)</time>', meta)
    assert stamp and (stamp.group(3) == "just now" or stamp.group(3).endswith(" s ago")), stamp
    step = client.get("/runs/r1/steps/1").text
    assert re.search(r'<td class="n">\d{1,3}\.\d%</td>', step)  # shares to 0.1 %


def test_filters_read_times_and_numbers_as_documented():
    from app.render import ago, percent, relative_time, significant

    now = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    assert relative_time(now - timedelta(minutes=3, seconds=20), now) == "3 min ago"
    assert relative_time((now - timedelta(hours=5)).isoformat(), now) == "5 h ago"
    assert relative_time("2026-12-04T11:59:58.123456Z", now) == "just now"
    assert relative_time(now - timedelta(days=90), now) == "2026-09-05"
    assert relative_time(now + timedelta(minutes=2), now) == "in 2 min"
    tag = str(ago("2026-12-04T11:57:00.654321Z"))
    assert 'datetime="2026-12-04T11:57:00Z" title="2026-12-04 11:57:00 UTC"' in tag and ".654321" not in tag
    assert [significant(x) for x in (*AWKWARD, 12345.6, 1e308, 0.0, -0.0)] == \
        ["0.8406", "0.3", "-2", "0.3333", "12,346", "1e+308", "0", "0"]
    assert significant(0.5, sign=True) == "+0.5" and significant(None) == ""
    assert percent(0.8406) == "84.1%" and percent(None) == "–"


@SQLITE
def test_pages_ignore_unknown_parameters_the_api_refuses_them(client, run_r1):
    for url in ("/runs?utm_source=x", "/runs/r1?utm_source=x&utm_medium=y", "/runs/r1/rollouts?utm_source=x",
                "/runs/r1/rollouts/g0?utm_source=x", "/runs/r1/groups/G?utm_source=x", "/runs/r1/steps/1?fbclid=1",
                "/runs/r1/rollouts.json?utm_source=x", "/runs/r1/rollouts.csv?utm_source=x"):
        assert client.get(url).status_code == 200, url
    r = client.get("/api/v1/runs/r1/rollouts?utm_source=x")
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_parameter"


NOT_FOUND = [("/runs/nope", "no run 'nope'", "/runs"), ("/runs/nope/rollouts/x", "no run 'nope'", "/runs"),
             ("/runs/r1/rollouts/x", "no rollout 'x' in run 'r1'", "/runs/r1"),
             ("/runs/r1/groups/zz", "no group 'zz' in run 'r1'", "/runs/r1"),
             ("/runs/r1/steps/5", "no step 5 in run 'r1'", "/runs/r1"),
             ("/runs/nope/rollouts", "no run 'nope'", "/runs")]


@SQLITE
def test_404s_name_what_is_missing_and_link_back(client, run_r1):
    for url, message, back in NOT_FOUND:
        page = client.get(url)
        assert page.status_code == 404 and "text/html" in page.headers["content-type"], url
        assert message.replace("'", "&#39;") in page.text and f'<a class="back" href="{back}">' in page.text, url
        twin = client.get(url, headers={"Accept": "application/json"})
        assert twin.status_code == 404 and twin.json()["error"]["message"] == message, url
        if "/rollouts/" in url or "/groups/" in url:
            assert client.get(url + ".json").json()["error"]["message"] == message, url


@SQLITE
def test_checks_that_could_not_decide_are_one_line(client, run_r1):
    html = client.get("/runs/r1/rollouts/text").text
    block = re.search(r'<details class="sub checks-skipped">\s*<summary>(.*?)</summary>', html, re.S)
    assert block, html[:500]
    summary = " ".join(block.group(1).split())
    assert re.match(r"\d+ checks could not decide: ", summary), summary
    assert "Not decided for this rollout" not in html


@SQLITE
def test_static_files_are_versioned_cached_and_compressed(client):
    html = client.get("/runs").text
    css = re.search(r'href="(/static/app\.css\?v=[0-9a-f]{10})"', html).group(1)
    assert re.search(r'src="/static/app\.js\?v=[0-9a-f]{10}"', html)
    r = client.get(css, headers={"Accept-Encoding": "gzip"})
    assert r.headers["content-encoding"] == "gzip" and r.headers["cache-control"] == \
        "public, max-age=31536000, immutable" and r.headers["vary"] == "Accept-Encoding"
    assert client.get("/static/app.css").headers["cache-control"] == "no-cache"  # not versioned: revalidate
    plotly = "/static/vendor/plotly-2.35.2.min.js"
    plain = client.get(plotly, headers={"Accept-Encoding": "identity"})
    gz = client.get(plotly, headers={"Accept-Encoding": "gzip, deflate, br"})
    assert "content-encoding" not in plain.headers and int(plain.headers["content-length"]) > 4_000_000
    assert gz.headers["content-encoding"] == "gzip" and int(gz.headers["content-length"]) < 1_600_000
    assert gz.content == plain.content  # httpx decodes: the same file
    assert gz.headers["cache-control"].endswith("immutable")
    ranged = client.get(plotly, headers={"Accept-Encoding": "gzip", "Range": "bytes=0-9"})
    assert ranged.status_code == 206 and "content-encoding" not in ranged.headers


@SQLITE
def test_the_twin_of_a_200k_token_rollout_leaves_its_arrays_to_the_token_api(client, engine, tmp_path):
    from app.views.rollout import TWIN_TOKEN_BUDGET
    from ingest.schema import Rollout

    n = 200_000  # its twin was 107.5 MB
    nodes = [{"parent": None, "sampled": False, "message": {"role": "user", "content": "go"},
              "token_ids": [1, 2], "mask": [False, False]},
             {"parent": 0, "sampled": True, "message": {"role": "assistant", "content": "x" * 100},
              "token_ids": [i % 30000 for i in range(n)], "mask": [True] * n, "logprobs": [-0.25] * n}]
    small = rollout("small", run="big")
    huge = Rollout.model_validate({"schema": "rollscope/1", "id": "huge", "run": {"id": "big"}, "step": 1,
                                   "reward": 1.0, "ending": {"type": "submitted"}, "nodes": nodes})
    assert ingest(engine, write_jsonl(tmp_path / "in.jsonl", [huge, small])).ok
    twin = client.get("/runs/big/rollouts/huge.json")
    assert twin.status_code == 200 and len(twin.content) < 1_000_000, len(twin.content)
    d = twin.json()
    omitted = d["tokens_omitted"]
    assert omitted["tokens"] == n + 2 and omitted["budget"] == TWIN_TOKEN_BUDGET and "left out" in omitted["note"]
    assert omitted["tokens_url"] == "/api/v1/runs/big/rollouts/huge/branches/0/tokens"
    assert all(m["token_ids"] is None and m["logprobs"] is None for m in d["messages"])
    npz = client.get(omitted["tokens_url"], headers={"Accept": "application/x-ndarray"})
    assert npz.status_code == 200 and len(npz.content) > n * 4
    full = client.get("/runs/big/rollouts/small.json").json()  # under the budget: every array, as before
    assert full["tokens_omitted"] is None and full["messages"][1]["token_ids"] == [110, 111, 112]


@SQLITE
def test_links_for_training_logs_use_rollscope_url_and_the_page_anchors(client, run_r1, monkeypatch):
    from typer.testing import CliRunner

    from app.cli import app as cli
    from rollscope.client import rollout_url

    monkeypatch.setenv("ROLLSCOPE_URL", "https://rs.example/")
    assert rollout_url(None, "r1", "g0", node=1) == "https://rs.example/runs/r1/rollouts/g0#m-1"
    assert rollout_url(None, "r1", "g0", at=4) == "https://rs.example/runs/r1/rollouts/g0#t-4"
    out = CliRunner().invoke(cli, ["link", "r1", "g0", "--at", "4"])
    assert out.exit_code == 0 and out.stdout.strip() == "https://rs.example/runs/r1/rollouts/g0#t-4"
    html = client.get("/runs/r1/rollouts/g0").text
    assert 'id="m-1"' in html and 'id="t-4"' in html  # the anchors the links name are on the page


@SQLITE
def test_thin_baseline_is_noted_and_the_trained_count_is_one_definition(client, run_r1):
    thin = client.get("/runs/r1/groups/T")
    assert "thin-baseline-note" in thin.text and "(baseline of 1 of 4)" in thin.text
    assert client.get("/runs/r1/groups/T.json").json()["thin_baseline"]["n"] == 1
    assert "thin-baseline" not in client.get("/runs/r1/groups/G").text  # 4 of 5 members
    # an errored rollout's mask-1 tokens carry no gradient: the list and the page both say 0 trained
    row = re.search(r'<tr>\s*<td><a href="/runs/r1/rollouts/err\?.*?</tr>', client.get("/runs/r1/rollouts").text, re.S)
    assert '<td class="n opt" title="3 with mask 1; no gradient (error_dropped)">0</td>' in row.group(0)
    page = client.get("/runs/r1/rollouts/err")
    assert '<span class="trained-count">0 trained</span>' in page.text
    d = client.get("/runs/r1/rollouts/err.json").json()
    assert d["n_gradient_tokens"] == 0 and d["no_gradient_reason"] == "error_dropped"
    assert client.get("/runs/r1/rollouts/g0.json").json()["n_gradient_tokens"] == 3


@SQLITE
def test_404s_of_compare_and_attempts_name_what_is_missing(client, run_r1, engine, tmp_path):
    assert ingest(engine, write_jsonl(tmp_path / "b.jsonl", [rollout("x", run="r2")])).ok
    for url in ("/compare?runs=r1,nope", "/compare.json?runs=r1,nope", "/compare?runs=nope,r1,r2",
                "/compare/charts/reward.csv?runs=r1,nope", "/compare/charts/reward.json?runs=r1,nope"):
        r = client.get(url, headers={"Accept": "application/json"})
        assert r.status_code == 404 and r.json()["error"]["message"] == "no run 'nope'", (url, r.text)
        assert r.json()["error"]["field"] == "runs", url
    page = client.get("/compare?runs=r1,nope")
    assert page.status_code == 404 and "no run &#39;nope&#39;" in page.text
    assert client.get("/compare?runs=r1,r2").status_code == 200
    message = "no attempt 9 of rollout 'g0' in run 'r1'"
    for url in ("/runs/r1/rollouts/g0?attempt=9", "/runs/r1/rollouts/g0.json?attempt=9"):
        r = client.get(url, headers={"Accept": "application/json"})
        assert r.status_code == 404 and r.json()["error"]["message"] == message, (url, r.text)
    assert message.replace("'", "&#39;") in client.get("/runs/r1/rollouts/g0?attempt=9").text
    assert client.get("/runs/r1/rollouts/g0?attempt=0").status_code == 200
    r = client.get("/runs/r1/rollouts/zz?attempt=9", headers={"Accept": "application/json"})
    assert r.json()["error"]["message"] == "no rollout 'zz' in run 'r1'"  # no such rollout at all


@SQLITE
def test_the_lists_twin_and_csv_carry_the_trained_count_the_column_shows(client, run_r1):
    import csv
    import io

    rows = {r["rollout_id"]: r for r in client.get("/runs/r1/rollouts.json?limit=100").json()["rollouts"]}
    assert (rows["err"]["n_trained_tokens"], rows["err"]["gradient_tokens"]) == (3, 0)  # errored: 0 trained
    assert (rows["g0"]["n_trained_tokens"], rows["g0"]["gradient_tokens"]) == (3, 3)
    html = client.get("/runs/r1/rollouts").text
    for rid, r in rows.items():
        row = re.search(rf'<tr>\s*<td><a href="/runs/r1/rollouts/{rid}\?.*?</tr>', html, re.S).group(0)
        assert re.search(rf'<td class="n opt"[^>]*>{r["gradient_tokens"]}</td>', row), rid  # the column's number
    got = {r["rollout_id"]: r for r in csv.DictReader(io.StringIO(client.get("/runs/r1/rollouts.csv").text))}
    assert (got["err"]["n_trained_tokens"], got["err"]["gradient_tokens"]) == ("3", "0")


def test_rollout_url_takes_run_and_id_and_link_refuses_a_rollscope_url_that_is_no_url(monkeypatch):
    from typer.testing import CliRunner

    from app.cli import app as cli
    from rollscope.client import rollout_url

    monkeypatch.setenv("ROLLSCOPE_URL", "https://rs.example/")
    assert rollout_url("r1", "g0", node=1) == "https://rs.example/runs/r1/rollouts/g0#m-1"
    assert rollout_url(None, "r1", "g0", node=1) == "https://rs.example/runs/r1/rollouts/g0#m-1"  # as before
    assert rollout_url("http://h:1", "r1", "g0") == "http://h:1/runs/r1/rollouts/g0"
    assert rollout_url("r1", "g0", base="http://h:1/") == "http://h:1/runs/r1/rollouts/g0"
    for bad in ("notaurl", "ftp://x/", "http://"):
        monkeypatch.setenv("ROLLSCOPE_URL", bad)
        out = CliRunner().invoke(cli, ["link", "demo-grpo", "s0"])
        assert out.exit_code == 2 and out.stdout == "", (bad, out.output)
        assert "ROLLSCOPE_URL" in out.stderr and "not an http(s) URL" in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
        with pytest.raises(ValueError, match="ROLLSCOPE_URL"):
            rollout_url("r1", "g0")
    out = CliRunner().invoke(cli, ["link", "r1", "g0", "--base", "notaurl"])
    assert out.exit_code == 2 and "--base" in out.stderr


@SQLITE
def test_long_names_and_paths_are_clipped_cells(client, engine, tmp_path):
    from ingest.schema import Rollout

    name = "n" * 400
    named = Rollout.model_validate({**rollout("n0", run="named").to_json_dict(), "run": {"id": "named", "name": name}})
    comps = {"c" * 175: {"score": 1.0, "weight": 1.0}}
    assert ingest(engine, write_jsonl(tmp_path / "a.jsonl", [named, rollout("m0", run="named", group="G", index=0,
                                                                            reward=None, rewards=comps)])).ok
    bad = tmp_path / "cases" / "11-bad.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"schema": "rollscope/1", "id": 5}\n')
    assert not ingest(engine, bad).ok
    assert f'<div class="sub"><span class="clip" title="{name}">' in client.get("/runs").text
    assert '<th class="n"><span class="clip" title="' + "c" * 175 in client.get("/runs/named/groups/G").text
    assert '<td class="mono"><span class="clip" title="' + "c" * 175 in client.get("/runs/named/rollouts/m0").text
    assert f'<span class="clip clip-start" title="{bad}"><bdi dir="ltr">{bad}</bdi></span>' in \
        client.get("/quarantine").text
