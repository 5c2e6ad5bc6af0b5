"""Search that finds incidents (docs/search.md), through the real HTTP app on SQLite (FTS5) and
Postgres (tsvector): the demo's step-18 sandbox crashes, the query language and its refusals,
kinds and roles, grouping, facets and paging, a word near the end of a 60 MB tool output, and
the index rebuilt from what is stored (migration 0021 and `rollscope rebuild-analytics`)."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from app.db import models
from app.queries.search_query import MAX_QUERY_CHARS
from app.store import search as store_search
from tests.helpers import ingest, rollout, write_jsonl


@pytest.fixture
def demo_run(db_url):
    """The whole demo run (30 steps of 64 rollouts), as `rollscope demo` ingests it: the test is
    marked `with_demo`, so `db_url` holds it already (tests/conftest.py)."""
    return "demo-grpo"


def _crashes(client, run: str, step: int) -> set[str]:
    rows = client.get(f"/runs/{run}/rollouts.json?step={step}&ending=error&limit=1000").json()["rollouts"]
    return {r["rollout_id"] for r in rows if r["ending_detail"] == "sandbox_crash"}


def _all_hits(client, url: str) -> list[dict]:
    out = []
    while url:
        d = client.get(url).json()
        out += d["hits"]
        url = d["next_url"]
    return out


@pytest.mark.with_demo
def test_the_demo_incident_is_found(client, demo_run):
    crashed = _crashes(client, demo_run, 18)
    assert len(crashed) >= 10  # the incident: most of step 18's errors
    d = client.get("/search.json?q=sandbox").json()
    assert d["query"]["terms"] == [{"word": "sandbox", "prefix": True}]
    step18 = next(f for f in d["facets"]["step"] if f["value"] == 18)
    assert step18["count"] >= len(crashed)
    # the most telling matches first: the rollout errors, which name the crash; the incident's first
    assert d["hits"][0]["matches"][0]["kind"] == "rollout_error" and d["hits"][0]["ending"] == "error"
    assert {h["rollout_id"] for h in d["hits"][:len(crashed)]} == crashed
    assert any(s["hit"] and s["text"].lower() == "sandbox" for s in d["hits"][0]["matches"][0]["snippet"])
    # the step facet's link narrows the search to step 18: every crash there, first
    at18 = client.get(step18["url"]).json()
    assert {h["step"] for h in at18["hits"]} == {18}
    assert {h["rollout_id"] for h in at18["hits"][:len(crashed)]} == crashed
    for q in ("sandb", "exited", "host lost"):  # a prefix, and the words the issue searched
        hits = _all_hits(client, f"/search.json?q={q}&steps=18&limit=7")
        assert {h["rollout_id"] for h in hits} >= crashed, q
    # a phrase and a step filter in the query: exactly the step-18 crashes, counted at step 18
    d = client.get('/search.json', params={"q": '"host lost" step:18'}).json()
    assert {h["rollout_id"] for h in d["hits"]} == crashed
    assert d["query"]["terms"] == [{"phrase": "host lost"}] and d["query"]["filters"] == {"steps": "18"}
    assert [(f["value"], f["count"]) for f in d["facets"]["step"]] == [(18, len(crashed))]
    assert [(f["value"], f["count"]) for f in d["facets"]["ending"]] == [("error", len(crashed))]
    assert {f["value"] for f in d["facets"]["kind"]} == {"rollout_error", "ending"}
    hit = d["hits"][0]
    assert hit["ending_detail"] == "sandbox_crash" and hit["counts"] == {"rollout_error": 1, "ending": 1}
    assert hit["url"] == f"/runs/{demo_run}/rollouts/{hit['rollout_id']}.json"
    # the same as URL parameters
    same = client.get('/search.json', params={"q": '"host lost"', "steps": "18", "kind": "rollout_error"}).json()
    assert {h["rollout_id"] for h in same["hits"]} == crashed
    # a finding kind: the crashes whose last tool call went unanswered (all of them, the sandbox died)
    flagged = client.get("/search.json", params={"q": '"host lost" flag:unanswered_tool_call', "steps": "18"}).json()
    assert {h["rollout_id"] for h in flagged["hits"]} == crashed
    assert client.get("/search.json", params={"q": '"host lost"', "steps": "18",
                                              "flag": "reward_hacking_nowhere"}).status_code == 422
    html = client.get("/search", params={"q": '"host lost" step:18'}).text
    assert "<mark>host" in html.lower() and 'href="/search?q=' in html and "by step" in html


def _ingest_small(engine, tmp_path):
    sandbox = [{"role": "system", "content": "You are in a sandboxed repo."},
               {"role": "user", "content": "Run the tests, then fix the <b>kumquat</b> module."},
               {"role": "assistant", "content": "Running them.",
                "tool_calls": [{"id": "c1", "name": "run_tests", "arguments": "{\"path\": \"/srv/kumquat\"}"}]},
               {"role": "tool", "tool_call_id": "c1", "name": "run_tests",
                "content": "Error: ModuleNotFoundError: no module named quokka"},
               {"role": "assistant", "content": "The quokka module is missing."}]
    rs = [rollout("a", step=1, messages=sandbox, ending="error",
                  errors=[{"type": "SandboxCrash", "message": "sandbox exited with code 137 (host lost)"}]),
          rollout("b", step=2, messages=[{"role": "user", "content": "quokka facts please"},
                                         {"role": "assistant", "content": "The host lost its quokka."}]),
          rollout("c", step=3, run="r2", messages=[{"role": "user", "content": "lost host, not host lost"},
                                                   {"role": "assistant", "content": "the the the"}])]
    rs[0].ending.detail, rs[0].ending.message = "ENV_TIMEOUT", "the environment hung"
    ingest(engine, write_jsonl(tmp_path / "small.jsonl", rs))


def _ids(client, q: str, **params) -> list[tuple[str, str]]:
    d = client.get("/search.json", params={"q": q, **params})
    assert d.status_code == 200, (q, d.text)
    return sorted((h["run_id"], h["rollout_id"]) for h in d.json()["hits"])


def test_query_language_kinds_and_roles(client, engine, tmp_path):
    _ingest_small(engine, tmp_path)
    assert _ids(client, "quokk") == [("r1", "a"), ("r1", "b")]  # a prefix
    assert _ids(client, '"host lost"') == [("r1", "a"), ("r1", "b"), ("r2", "c")]
    assert _ids(client, '"lost host"') == [("r2", "c")]  # a phrase keeps its order
    assert _ids(client, "host lost quokka") == [("r1", "b")]  # every term in one text
    assert _ids(client, "quokka kind:tool_error") == [("r1", "a")]
    assert _ids(client, "quokka", kind="tool_error") == [("r1", "a")]
    assert _ids(client, "quokka role:user") == [("r1", "b")]
    assert _ids(client, "quokka", role="assistant") == [("r1", "a"), ("r1", "b")]
    assert _ids(client, "host run:r2") == _ids(client, "host", run="r2") == [("r2", "c")]
    assert _ids(client, "host step:2-3") == [("r1", "b"), ("r2", "c")]
    assert _ids(client, "host ending:error") == [("r1", "a")]
    assert _ids(client, "env_timeout") == _ids(client, "hung kind:ending") == [("r1", "a")]
    assert _ids(client, "sandboxcrash") == [("r1", "a")]  # the error's type
    assert _ids(client, "kumquat") == [("r1", "a")]  # inside markup and paths, on both databases
    assert _ids(client, "srv/kumquat") == [("r1", "a")]
    # no stop words (only stop words is a search like any other); AND is the default
    assert _ids(client, '"the" AND "the"') == [("r1", "a"), ("r1", "b"), ("r2", "c")]
    assert _ids(client, '"the" "the" "the"', run="r2") == [("r2", "c")]
    a = client.get("/search.json?q=quokka&run=r1").json()["hits"]
    first = next(h for h in a if h["rollout_id"] == "a")
    assert [m["kind"] for m in first["matches"]] == ["tool_error", "message"]
    assert first["matches"][0]["role"] == "tool" and first["matches"][0]["node_idx"] == 3
    assert first["matches"][0]["url"] == "/runs/r1/messages/1/3"
    page = client.get(first["matches"][0]["url"], follow_redirects=False)
    assert page.status_code == 307 and page.headers["location"].endswith("#node-3")
    twin = client.get(first["matches"][0]["url"] + ".json", follow_redirects=False)  # it was a 422
    assert twin.status_code == 307 and twin.headers["location"] == page.headers["location"].replace(
        "/rollouts/a?", "/rollouts/a.json?")
    assert client.get(first["matches"][0]["url"] + ".json").json()["rollout"]["rollout_id"] == "a"
    # paging: one rollout a page, the cursor `next`, then nothing more
    p1 = client.get("/search.json?q=host&limit=1").json()
    assert len(p1["hits"]) == 1 and p1["next"] and "after=" in p1["next_url"]
    seen = [p1["hits"][0]["rollout_id"]]
    url = p1["next_url"]
    while url:
        d = client.get(url).json()
        seen += [h["rollout_id"] for h in d["hits"]]
        url = d["next_url"]
    assert sorted(seen) == ["a", "b", "c"] and p1["facets"]["ending"]
    if engine.dialect.name == "sqlite":  # the FTS5 index holds exactly the stored documents
        with engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO search_fts(search_fts, rank) VALUES ('integrity-check', 1)")


@pytest.mark.parametrize("q, field", [
    ("quokka OR host", "q"), ("NOT quokka", "q"), ("x" * (MAX_QUERY_CHARS + 1), "q"),
    ("w " * 5000, "q"), ("quokka ending:bogus", "ending"), ("quokka kind:tokens", "kind"), ("quokka step:9-3", "steps"),
    ('quokka step:""', "steps"), ("quokka run:r1 run:r2", "run"),
    ("quokka flag:", "flag"), ("flag: quokka", "flag"), ("quokka ending:", "ending"),  # a filter with no value
])
def test_bad_queries_are_a_clear_422(client, q, field):
    r = client.get("/search.json", params={"q": q})
    assert r.status_code == 422, (q, r.text)
    assert r.json()["error"]["field"] == field, r.json()


def test_nul_in_a_query_is_refused_before_it_is_read(client):
    r = client.get("/search.json", params={"q": "quokka\x00"})  # app.main.RoutingPath: any NUL in the URL
    assert r.status_code == 400 and "NUL" in r.json()["error"]["message"]


def test_odd_queries_get_an_answer(client, engine, tmp_path, monkeypatch):
    _ingest_small(engine, tmp_path)
    from app.queries import search as search_q

    monkeypatch.setattr(search_q, "SCAN_CAP", 2)  # a common word: the newest texts read, and said so
    d = client.get("/search.json", params={"q": "host"}).json()
    assert d["capped"] and d["total_matches"] == 2 and any("narrow the search" in n for n in d["notes"])
    monkeypatch.undo()
    for q in ("!!! ... ???", '"', '""', "*", "-", "(", "step:2"):
        d = client.get("/search.json", params={"q": q}).json()
        assert d["hits"] == [] and d["notes"], q  # no word: nothing searched, and it says so
    d = client.get("/search.json", params={"q": '"host lost'}).json()  # a quote left open
    assert len(d["hits"]) == 3 and "quote" in d["notes"][0]
    d = client.get("/search.json", params={"q": " ".join(f"w{i}" for i in range(40))}).json()
    assert d["hits"] == [] and "first 16" in d["notes"][0] and len(d["query"]["terms"]) == 16
    assert client.get("/search.json?q=host&after=bogus").status_code == 422
    assert client.get("/search.json?q=host&run=nowhere").status_code == 404
    assert client.get("/search.json?q=host&steps=9-3").status_code == 422
    assert client.get("/search.json?q=host&ending=bogus").status_code == 422
    # a facet link narrows a step range given in the query (the steps in both)
    assert _ids(client, "host step:1-3", steps="2-9") == [("r1", "b"), ("r2", "c")]
    assert client.get("/search", params={"q": "a OR b"}).status_code == 422


def test_a_word_near_the_end_of_a_60_mb_tool_output(client, engine, tmp_path):
    """Long texts are searched by their head and their tail (HEAD_TAIL_CHARS each): the
    traceback at the end of a 60 MB log is found, a word in its middle is not, and the hit says
    the middle was not searched."""
    line = "step ok: compiling module alpha beta gamma delta\n"
    body = line * (60_000_000 // len(line)) + "Traceback (most recent call last): zugzwang failure\n" + line * 20
    body = "headword " + body[:30_000_000] + " middleword " + body[30_000_000:]
    assert len(body) > 60_000_000
    msgs = [{"role": "user", "content": "run the build"},
            {"role": "assistant", "content": "ok", "tool_calls": [{"id": "c", "name": "sh", "arguments": "{}"}]},
            {"role": "tool", "tool_call_id": "c", "name": "sh", "content": body}]
    ingest(engine, write_jsonl(tmp_path / "big.jsonl", [rollout("big", messages=msgs, tokens=False)]))
    del body, msgs
    d = client.get("/search.json?q=zugzwang").json()
    assert [h["rollout_id"] for h in d["hits"]] == ["big"]
    m = d["hits"][0]["matches"][0]
    assert m["kind"] == "tool_output" and m["truncated"] is True and d["hits"][0]["truncated"] is True
    assert any(s["hit"] and s["text"] == "zugzwang" for s in m["snippet"])
    assert any("only their first and last" in n for n in d["notes"])
    assert len(client.get('/search.json?q="zugzwang failure"').json()["hits"]) == 1
    assert len(client.get("/search.json?q=headword").json()["hits"]) == 1
    assert client.get("/search.json?q=middleword").json()["hits"] == []
    assert "middle not searched" in client.get("/search?q=zugzwang").text
    with engine.connect() as conn:  # the head and the tail, each at most HEAD_TAIL_CHARS
        sizes = conn.execute(sa.select(sa.func.length(models.SearchDoc.text), models.SearchDoc.truncated)
                             .where(models.SearchDoc.kind == "tool_output")).all()
    assert len(sizes) == 2 and all(store_search.HEAD_TAIL_CHARS - 256 <= n <= store_search.HEAD_TAIL_CHARS and cut
                                   for n, cut in sizes)


def test_rebuild_indexes_what_is_stored_as_ingest_did(client, engine, tmp_path):
    """`search.rebuild` (migration 0021, `rollscope rebuild-analytics`) makes the documents
    ingest made, from the node rows and the stored envelopes."""
    _ingest_small(engine, tmp_path)
    SD = models.SearchDoc.__table__
    cols = (SD.c.rollout_pk, SD.c.run_id, SD.c.node_idx, SD.c.kind, SD.c.role, SD.c.truncated, SD.c.text)

    def docs():
        with engine.connect() as conn:
            return sorted(conn.execute(sa.select(*cols)).all(), key=lambda r: (r[0], r[3], r[2] or -1))

    before, answer = docs(), client.get('/search.json?q="host lost"').json()["hits"]
    assert {r.kind for r in before} == {"message", "tool_error", "rollout_error", "ending"}
    with engine.begin() as conn:
        n = store_search.rebuild(conn)
    assert n == len(before) and docs() == before
    assert client.get('/search.json?q="host lost"').json()["hits"] == answer


def test_any_query_gets_an_answer_or_a_422(client, engine, tmp_path):
    """Queries made of FTS5's and tsquery's own syntax, odd Unicode and random text: never a
    server error (a seeded sample, the same each run)."""
    import random

    _ingest_small(engine, tmp_path)
    nasty = ['NEAR(host lost)', 'host NEAR/2 lost', '^host', 'host*', '"host" + "lost"', "host:*", "'host'",
             "host & lost", "host | lost", "!host", "host <-> lost", "{host lost}", "(((", ")))", "col:host",
             "text:host", "run:", "kind:", 'kind:"rollout_error"', "step:18 step:19", "step:-", "step:1-", "ünïcödé",
             "日本語のテキスト", "🦘 quokka", "\u200bquokka", "quokka\u202e", "a" * 999, "\\", "%", "_", "AND",
             "and or not", "quokka OR", "OR", "NOT", "x:y:z", '"a" "b" "c" "', "\t\n quokka \r"]
    rng = random.Random(24)
    alphabet = 'ab qQ"*:^()-+&|!<>\'\\/_.,;0123456789éß中🦘\u200b'
    nasty += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 40))) for _ in range(120)]
    for q in nasty:
        for url in ("/search.json", "/search"):
            r = client.get(url, params={"q": q})
            assert r.status_code in (200, 422), (q, r.status_code, r.text[:300])


def test_migration_0021_indexes_the_rollouts_stored_before_it(client, engine, db_url, tmp_path):
    """Down to 0020 (one document per message, its first 100,000 characters), then up again:
    0021 indexes the stored rollouts' errors, endings and tool results as ingest does."""
    from alembic import command

    from app.db.migrate import alembic_config, upgrade

    _ingest_small(engine, tmp_path)
    SD = models.SearchDoc.__table__

    def docs():
        with engine.connect() as conn:
            return sorted(conn.execute(sa.select(SD.c.rollout_pk, SD.c.node_idx, SD.c.kind, SD.c.role,
                                                 SD.c.truncated, SD.c.text)).all(), key=repr)

    before, answer = docs(), client.get('/search.json?q="host lost"').json()["hits"]
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0020_reward_components")
        old = conn.execute(sa.text("SELECT count(*) FROM search_doc")).scalar_one()
    assert old == 9  # the messages with text, as before 0021
    upgrade(engine)
    assert docs() == before
    assert client.get('/search.json?q="host lost"').json()["hits"] == answer


