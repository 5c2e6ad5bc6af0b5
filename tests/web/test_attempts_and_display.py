"""Web fixes, second round, through the real HTTP app on SQLite and Postgres: retry attempts are
reachable and counted once per group, huge numbers stay compact, HEAD works like GET, per-token
advantages show, counts read in the singular, step axes tick on whole steps with a legend, and
a group index beyond the declared size warns."""
from __future__ import annotations

import re

import pytest

from app.render import compact_number
from tests.helpers import ingest, rollout, write_jsonl


def _rows(html: str) -> str:
    return html.split('<tbody id="rows">')[1].split("</tbody>")[0]


# --- 1. retry attempts ----------------------------------------------------------------------------

def _retried(engine, tmp_path):
    """Group g: `a` tried twice (attempt 0 failed, attempt 1 succeeded), `b` once, `c` only as
    attempt 2 (its earlier attempts were never recorded)."""
    rs = [rollout("a", group="g", index=0, attempt=0, reward=0.0, ending="error"),
          rollout("a", group="g", index=0, attempt=1, reward=1.0),
          rollout("b", group="g", index=1, reward=0.0),
          rollout("c", group="g", index=2, attempt=2, reward=0.5)]
    for r in rs:
        r.group.size = 3
    assert ingest(engine, write_jsonl(tmp_path / "retry.jsonl", rs)).ok


def test_list_rows_link_each_attempt(client, engine, tmp_path):
    _retried(engine, tmp_path)
    rows = client.get("/runs/r1/rollouts.json").json()["rollouts"]
    urls = {(r["rollout_id"], r["attempt"]): r["url"] for r in rows}
    # the twin's links go to twins
    assert urls == {("a", 0): "/runs/r1/rollouts/a.json?attempt=0", ("a", 1): "/runs/r1/rollouts/a.json?attempt=1",
                    ("b", 0): "/runs/r1/rollouts/b.json", ("c", 2): "/runs/r1/rollouts/c.json?attempt=2"}
    assert {(r["rollout_id"], r["n_attempts"]) for r in rows} == {("a", 2), ("b", 1), ("c", 1)}
    html = _rows(client.get("/runs/r1/rollouts").text)
    for href in ["/runs/r1/rollouts/a?attempt=0", "/runs/r1/rollouts/a?attempt=1", "/runs/r1/rollouts/c?attempt=2"]:
        assert f'href="{href}&amp;list="' in html  # `list=`: the list it came from (no filters)
    # the earlier attempt is reachable from its row, and is what its page shows
    first = client.get(urls[("a", 0)]).json()
    assert first["rollout"]["attempt"] == 0 and first["ending"]["type"] == "error"
    assert client.get("/runs/r1/rollouts/a.json").json()["rollout"]["attempt"] == 1  # bare URL: the latest


def test_rollout_page_lists_every_attempt(client, engine, tmp_path):
    _retried(engine, tmp_path)
    d = client.get("/runs/r1/rollouts/a.json?attempt=0").json()
    assert [(a["attempt"], a["url"], a["current"], a["latest"]) for a in d["attempts"]] == [
        (0, "/runs/r1/rollouts/a.json?attempt=0", True, False), (1, "/runs/r1/rollouts/a.json?attempt=1", False, True)]
    assert d["rollout"]["url"] == "/runs/r1/rollouts/a.json?attempt=0"
    html = client.get("/runs/r1/rollouts/a?attempt=0").text
    nav = html.split('<nav class="attempts">')[1].split("</nav>")[0]
    assert '<a href="/runs/r1/rollouts/a?attempt=0" class="current" aria-current="page">attempt 0</a>' in nav
    assert '<a href="/runs/r1/rollouts/a?attempt=1">attempt 1</a>' in nav and "latest" in nav
    latest = client.get("/runs/r1/rollouts/a").text.split('<nav class="attempts">')[1].split("</nav>")[0]
    assert 'href="/runs/r1/rollouts/a?attempt=1" class="current"' in latest
    assert "all_tokens_url" in d and "attempt=0" in d["all_tokens_url"]  # the page's own links keep the attempt
    assert 'class="attempts"' not in client.get("/runs/r1/rollouts/b").text  # one attempt: no list
    assert [a["attempt"] for a in client.get("/runs/r1/rollouts/b.json").json()["attempts"]] == [0]


