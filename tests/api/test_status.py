"""Operators' view: `/api/v1/ingest/status`, the `/ingest` page, `/metrics`, `rollscope link`."""
from __future__ import annotations

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app import auth
from app.cli import app as cli
from app.config import Settings
from app.main import create_app
from app.worker.run import run as run_worker
from ingest.formats.native import write_line
from tests.helpers import rollout, write_jsonl


def test_status_page_metrics_and_link(client, engine, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    f = write_jsonl(spool / "a.jsonl", [rollout("a"), rollout("b")])
    with f.open("ab") as out:
        out.write(b'{"schema": "rollscope/1", "id": "bad", "nodes": 7}\n{"schema": "rollscope/1", "id": "partial')
    run_worker(engine, [spool], once=True, log=lambda _m: None, torn_after=3600)
    st = client.get("/api/v1/ingest/status").json()
    (src,) = st["sources"]
    assert src["name"] == str(f) and src["format"] == "native" and src["records"] == 2 and src["quarantined"] == 1
    assert src["bytes_behind"] == len(b'{"schema": "rollscope/1", "id": "partial') and src["records_last_minute"] == 2
    assert "a.jsonl:3: nodes" in src["last_error"]
    page = client.get("/ingest")
    assert page.status_code == 200 and 'data-events="/ingest/events"' in page.text and str(f) in page.text
    assert client.get("/ingest.json").json()["rollouts"] == 2
    m = client.get("/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    assert "rollscope_rollouts_ingested 2" in m.text and "rollscope_records_rejected 1" in m.text
    assert 'rollscope_http_request_seconds_count{method="GET",route="/ingest",status="200"} 1' in m.text
    out = CliRunner().invoke(cli, ["link", "team/exp", "x 1", "--node", "3", "--token", "rs_t", "--base", "http://h:8000/"])
    assert out.stdout.strip() == "http://h:8000/runs/team%2Fexp/rollouts/x%201?token=rs_t#m-3"


def test_http_ingest_and_otlp_are_listed_as_live_sources(db_url, engine, tmp_path):
    app = create_app(Settings(database_url=db_url, worker={"otlp_spool_dir": tmp_path / "otlp-spool"}))
    try:
        with TestClient(app) as client:
            _live_sources(client, engine)
    finally:
        app.state.engine.dispose()


def _live_sources(client, engine):
    assert client.get("/api/v1/ingest/status").json()["sources"] == []  # nothing received yet: nothing listed
    write, _ = auth.issue(engine, "write")
    h = {"Authorization": f"Bearer {write}"}
    body = write_line(rollout("a")) + write_line(rollout("b")) + \
        b'{"schema": "rollscope/1", "id": "c", "run": {"id": "r1"}, "nodes": [{"message": {"role": "robot"}}]}\n'
    assert client.post("/api/v1/ingest", content=body, headers=h).json()["accepted"] == 2
    assert client.post("/api/v1/ingest", content=write_line(rollout("d")), headers=h).json()["accepted"] == 1
    span = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "name": "plain http call",
            "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000"}
    otlp = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    r = client.post("/v1/traces", json=otlp, headers=h)
    assert r.status_code == 200 and r.json()["partialSuccess"]["rejectedSpans"] == "1", r.text
    st = client.get("/api/v1/ingest/status", headers=h).json()
    by = {s["kind"]: s for s in st["sources"]}
    assert set(by) == {"http", "otlp"}
    web = by["http"]
    assert (web["path"], web["status"], web["records"], web["rejected"], web["quarantined"], web["bytes_behind"]) == \
        ("/api/v1/ingest", "live", 3, 1, 1, 0)
    assert (web["records_last_minute"] == 3 and web["last_error"].startswith("nodes[0].message.role: ")
            and web["last_record_at"].endswith("Z"))
    tel = by["otlp"]
    assert (tel["path"], tel["records"], tel["rejected"]) == ("/v1/traces", 0, 1) and "GenAI" in tel["last_error"]
    assert tel["quarantine_url"] == "/quarantine?file=%2Fv1%2Ftraces"
    assert client.get(tel["quarantine_url"].replace("/quarantine", "/quarantine.json"),
                      headers=h).json()["matching"] == 1
    assert st["rollouts"] == 3 and st["quarantined"] == 2
    page = client.get("/ingest", headers=h).text
    # the page's <time> carries the time to the second (the twin keeps the microseconds)
    assert "HTTP ingest" in page and "OTLP receiver" in page and f'datetime="{web["last_record_at"][:19]}Z"' in page
    assert client.get("/ingest.json", headers=h).json()["sources"] == st["sources"]


def test_a_file_read_again_from_the_start_is_counted_once(client, engine, tmp_path):
    """Rewritten, truncated, truncated and refilled (copytruncate), rotated: the status's records
    and rejections of each source are what the file holds now, never a record counted twice."""
    spool = tmp_path / "spool"
    spool.mkdir()
    f = spool / "a.jsonl"
    bad = b'{"schema": "rollscope/1", "id": "bad", "nodes": 7}\n'
    once = lambda: run_worker(engine, [spool], once=True, log=lambda _m: None, torn_after=3600)  # noqa: E731

    def source(name=str(f)) -> dict:
        (src,) = [s for s in client.get("/api/v1/ingest/status").json()["sources"] if s["name"] == name]
        return src

    def counts(name=str(f)) -> tuple[int, int]:
        src = source(name)
        return src["records"], src["rejected"]

    write_jsonl(f, [rollout("a"), rollout("b")])
    with f.open("ab") as out:
        out.write(bad)
    once()
    assert counts() == (2, 1)
    # rewritten in place with the same records first (its first bytes unchanged) and one more,
    # after a truncation below the offset: read again from the start, each record counted once
    f.write_bytes(write_line(rollout("a")))
    once()
    assert counts() == (1, 0)
    with f.open("ab") as out:
        out.write(write_line(rollout("b")) + write_line(rollout("c")))
    once()
    assert counts() == (3, 0)
    # rewritten: other first bytes (the same records, in another order, plus the bad line)
    f.write_bytes(write_line(rollout("c")) + write_line(rollout("b")) + write_line(rollout("a")) + bad)
    once()
    assert counts() == (3, 1)
    # copytruncate: a copy, then the file cut to nothing and refilled
    (spool / "a.jsonl.1").write_bytes(f.read_bytes())
    f.write_bytes(b"")
    once()
    assert counts() == (0, 0) and counts(str(spool / "a.jsonl.1")) == (3, 1)
    f.write_bytes(write_line(rollout("d")))
    once()
    assert counts() == (1, 0)
    # rotation by rename: the renamed file keeps its counts, the new one has its own
    f.rename(spool / "a.jsonl.2")
    f.write_bytes(write_line(rollout("e")) + write_line(rollout("f")))
    once()
    assert counts() == (1, 0)  # the renamed file keeps the name it was first read under
    assert counts(f"{f}~2") == (2, 0)
    assert sum(s["records"] for s in client.get("/api/v1/ingest/status").json()["sources"]) == 3 + 1 + 2
    assert client.get("/ingest.json").json()["rollouts"] == 6
    # a file no reader knows, refused whole, then grown: still one rejection (one quarantine entry)
    odd = spool / "notes.txt"
    odd.write_bytes(b"hello\n")
    once()
    assert counts(str(odd)) == (0, 1)
    with odd.open("ab") as out:
        out.write(b"more\n")
    once()
    assert counts(str(odd)) == (0, 1) and source(str(odd))["quarantined"] == 1
