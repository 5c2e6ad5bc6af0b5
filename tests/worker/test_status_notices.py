"""The `/ingest` page and its twin after the worker followed a rotation and read a rewritten file
again: a rotated file is shown under its current path (and the path it was first seen at), and
"read again from the start" is a notice, kept apart from the errors (app/views/ingest_status.py)."""
from __future__ import annotations

import os

import sqlalchemy as sa
from markupsafe import escape  # as the templates escape (Jinja2's autoescape)

from app.db import models
from app.worker.run import run as run_worker
from tests.store.test_quarantine_lifecycle import BAD, line

S = models.SpoolFile.__table__


def _drain(engine, spool) -> list[str]:
    log: list[str] = []
    ran = run_worker(engine, [spool], once=True, poll=0.01, log=log.append, settle=0.0, torn_after=3600)
    assert not ran.left, ran.left
    return log


def test_a_rotated_file_is_shown_where_it_is_and_notices_stay_apart_from_errors(client, engine, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    live, bad = spool / "live.jsonl", spool / "bad.jsonl"
    live.write_bytes(line("a") + line("b"))
    bad.write_bytes(line("c") + BAD)
    _drain(engine, spool)
    os.rename(live, spool / "live.jsonl.1")  # rotation: the old file under a new name, a new file at its path
    live.write_bytes(line("d"))
    _drain(engine, spool)
    (spool / "live.jsonl.1").write_bytes(line("e") + line("a") + line("f"))  # rewritten: its first bytes change
    log = _drain(engine, spool)
    assert any("its first bytes changed; reading it again from the start" in m for m in log)

    st = client.get("/ingest.json").json()
    by_path = {s["path"]: s for s in st["sources"]}
    rotated, new, broken = by_path[str(spool / "live.jsonl.1")], by_path[str(live)], by_path[str(bad)]
    assert (rotated["name"], rotated["was"]) == (str(live), str(live))  # its records keep its first name
    assert (new["name"], new["was"]) == (f"{live}~2", None)  # the new file at the old path: a name of its own
    assert rotated["notice"] == "its first bytes changed; read again from the start"
    assert rotated["last_error"] is None and rotated["records"] == 3
    assert broken["notice"] is None and "bad.jsonl:2" in broken["last_error"]
    assert st["notices"] == [{"source": rotated["path"], "message": rotated["notice"]}]
    assert st["errors"] == [{"source": broken["path"], "message": broken["last_error"]}]
    assert client.get("/api/v1/ingest/status").json()["notices"] == st["notices"]

    page = client.get("/ingest").text
    row = next(r for r in page.split("<tr>") if "live.jsonl.1" in r)
    assert f'{spool / "live.jsonl.1"} <span class="sub">(was {live})</span>' in row
    assert '<td class="src-error"></td>' in row  # nothing in the error column ...
    assert f'<td class="src-notice">{str(escape(rotated["notice"]))}</td>' in row  # ... the notice in its own
    err_row = next(r for r in page.split("<tr>") if "bad.jsonl" in r)
    assert '<td class="src-error">' + str(escape(broken["last_error"])) in err_row


def test_a_notice_an_older_worker_stored_as_an_error_is_shown_as_a_notice(client, engine, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "old.jsonl").write_bytes(line("a"))
    _drain(engine, spool)
    with engine.begin() as conn:  # what a worker before migration 0016 wrote
        conn.execute(S.update().values(last_error="it shrank to 3 bytes; read again from the start", notice=None))
        assert conn.execute(sa.select(S.c.notice)).scalar_one() is None
    [src] = client.get("/ingest.json").json()["sources"]
    assert (src["last_error"], src["notice"]) == (None, "it shrank to 3 bytes; read again from the start")


def test_a_takeover_is_a_notice_on_the_files_row(client, engine, tmp_path):
    from datetime import timedelta

    from app.worker.spool import Spool

    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "held.jsonl").write_bytes(line("a"))
    logged: list[str] = []
    sp = Spool(engine, [spool], settle=0.0, torn_after=3600, log=logged.append)
    try:
        sp.sync_files()
        with engine.begin() as conn:  # a claim left by a worker that is gone, its lease run out
            conn.execute(S.update().values(claimed_by="elsewhere:1", claimed_until=models.utcnow() - timedelta(1)))
        assert sp.work(budget=5) >= 1
    finally:
        sp.close()
    [said] = [m for m in logged if "taking over" in m]
    [src] = client.get("/ingest.json").json()["sources"]
    assert said == f"{src['name']}: {src['notice']}"  # stored without the name the row shows anyway
    assert src["notice"].startswith("taking over from worker elsewhere:1: its lease lapsed")
    assert src["last_error"] is None and src["records"] == 1