def test_group_counts_the_latest_attempt_once(client, engine, tmp_path):
    _retried(engine, tmp_path)
    d = client.get("/runs/r1/groups/g.json").json()
    assert [(m["rollout_id"], m["attempt"]) for m in d["members"]] == [("a", 1), ("b", 0), ("c", 2)]
    assert d["group"]["size"] == 3 and d["warnings"] == []  # no "4 members", no duplicate #0
    # baselines over a(1.0), b(0.0), c(0.5): the failed first attempt of a is not in them
    assert d["policies"]["errors_as_zero"]["n"] == 3 and d["policies"]["errors_dropped"]["n"] == 3
    assert d["policies"]["errors_dropped"]["mean"] == pytest.approx(0.5)
    assert d["policies"]["errors_as_zero"]["mean"] == pytest.approx(0.5)
    assert [(m["rollout_id"], m["attempt"], m["url"]) for m in d["superseded"]] == [
        ("a", 0, "/runs/r1/rollouts/a.json?attempt=0")]
    assert [m["url"] for m in d["members"]] == [
        "/runs/r1/rollouts/a.json?attempt=1", "/runs/r1/rollouts/b.json", "/runs/r1/rollouts/c.json?attempt=2"]
    html = client.get("/runs/r1/groups/g").text
    assert "3 rollouts" in html and "Superseded attempts" in html
    siblings, superseded = html.split('<div class="siblings">')[1].split("Superseded attempts")
    assert 'href="/runs/r1/rollouts/a?attempt=0"' not in siblings
    assert 'href="/runs/r1/rollouts/a?attempt=1"' in siblings
    assert 'href="/runs/r1/rollouts/a?attempt=0">a attempt 0</a>' in superseded
    assert "notice" not in html


def test_attempt_superseded_by_a_retry_in_another_group(client, engine, tmp_path):
    """The latest attempt is the rollout's latest in the run, wherever it was grouped."""
    rs = [rollout("a", group="g", index=0, attempt=0, reward=0.0), rollout("a", group="h", index=0, attempt=1),
          rollout("b", group="g", index=1, reward=1.0)]
    assert ingest(engine, write_jsonl(tmp_path / "x.jsonl", rs)).ok
    d = client.get("/runs/r1/groups/g.json").json()
    assert [m["rollout_id"] for m in d["members"]] == ["b"]
    assert [(m["rollout_id"], m["attempt"]) for m in d["superseded"]] == [("a", 0)]
    assert d["policies"]["errors_dropped"]["mean"] == pytest.approx(1.0)


# --- 2. huge and tiny numbers ------------------------------------------------------------------------

def test_compact_number_format():
    assert compact_number(1e308) == "1e+308"
    assert compact_number(-1.7e308) == "-1.7e+308"
    assert compact_number(1234567.0) == "1.235e+06"
    assert compact_number(999999.0) == "999999.000"
    assert compact_number(1e-5) == "1e-05"
    assert compact_number(0.0) == "0.000" and compact_number(0.5) == "0.500"
    assert compact_number(0.001) == "0.001"
    assert compact_number(5e308 * 10, "%+.3f") == "+inf"
    assert compact_number(2e9, "%+.3f") == "+2e+09" and compact_number(-0.125, "%+.3f") == "-0.125"
    assert compact_number(-4e-7, "%+.3f") == "-4e-07"


