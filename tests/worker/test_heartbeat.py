"""Workers you can see (issue 22): a real `rollscope worker` beats in the database; SIGKILLed, it
goes stale while its spool keeps growing, and every view says so: `/api/v1/ingest/status` and
`/ingest` (the worker stale, the file's holder in red, its lag the bytes appended since, against
the file's size on disk), the run page's banner and its JSON twin, `/metrics`, and the webhook,
once. A clean stop (SIGTERM) marks the worker gone, not stale. SQLite and Postgres, over real
HTTP (uvicorn) with a real HTTP receiver."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import sqlalchemy as sa

from app.alerts import webhook
from app.alerts.watcher import watch_once
from app.config import Settings
from app.db import models
from app.db.engine import make_engine
from app.live import IngestProbe, RunProbe
from app.main import create_app
from app.worker.run import wait_for
from ingest.formats.native import write_line
from tests.conftest import ROOT
from tests.helpers import http, rollout, serving, write_jsonl

S = models.SpoolFile.__table__


class Receiver:
    """A webhook receiver on a free local port: keeps each POSTed JSON body. With `hang`, each
    request waits for `release` before it is answered."""

    def __init__(self, *, hang: bool = False):
        self.bodies: list[dict] = []
        self.release = threading.Event()
        self.answered = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.bodies.append(json.loads(body))
                if hang:
                    outer.release.wait(30)
                self.send_response(200)
                self.end_headers()
                outer.answered += 1

            def log_message(self, *_args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def _worker(db_url: str, spool: Path) -> subprocess.Popen:
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": db_url, "ROLLSCOPE_WORKER__HEARTBEAT_SECONDS": "0.2"}
    return subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--spool", str(spool), "--poll", "0.05"],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _read_all(engine, f: Path) -> bool:
    with engine.connect() as conn:
        row = conn.execute(sa.select(S.c.offset).where(S.c.name == str(f))).first()
    return row is not None and row.offset == f.stat().st_size


def _status(base: str) -> dict:
    return http.get(f"{base}/api/v1/ingest/status").json()


def _one_worker(base: str) -> dict:
    (w,) = _status(base)["workers"]
    return w


def _appended(n_bytes: int) -> bytes:
    """Native lines of run `live`, about `n_bytes` in all."""
    out, i = b"", 0
    while len(out) < n_bytes:
        msgs = [{"role": "user", "content": f"task {i}"}, {"role": "assistant", "content": "y" * 2000}]
        out += write_line(rollout(f"late{i:03d}", run="live", step=1, messages=msgs))
        i += 1
    return out


def test_a_killed_worker_goes_stale_and_every_view_says_so(db_url, tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    f = write_jsonl(spool / "a.jsonl", [rollout("a", run="live"), rollout("b", run="live")])
    receiver = Receiver()
    engine = make_engine(db_url)
    proc = _worker(db_url, spool)
    app = create_app(Settings(database_url=db_url, alerts={"webhook_url": receiver.url, "watch_seconds": 0.2,
                                                           "base_url": "http://rollscope.test"}))
    try:
        with serving(app) as base:
            assert wait_for(lambda: _read_all(engine, f), 30), proc.stderr.read1().decode() if proc.poll() else ""
            assert wait_for(lambda: _status(base)["workers"] and _one_worker(base)["state"] == "live", 10)
            w = _one_worker(base)
            assert (w["pid"], w["spools"], w["interval_seconds"]) == (proc.pid, [str(spool)], 0.2)
            assert w["worker_id"].startswith(f"{w['host']}:{proc.pid}:s") and w["version"]
            before = http.get(f"{base}/runs/live.json").json()["version"]
            probe = RunProbe(engine, "live")  # what a live run page's watcher polls
            assert probe() is None  # the first poll only records
            ingest_probe = IngestProbe(engine)  # what an open /ingest page's watcher polls
            assert ingest_probe() is None
            # the late bytes land while the worker is frozen (it cannot read them) and before it can
            # go stale (0.6 s): written after the kill, a loaded machine let the alert watcher see the
            # stale worker with nothing behind it
            late = _appended(100_000)
            proc.send_signal(signal.SIGSTOP)
            with f.open("ab") as out:
                out.write(late)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            assert wait_for(lambda: _one_worker(base)["state"] == "stale", 10)
            assert ingest_probe() is not None  # the page hears the worker go stale and the bytes wait
            assert ingest_probe() is None

            st = _status(base)
            (src,) = st["sources"]
            assert (src["bytes_behind"], src["size"], src["size_from"]) == (len(late), f.stat().st_size, "disk")
            assert (src["holder"], src["holder_state"]) == (w["worker_id"], "stale")
            assert w["worker_id"] in src["holder_problem"] and "stale" in src["holder_problem"]
            assert st["bytes_behind"] == len(late) and st["records_total"] == 2 and st["rejected_total"] == 0
            page = http.get(f"{base}/ingest").text
            assert "holder-problem" in page and 'class="worker-stale"' in page and w["worker_id"] in page

            (stopped,) = http.get(f"{base}/runs/live.json").json()["ingestion"]["stopped"]
            assert stopped["message"].startswith("ingestion stopped ") and \
                stopped["message"].endswith(f"ago: no live worker for spool {spool}")
            assert (stopped["worker"], stopped["worker_state"], stopped["lag_bytes"], stopped["files"]) == \
                (w["worker_id"], "stale", len(late), [str(f)])
            # an open page hears of it: the banner is part of the version its events carry
            event = probe()
            assert event is not None and event["version"] != before
            assert event["version"] == http.get(f"{base}/runs/live.json").json()["version"]
            assert probe() is None  # and nothing more while the banner says the same
            run_page = http.get(f"{base}/runs/live").text
            assert "ingestion stopped" in run_page and f"no live worker for spool {spool}" in run_page
            # a page left open polls with the version it has: no rollout arrived, but it is sent the banner
            polled = http.get(f"{base}/runs/live", params={"since": before}, headers={"HX-Request": "true"})
            assert polled.status_code == 200 and "ingestion stopped" in polled.text

            metrics = http.get(f"{base}/metrics").text
            assert f'rollscope_ingest_lag_bytes{{source="{f}"}} {len(late)}' in metrics
            beat = [ln for ln in metrics.splitlines()
                    if ln.startswith(f'rollscope_worker_last_heartbeat_timestamp_seconds{{worker="{w["worker_id"]}"}}')]
            assert len(beat) == 1 and abs(float(beat[0].split()[-1]) - _unix(_one_worker(base)["last_beat_at"])) < 0.01
            assert "rollscope_ingest_records_total 2" in metrics and "rollscope_ingest_rejected_total 0" in metrics

            assert wait_for(lambda: receiver.bodies, 10)
            assert webhook.idle(10)
            assert watch_once(engine, app.state.settings) == 0  # the next passes: already delivered
            assert webhook.idle(10)
            (body,) = receiver.bodies
            assert (body["kind"], body["worker"], body["files"], body["lag_bytes"]) == \
                ("worker_stale", w["worker_id"], [str(f)], len(late))
            assert body["key"] == f"{w['worker_id']}@{w['started_at']}" and body["host"] == w["host"]
            assert body["links"]["ingest"] == "http://rollscope.test/ingest"
            with engine.connect() as conn:
                (d,) = conn.execute(sa.select(models.AlertDelivery.__table__)).all()
            assert (d.kind, d.attempts, d.last_error) == ("worker_stale", 1, None) and d.delivered_at is not None

            # restarted, the worker replaces the dead one (gone now) and reads what waited
            proc = _worker(db_url, spool)
            assert wait_for(lambda: _read_all(engine, f), 30)
            states = {x["worker_id"]: x["state"] for x in _status(base)["workers"]}
            assert states[w["worker_id"]] == "gone" and "live" in states.values()
            assert _status(base)["sources"][0]["bytes_behind"] == 0
            assert http.get(f"{base}/runs/live.json").json()["ingestion"] is None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        receiver.close()
        engine.dispose()


@contextlib.contextmanager
def _live_worker(db_url: str, tmp_path: Path):
    """A spool with one rollout of run `live`, a real worker that has read it and beats, and a
    served app: yields (spool, file, engine, worker process, base URL); the worker is killed after."""
    spool = tmp_path / "spool"
    spool.mkdir()
    f = write_jsonl(spool / "a.jsonl", [rollout("a", run="live")])
    engine = make_engine(db_url)
    proc = _worker(db_url, spool)
    app = create_app(Settings(database_url=db_url))
    try:
        with serving(app) as base:
            assert wait_for(lambda: _read_all(engine, f) and _status(base)["workers"]
                            and _one_worker(base)["state"] == "live", 30)
            yield spool, f, engine, proc, base
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        engine.dispose()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_spool_folder_deleted_under_a_live_worker_is_named_on_ingest(db_url, tmp_path):
    with _live_worker(db_url, tmp_path) as (spool, _f, _engine, _proc, base):
        assert _one_worker(base)["missing_spools"] == []
        spool.rename(tmp_path / "moved")  # deleted or unmounted under the worker
        assert _one_worker(base)["missing_spools"] == [str(spool)]
        page = http.get(f"{base}/ingest").text
        assert f"{spool} does not exist (deleted or unmounted?)" in page
        (tmp_path / "moved").rename(spool)
        assert _one_worker(base)["missing_spools"] == []


def test_a_clean_stop_marks_the_worker_gone_not_stale(db_url, tmp_path):
    with _live_worker(db_url, tmp_path) as (spool, f, engine, proc, base):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        w = _one_worker(base)
        assert w["state"] == "gone" and w["stopped_at"] is not None
        with f.open("ab") as out:
            out.write(write_line(rollout("b", run="live")))
        (src,) = _status(base)["sources"]
        assert src["holder_state"] == "gone" and "gone" in src["holder_problem"]
        assert src["bytes_behind"] == len(write_line(rollout("b", run="live")))
        metrics = http.get(f"{base}/metrics").text
        assert "rollscope_worker_last_heartbeat_timestamp_seconds{" not in metrics  # gone: not alerted on
        settings = Settings(database_url=db_url, alerts={"webhook_url": "http://127.0.0.1:9/never"})
        assert watch_once(engine, settings) == 0  # gone is not stale: no alert
        (stopped,) = http.get(f"{base}/runs/live.json").json()["ingestion"]["stopped"]
        assert stopped["worker_state"] == "gone"


def _unix(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def quick_retries(monkeypatch):
    monkeypatch.setattr(webhook, "BACKOFF", (0.01, 0.01))


def _deliveries(engine) -> list:
    with engine.connect() as conn:
        return conn.execute(sa.select(models.AlertDelivery.__table__).order_by("pk")).all()


def test_a_webhook_that_hangs_or_refuses_never_holds_up_its_caller(db_url, engine, quick_retries):
    """`deliver` returns before the receiver answers, while an ingest transaction holds the write
    lock, and with nothing listening; each alert is recorded once, its tries and last error kept."""
    hanging = Receiver(hang=True)
    try:
        s = Settings(database_url=db_url, alerts={"webhook_url": hanging.url, "webhook_timeout_seconds": 0.5})
        # an ingest transaction holds the write lock (SQLite) while it calls deliver
        with engine.begin() as conn:
            conn.execute(sa.insert(models.Run.__table__).values(id="held", type="train", created_at=models.utcnow()))
            done: list[bool] = []
            t = threading.Thread(target=lambda: done.append(webhook.deliver(engine, s, "step", "held/1", {"n": 1})))
            t.start()
            t.join(10)
            assert done == [True]  # returned with the lock still held by this transaction
        assert wait_for(lambda: hanging.bodies, 10)
        assert hanging.answered == 0  # the receiver has not answered: the caller never waited for it
        assert webhook.deliver(engine, s, "step", "held/1", {"n": 2}) is False  # handed over already: once
        hanging.release.set()
        assert webhook.idle(15)
        assert webhook.deliver(engine, s, "step", "held/1", {"n": 3}) is False  # recorded: once
        assert {b["n"] for b in hanging.bodies} == {1}  # tried again after a timeout, never another payload
        refused = Settings(database_url=db_url, alerts={"webhook_url": "http://127.0.0.1:9/closed",
                                                        "webhook_timeout_seconds": 0.5})
        assert webhook.deliver(engine, refused, "step", "closed/1", {}) is True
        silent = Settings(database_url=db_url)  # no webhook: recorded only
        assert webhook.deliver(engine, silent, "step", "quiet/1", {}) is True
        assert webhook.idle(15)
        by_key = {d.key: d for d in _deliveries(engine)}
        assert set(by_key) == {"held/1", "closed/1", "quiet/1"}
        assert by_key["closed/1"].attempts == webhook.TRIES and by_key["closed/1"].delivered_at is None
        assert "ConnectError" in by_key["closed/1"].last_error
        assert (by_key["quiet/1"].attempts, by_key["quiet/1"].delivered_at) == (0, None)
        assert 1 <= by_key["held/1"].attempts <= webhook.TRIES
    finally:
        hanging.close()


def test_a_file_the_server_cannot_see_is_measured_against_the_workers_last_size(client, engine, tmp_path):
    """The web host stats each spool file; one it cannot see (another host's disk: here the folder
    moved away) falls back to the last size a worker recorded, and says so."""
    from app.worker.heartbeat import Heartbeat
    from app.worker.run import run as run_worker

    spool = tmp_path / "spool"
    spool.mkdir()
    f = write_jsonl(spool / "a.jsonl", [rollout("a")])
    with f.open("ab") as out:
        out.write(b'{"schema": "rollscope/1", "id": "partial')  # a last line without its newline: behind
    run_worker(engine, [spool], once=True, log=lambda _m: None, torn_after=3600)
    assert Heartbeat(engine, [spool], interval=60, worker_id=lambda: "other-host:7:s7", files=list).beat()
    spool.rename(tmp_path / "elsewhere")
    (src,) = client.get("/api/v1/ingest/status").json()["sources"]
    assert (src["size_from"], src["bytes_behind"]) == ("worker", len(b'{"schema": "rollscope/1", "id": "partial'))
    assert (src["holder"], src["holder_state"], src["holder_problem"]) == ("other-host:7:s7", "live", None)
    assert "worker's size" in client.get("/ingest").text


def test_a_beat_gives_way_to_a_held_write_lock_within_its_interval(engine, tmp_path):
    """While another transaction holds the write lock (SQLite: an ingest chunk; Postgres: the
    heartbeat row), a beat waits at most its interval, skips, and is recorded by the next one."""
    from app.worker.heartbeat import H, Heartbeat

    hb = Heartbeat(engine, [tmp_path], interval=0.2, worker_id=lambda: "h:1:s1", files=list)
    assert hb.beat()
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.execute(sa.insert(models.Run.__table__).values(id="held", type="train", created_at=models.utcnow()))
        else:
            conn.execute(sa.select(H).where(H.c.pk == hb.pk).with_for_update())
        result: list[bool] = []
        t = threading.Thread(target=lambda: result.append(hb.beat()))
        t.start()
        t.join(20)
        assert result == [False]  # gave way: the holder of the lock (the worker's commit) was not kept waiting
    assert hb.beat()