@pytest.mark.parametrize("params", [
    {"q": "step:99999999999999999999999 x"}, {"q": "step:2147483648 x"}, {"q": "step:1-2147483648 x"},
    {"q": "step:-99999999999999999999999 x"}, {"q": "step:99999999999999999999999- x"},
    {"q": "x", "steps": "99999999999999999999999"}, {"q": "x", "steps": "0-2147483648"},
])
def test_a_step_past_int32_is_a_422_naming_the_filter(client, engine, tmp_path, params):
    """Every number of the query language is bounded to the step column's range (int32): a
    422 naming `steps`, never an OverflowError from the database driver."""
    _ingest_small(engine, tmp_path)
    r = client.get("/search.json", params=params)
    assert r.status_code == 422, (params, r.text)
    assert r.json()["error"]["field"] == "steps" and "2147483647" in r.json()["error"]["message"]
    assert client.get("/search", params=params).status_code == 422
    ok = client.get("/search.json", params={"q": "host step:2147483647"})  # the largest step: an answer
    assert ok.status_code == 200 and ok.json()["hits"] == []


@pytest.mark.parametrize("after", ["0.99999999999999999999.1", "0.1.99999999999999999999", "4.2147483648.1",
                                   "0.1.2147483648", "9.1.1", "0.1.-1", "0.1"])