def test_huge_numbers_print_compactly(client, engine, tmp_path):
    rs = [rollout("big", group="g", index=0, reward=1e308), rollout("tiny", group="g", index=1, reward=2e-5),
          rollout("mid", group="g", index=2, reward=0.25)]
    ingest(engine, write_jsonl(tmp_path / "n.jsonl", rs))
    long_digits = re.compile(r"\d{12,}")
    pages = {url: re.sub(r"<script type=\"application/json\".*?</script>", "", client.get(url).text, flags=re.S)
             for url in ["/runs", "/runs/r1", "/runs/r1/rollouts", "/runs/r1/rollouts/big", "/runs/r1/groups/g"]}
    for url, html in pages.items():  # the text shown (not the chart data)
        assert not long_digits.search(html), (url, long_digits.search(html).group()[:40])
    rows = _rows(pages["/runs/r1/rollouts"])
    assert ">1e+308<" in rows and ">2e-05<" in rows and ">0.25<" in rows  # 4 significant digits (render.significant)
    assert "1e+308" in pages["/runs/r1/rollouts/big"]
    group = pages["/runs/r1/groups/g"]
    assert "3.333e+307" in group  # the baseline mean
    assert "+6.667e+307" in group  # big's advantage, with its sign
    assert "-3.333e+307" in group  # mid's and tiny's


# --- 3. HEAD ------------------------------------------------------------------------------------

@pytest.mark.parametrize("url", ["/runs", "/runs/r1", "/runs/r1.json", "/runs/r1/rollouts", "/runs/r1/rollouts.json",
                                 "/runs/r1/rollouts/x", "/runs/r1/rollouts/x.json?attempt=0", "/runs/r1/groups/g",
                                 "/quarantine", "/static/app.css", "/healthz"])
def test_head_answers_like_get(client, engine, tmp_path, url):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("x", group="g", index=0)]))
    get, head = client.get(url), client.head(url)
    assert get.status_code == head.status_code == 200, url
    assert head.content == b""
    for name in ("content-type", "content-length", "content-security-policy", "x-content-type-options"):
        assert head.headers.get(name) == get.headers.get(name), (url, name)


def test_head_of_a_missing_page_is_404(client, engine):
    r = client.head("/runs/nope")
    assert r.status_code == 404 and r.content == b""
    assert client.head("/runs/nope.json").headers["content-type"] == "application/json"
    assert client.post("/runs").status_code == 405  # only HEAD joins GET


# --- 4. per-token advantages ------------------------------------------------------------------------

def test_token_titles_show_advantages(client, engine, tmp_path):
    r = rollout("x")
    r.nodes[1].advantages = [0.123, None, -2.5e7]
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [r]))
    d = client.get("/runs/r1/rollouts/x.json").json()
    assert [t["advantage"] for t in d["messages"][1]["tokens"]] == [0.123, None, -2.5e7]
    assert [t["advantage"] for t in d["messages"][0]["tokens"]] == [None] * 3
    assert d["messages"][1]["advantages"] == [0.123, None, -2.5e7]
    html = client.get("/runs/r1/rollouts/x").text
    titles = re.findall(r'<span class="tok [^"]*"[^>]*data-i="(\d)"[^>]*title="([^"]*)"', html)
    assistant = [t for _, t in titles[3:]]
    assert "· advantage +0.123" in assistant[0]
    assert "advantage" not in assistant[1]
    assert "· advantage -2.5e+07" in assistant[2]
    assert not any("advantage" in t for _, t in titles[:3])


# --- 5. singular counts, chips that do not wrap ------------------------------------------------------

