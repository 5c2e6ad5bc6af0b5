"""Operators' view: `/api/v1/ingest/status`, the `/ingest` page, `/metrics`, `rollscope link`."""
from __future__ import annotations

from typer.testing import CliRunner

from app.cli import app as cli
from app.worker.run import run as run_worker
from tests.helpers import rollout, write_jsonl


def test_status_page_metrics_and_link(client, engine, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    f = write_jsonl(spool / "a.jsonl", [rollout("a"), rollout("b")])
    with f.open("ab") as out:
        out.write(b'{"schema": "rollscope/1", "id": "bad"}\n{"schema": "rollscope/1", "id": "partial')
    run_worker(engine, [spool], once=True, log=lambda _m: None, torn_after=3600)
    st = client.get("/api/v1/ingest/status").json()
    (src,) = st["sources"]
    assert src["name"] == str(f) and src["format"] == "native" and src["records"] == 2 and src["quarantined"] == 1
    assert src["bytes_behind"] == len(b'{"schema": "rollscope/1", "id": "partial') and src["records_last_minute"] == 2
    assert "bad" in src["last_error"] or "run" in src["last_error"]
    page = client.get("/ingest")
    assert page.status_code == 200 and 'hx-trigger="every 2s"' in page.text and str(f) in page.text
    assert client.get("/ingest.json").json()["rollouts"] == 2
    m = client.get("/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    assert "rollscope_rollouts_ingested 2" in m.text and "rollscope_records_rejected 1" in m.text
    assert 'rollscope_http_request_seconds_count{method="GET",route="/ingest",status="200"} 1' in m.text
    out = CliRunner().invoke(cli, ["link", "team/exp", "x 1", "--node", "3", "--token", "rs_t", "--base", "http://h:8000/"])
    assert out.stdout.strip() == "http://h:8000/runs/team%2Fexp/rollouts/x%201?token=rs_t#node-3"