def test_a_forged_cursor_is_a_422(client, engine, tmp_path, after):
    _ingest_small(engine, tmp_path)
    r = client.get("/search.json", params={"q": "host", "after": after})
    assert r.status_code == 422 and r.json()["error"]["field"] == "after", (after, r.text)


@pytest.mark.parametrize("params, field, named", [
    ({"q": "quokka flag:bogus"}, "flag", "bogus"),
    ({"q": "quokka", "flag": "reward_hacking_nowhere"}, "flag", "reward_hacking_nowhere"),
    ({"q": "host step:18 step:19"}, "steps", ("18", "19")),
    ({"q": "host step:18", "steps": "19"}, "steps", ("18", "19")),
    ({"q": "host step:1-3 step:5-"}, "steps", ("1-3", "5-")),
])
def test_an_unknown_flag_or_steps_with_nothing_in_common_are_a_422(client, engine, tmp_path, params, field, named):
    """docs/search.md: a bad filter value, or two values of one filter that cannot both hold, is
    a 422 naming the filter (and the values), not an empty answer or an inverted range."""
    _ingest_small(engine, tmp_path)
    r = client.get("/search.json", params=params)
    assert r.status_code == 422, (params, r.text)
    err = r.json()["error"]
    assert err["field"] == field
    assert all(v in err["message"] for v in ((named,) if isinstance(named, str) else named)), err