def test_counts_of_one_are_singular(client, engine, tmp_path):
    one = rollout("one", group="g", index=0, step=0,
                  messages=[{"role": "user", "content": "x" * 2001},
                            {"role": "assistant", "content": "",
                             "tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]},
                            {"role": "tool", "content": "r", "tool_call_id": "c1"}])
    one.nodes[1].token_ids, one.nodes[1].mask, one.nodes[1].logprobs = [7], [True], [-0.1]
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [one]))
    pages = {url: client.get(url).text for url in ["/runs/r1", "/runs/r1/groups/g", "/runs/r1/rollouts/one"]}
    bad = re.compile(r"(?<![\d.])1 (turns|tokens|tool calls|calls|branches|messages|rollouts|characters|model calls)\b")
    for url, html in pages.items():
        assert not bad.search(html), (url, bad.search(html).group())
    assert re.search(r"\b1 rollout(</span>)? ·", pages["/runs/r1"])  # the count is its own live element
    group = pages["/runs/r1/groups/g"]
    assert "1 rollout" in group and "1 turn · 1 tool call · 7 tokens" in group
    page = pages["/runs/r1/rollouts/one"]
    assert "1 turn · 1 tool call · 7 tokens (1 with mask 1) · 1 branch" in page
    assert '<span class="sub">1 token · t3, 1 with mask 1</span>' in page
    assert "show full text (2001 characters)" in page
    two = rollout("two", messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                                   {"role": "user", "content": "q"}, {"role": "assistant", "content": "b"}])
    ingest(engine, write_jsonl(tmp_path / "b.jsonl", [two]))
    assert "2 turns · 0 tool calls · 12 tokens (6 with mask 1) · 1 branch" in client.get("/runs/r1/rollouts/two").text


def _css_rules(css: str) -> list[tuple[str, str]]:
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    return [(sel.strip(), body) for sel, body in re.findall(r"([^{}]+)\{([^}]*)\}", css)]


def test_bare_id_chips_do_not_wrap_inside(client):
    rules = _css_rules(client.get("/static/app.css").text)
    chip = [body for sel, body in rules if ".tok-id" in [s.strip() for s in sel.split(",")]]
    assert any(re.search(r"white-space:\s*nowrap", body) for body in chip)
    strip = [body for sel, body in rules if sel == ".tokens"]
    assert strip and not any("nowrap" in body for body in strip)  # the strip wraps between chips


# --- 6. chart axes and legends ------------------------------------------------------------------------

def test_step_axis_ticks_are_whole_steps_and_legends_always_show(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout(f"s{i}", step=2 + i % 2) for i in range(4)]))
    charts = client.get("/runs/r1.json").json()["charts"]
    assert len(charts["ending_rates"]["data"]) == 1  # one ending type: one trace
    for fig in charts.values():
        x = fig["layout"]["xaxis"]
        assert x["tickformat"] == "d" and x["tickmode"] == "linear" and x["dtick"] == 1
        assert fig["layout"]["showlegend"] is True
    ingest(engine, write_jsonl(tmp_path / "b.jsonl", [rollout(f"t{i}", run="long", step=i * 37) for i in range(30)]))
    x = client.get("/runs/long.json").json()["charts"]["ending_rates"]["layout"]["xaxis"]
    assert isinstance(x["dtick"], int) and x["dtick"] >= 1 and 1073 / x["dtick"] <= 10  # not 1000 ticks
    assert x["dtick"] == 200


# --- 7. group index beyond the declared size ------------------------------------------------------------

def test_group_warns_of_an_index_beyond_the_declared_size(client, engine, tmp_path):
    rs = [rollout("a", group="g", index=0), rollout("b", group="g", index=5)]
    for r in rs:
        r.group.size = 2
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs))
    d = client.get("/runs/r1/groups/g.json").json()
    assert d["warnings"] == ["index #5 outside declared size 2"]
    assert "index #5 outside declared size 2" in client.get("/runs/r1/groups/g").text
    # alongside the other warnings
    more = [rollout(f"m{n}", group="h", index=i) for n, i in enumerate((0, 2, 2, 7))]
    for r in more:
        r.group.size = 2
    ingest(engine, write_jsonl(tmp_path / "b.jsonl", more))
    assert client.get("/runs/r1/groups/h.json").json()["warnings"] == [
        "declared size 2 but 4 members", "duplicate indices #2 ×2", "indices #2, #7 outside declared size 2"]
    ok = [rollout(f"k{i}", group="k", index=i) for i in range(2)]
    for r in ok:
        r.group.size = 2
    ingest(engine, write_jsonl(tmp_path / "c.jsonl", ok))
    assert client.get("/runs/r1/groups/k.json").json()["warnings"] == []
