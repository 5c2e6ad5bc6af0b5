"""The quarantine page and its twin over real HTTP (uvicorn): each entry's run, where it came from
(HTTP with the sending token's name, for `POST /api/v1/ingest` and `/v1/traces`; a file's path
for the CLI) and when it was first and last rejected, readable on the page and RFC 3339 in the
twin, with hostile names shown as text."""
from __future__ import annotations

import json
import re
from datetime import datetime

from app.auth import issue
from app.config import Settings
from app.main import create_app
from tests.helpers import http, ingest, serving
from tests.store.test_quarantine_lifecycle import BAD, line

TOKEN_NAME = "trainer <b>7</b>"  # a token's name is text a person typed: shown, never markup


def _span(trace: str) -> dict:
    return {"traceId": trace, "spanId": "01" * 8, "name": "GET /", "startTimeUnixNano": "5",
            "endTimeUnixNano": "15", "attributes": [{"key": "http.method", "value": {"stringValue": "GET"}}]}


def test_quarantine_page_and_twin_show_run_source_and_when(db_url, tmp_path):
    app = create_app(Settings(database_url=db_url, worker={"otlp_spool_dir": tmp_path / "otlp-spool"}))
    token, _ = issue(app.state.engine, "write", name=TOKEN_NAME)
    auth = {"Authorization": f"Bearer {token}"}
    f = tmp_path / "local.jsonl"
    f.write_bytes(line("ok") + BAD)
    assert not ingest(app.state.engine, f, run="from-cli").ok
    with serving(app) as base:
        body = line("h1") + BAD
        r = http.post(f"{base}/api/v1/ingest?run=posted", content=body, headers=auth)
        assert r.status_code == 200 and r.json()["rejected"] == 1
        first = http.get(f"{base}/quarantine.json").json()
        r = http.post(f"{base}/api/v1/ingest?run=posted", content=body, headers=auth)  # the same body again
        assert r.status_code == 200 and r.json()["rejected"] == 1
        # a trace with no GenAI span, sent to the OTLP receiver: quarantined as sent by the token
        r = http.post(f"{base}/v1/traces", headers={**auth, "Content-Type": "application/json"}, content=json.dumps(
            {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [_span("ee" * 16)]}]}]}))
        assert r.status_code == 200 and r.json()["partialSuccess"]["rejectedSpans"] == "1"

        d = http.get(f"{base}/quarantine.json").json()
        by_file = {q["file"]: q for q in d["records"]}
        assert d["total"] == 3 and len(by_file) == 3
        posted = next(q for name, q in by_file.items() if name.startswith("http/"))
        assert (posted["run"], posted["source"], posted["source_kind"], posted["token"], posted["run_url"]) == \
            ("posted", f"http:{TOKEN_NAME}", "http", TOKEN_NAME, "/runs/posted.json")
        was = next(q for q in first["records"] if q["file"] == posted["file"])
        assert posted["first_seen"] == was["first_seen"] == posted["at"]  # rejected again: first seen kept ...
        assert _t(posted["last_seen"]) > _t(was["last_seen"])  # ... and last seen moved on
        otlp = by_file["/v1/traces"]
        assert (otlp["source_kind"], otlp["token"], otlp["run"]) == ("http", TOKEN_NAME, None)
        cli = by_file[str(f)]
        assert (cli["run"], cli["source"], cli["source_kind"], cli["token"]) == ("from-cli", str(f), "file", None)
        for q in d["records"]:
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", q["last_seen"])
            assert q["first_seen_text"].endswith(" UTC") and "." not in q["first_seen_text"]

        html = http.get(f"{base}/quarantine").text
        assert "<th>run</th><th>source</th>" in html and "<th>first seen</th><th>last seen</th>" in html
        assert "<b>7</b>" not in html and "trainer &lt;b&gt;7&lt;/b&gt;" in html  # escaped, never markup
        assert html.count("HTTP, token <code>trainer &lt;b&gt;7&lt;/b&gt;</code>") == 2
        assert '<a href="/runs/posted"><span class="clip" title="posted">posted</span></a>' in html
        assert '<a href="/runs/from-cli"><span class="clip" title="from-cli">from-cli</span></a>' in html
        # in words, the exact time to the second on hover (app.render.ago)
        assert f'<time datetime="{posted["last_seen"][:19]}Z" title="{posted["last_seen_text"]}">' in html
        assert '<td class="q-source">file</td>' in html  # read at its name: said once, in the file column
        # the page shows times to the second, never the stored microseconds; so does /ingest
        assert not re.search(r">\d{4}-\d\d-\d\dT[\d:.]+", html)
        status = http.get(f"{base}/ingest").text
        assert re.search(r'<time datetime="[\d-]+T[\d:]+Z" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC">'
                         r'(just now|\d+ (s|min) ago)</time>', status)
        assert not re.search(r">\d{4}-\d\d-\d\dT[\d:.]+", status)


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def test_http_ingest_with_an_unnamed_token_names_its_prefix_and_keeps_any_run(db_url, tmp_path):
    app = create_app(Settings(database_url=db_url, worker={"otlp_spool_dir": tmp_path / "otlp-spool"}))
    token, info = issue(app.state.engine, "write")  # no name: known by its prefix (app.deps.token_label)
    with serving(app) as base:
        long_run = "r" * 300  # longer than a run id can be (200): the rejection still keeps it
        r = http.post(f"{base}/api/v1/ingest?run={long_run}", content=line("h") + BAD,
                       headers={"Authorization": f"Bearer {token}"})
        # the torn line is rejected; the good one too where a run id is bounded (Postgres: varchar(200))
        assert r.status_code == 200 and r.json()["rejected"] >= 1, r.text
        qs = http.get(f"{base}/quarantine.json").json()["records"]
    assert {(q["source"], q["token"], q["run"]) for q in qs} == {(f"http:{info.prefix}", info.prefix, long_run)}
    assert token.startswith(info.prefix)


def test_the_api_lists_the_quarantine_in_pages(client, engine, tmp_path):
    f = tmp_path / "three.jsonl"
    f.write_bytes(BAD + line("ok") + BAD + BAD)
    assert not ingest(engine, f, run="api").ok
    page = client.get("/api/v1/quarantine?limit=2").json()
    assert [q["line"] for q in page["items"]] == [4, 3] and page["next_url"].startswith("/api/v1/quarantine?")
    rest = client.get(page["next_url"]).json()
    assert [q["line"] for q in rest["items"]] == [1] and rest["next"] is None
    q = rest["items"][0]
    assert (q["run"], q["source"], q["source_kind"], q["run_url"]) == ("api", str(f), "file", "/runs/api.json")
    assert q["first_seen"].endswith("Z") and q["last_seen"] == q["first_seen"]
    assert client.get(f"/api/v1/quarantine?file={tmp_path}/other.jsonl").json()["items"] == []
    assert client.get("/api/v1/quarantine?limit=100000").status_code == 422
    # a run none of whose records was stored has no page: named, not linked (it linked a 404)
    lone = tmp_path / "lone.jsonl"
    lone.write_bytes(BAD)
    assert not ingest(engine, lone, run="nothing-stored").ok
    for got in (client.get("/api/v1/quarantine?limit=1").json()["items"][0], client.get("/quarantine.json").json()
                ["records"][0]):
        assert (got["run"], got["run_url"]) == ("nothing-stored", None)
    assert client.get("/runs/nothing-stored").status_code == 404
    assert 'href="/runs/nothing-stored"' not in client.get("/quarantine").text
    assert "/api/v1/quarantine" in client.get("/api/openapi.json").json()["paths"]