def test_a_known_flag_and_overlapping_steps_still_search(client, engine, tmp_path):
    _ingest_small(engine, tmp_path)
    from ingest import checks

    kind = checks.kinds()[0]
    assert client.get("/search.json", params={"q": f"host flag:{kind}"}).status_code == 200
    assert client.get("/search.json", params={"q": "host", "flag": kind}).status_code == 200
    old = client.get("/search.json", params={"q": "host flag:tool_call_markup_unparsed", "flag": "unparsed_tool_call"})
    assert old.status_code == 200 and old.json()["query"]["filters"] == {"flag": "unparsed_tool_call"}
    assert _ids(client, "host step:1-2 step:2-3") == [("r1", "b")]
    assert _ids(client, "host step:2", steps="2") == [("r1", "b")]


def test_a_long_text_is_one_match_however_many_of_its_parts_match(client, engine, tmp_path):
    """A text longer than HEAD_TAIL_CHARS is indexed in two parts (head and tail); a word in both
    is one matching text: counted once per rollout, in the kind facet and in total_matches, and
    shown once. Two separate errors of one rollout stay two."""
    word = "lorem ipsum dolor sit amet\n"
    big = word * (5_000_000 // len(word))
    long_err = word * (3 * store_search.HEAD_TAIL_CHARS // len(word))
    msgs = [{"role": "user", "content": "print it"},
            {"role": "assistant", "content": "ok", "tool_calls": [{"id": "c", "name": "cat", "arguments": "{}"}]},
            {"role": "tool", "tool_call_id": "c", "name": "cat", "content": big},
            {"role": "assistant", "content": word * 4000}]  # 1× to 2× HEAD_TAIL_CHARS: two parts
    errors = [{"type": "Boom", "message": "lorem one", "traceback": long_err},
              {"type": "Boom", "message": "lorem two", "traceback": long_err},
              {"type": "Boom", "message": "lorem three"}]
    ingest(engine, write_jsonl(tmp_path / "big.jsonl", [rollout("big", messages=msgs, tokens=False,
                                                                ending="error", errors=errors)]))
    with engine.connect() as conn:  # the index holds the parts
        parts = dict(conn.execute(sa.select(models.SearchDoc.kind, sa.func.count())
                                  .group_by(models.SearchDoc.kind)).all())
    assert parts["tool_output"] == 2 and parts["message"] == 4 and parts["rollout_error"] == 5
    d = client.get("/search.json?q=lorem").json()
    hit = d["hits"][0]
    assert hit["counts"] == {"rollout_error": 3, "tool_output": 1, "message": 1}, hit["counts"]
    assert d["total_matches"] == 5 and d["total_rollouts"] == 1
    assert {f["value"]: f["count"] for f in d["facets"]["kind"]} == {"rollout_error": 3, "tool_output": 1,
                                                                     "message": 1}
    shown = [(m["kind"], m["node_idx"]) for m in hit["matches"]]
    assert shown == [("rollout_error", None)] * 3 + [("tool_output", 2), ("message", 3)] and hit["more"] == 0
    d = client.get("/search.json?q=lorem&kind=tool_output").json()
    assert d["total_matches"] == 1 and d["hits"][0]["counts"] == {"tool_output": 1}


def test_a_common_word_in_one_run_reads_the_runs_newest_texts_up_to_the_cap(client, engine, tmp_path, monkeypatch):
    """The bound on a search's work: a word in every text of two runs, searched in the first run
    ingested, reads only that run's texts, newest first, at most SCAN_CAP (set to 3 here) of its
    5 matches: the page says "3+ matching texts" and the twin `capped`, `scan_cap`; the walk
    starts at the run's newest text (its keys from the (run_id, pk) index), not at the later
    run's, and a run without texts reads none."""
    from app.queries import search as search_q
    from app.queries.search_query import parse

    def said(run: str, i: int) -> list[dict]:
        return [{"role": "user", "content": f"quokka census {run} {i}"}, {"role": "assistant", "content": "ok"}]

    for run in ("first", "later"):
        ingest(engine, write_jsonl(tmp_path / f"{run}.jsonl", [
            rollout(f"{run}-{i}", run=run, step=i, messages=said(run, i), tokens=False) for i in range(5)]))
    ingest(engine, write_jsonl(tmp_path / "quiet.jsonl", [rollout("q", run="quiet", messages=[
        {"role": "user", "content": "nothing"}, {"role": "assistant", "content": "ok"}], tokens=False)]))
    with engine.connect() as conn:
        first = conn.execute(sa.select(sa.func.min(models.SearchDoc.pk), sa.func.max(models.SearchDoc.pk))
                             .where(models.SearchDoc.run_id == "first")).one()
    from sqlmodel import Session
    with Session(engine) as s:
        assert search_q._run_keys(s, parse("quokka", run="first")) == tuple(first)
        assert search_q._run_keys(s, parse("quokka", run="nowhere-here")) == (1, 0)
        assert search_q._run_keys(s, parse("quokka")) is None
    monkeypatch.setattr(search_q, "SCAN_CAP", 3)
    d = client.get("/search.json", params={"q": "quokka", "run": "first"}).json()
    assert d["capped"] and d["total_matches"] == 3 and d["scan_cap"] == 3
    assert [h["rollout_id"] for h in d["hits"]] == ["first-4", "first-3", "first-2"]  # the run's newest
    page = client.get("/search", params={"q": "quokka", "run": "first"}).text
    assert "3+ matching texts (the newest 3 read)" in page
    assert [h["rollout_id"] for h in client.get("/search.json", params={"q": "quokka"}).json()["hits"]] == \
        ["later-4", "later-3", "later-2"]
    assert client.get("/search.json", params={"q": "quokka", "run": "quiet"}).json()["hits"] == []
    monkeypatch.undo()
    d = client.get("/search.json", params={"q": "quokka", "run": "first"}).json()
    assert not d["capped"] and d["total_matches"] == 5 and {h["run_id"] for h in d["hits"]} == {"first"}
    assert "5 matching texts</p>" in client.get("/search", params={"q": "quokka", "run": "first"}).text
