"""A run is "receiving" while rollouts arrive from a live source (the worker's spool, `POST
/api/v1/ingest`), never after a finished CLI batch; through the real HTTP app on SQLite and Postgres."""
from __future__ import annotations

from tests.helpers import ingest, write_jsonl


def test_receiving_means_a_live_source_not_a_finished_cli_batch(engine, client, tmp_path):
    """A one-off `rollscope ingest` (the CLI's path) leaves the run page quiet; rollouts arriving
    through the worker's spool or `POST /api/v1/ingest` make it "receiving" with the newest step
    in progress."""
    from app import auth
    from app.worker.run import run as run_worker
    from ingest.formats.native import write_line
    from tests.helpers import rollout

    assert ingest(engine, write_jsonl(tmp_path / "cli.jsonl",
                                      [rollout(f"c{i}", run="cli", step=i) for i in range(2)])).ok
    d = client.get("/runs/cli.json").json()
    assert d["live"] is False and d["in_progress_step"] is None
    html = client.get("/runs/cli").text
    assert "receiving</span>" not in html and "in progress</span>" not in html

    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "rollouts.jsonl").write_bytes(b"".join(write_line(rollout(f"s{i}", run="spooled", step=i))
                                                    for i in range(3)))
    assert run_worker(engine, [spool], once=True, poll=0.05, log=lambda _m: None).commits >= 1
    d = client.get("/runs/spooled.json").json()
    assert d["live"] is True and d["in_progress_step"] == 2
    html = client.get("/runs/spooled").text
    assert "receiving</span>" in html and "in progress</span>" in html

    token, _ = auth.issue(engine, "write")
    r = client.post("/api/v1/ingest", content=write_line(rollout("h0", run="posted", step=5)),
                    headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
    d = client.get("/runs/posted.json").json()
    assert d["live"] is True and d["in_progress_step"] == 5
    # the CLI run stays quiet after the others arrive
    assert client.get("/runs/cli.json").json()["live"] is False
