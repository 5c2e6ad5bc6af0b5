"""The live pages' change events (`GET /runs/{run}/events`, `/ingest/events`; app/routes/events.py,
app/live.py) over real HTTP from a real uvicorn, rollouts ingested through the real store: one
event per change and only heartbeats while idle, one database watcher per run shared by every
listener, a catch-up event for a stale `since=`, 404 for an unknown run, 401 when reading is locked,
and a real `rollscope serve` that Ctrl-C stops with a stream open."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from app import auth
from app.config import Settings
from app.db.engine import make_engine
from app.main import create_app
from tests.helpers import http, ingest, rollout, serving, write_jsonl

FAST = {"web": {"live_poll_seconds": 0.05, "live_heartbeat_seconds": 0.2}}


class Listener:
    """Reads one event stream in a thread: `events` (parsed `event:`/`id:`/`data:` blocks) and
    `comments` (heartbeats), as they arrive."""

    def __init__(self, url: str, **kw):
        self.events: list[dict] = []
        self.comments: list[str] = []
        self.status: int | None = None
        self.broken: Exception | None = None
        self.ready = threading.Event()
        self._stop = False
        self.thread = threading.Thread(target=self._run, args=(url, kw), daemon=True)
        self.thread.start()
        assert self.ready.wait(10), "the stream did not open"

    def _run(self, url, kw):
        try:
            self._read(url, kw)
        except httpx.HTTPError as exc:  # the server went away mid-stream
            self.broken = exc
        finally:
            self.ready.set()

    def _read(self, url, kw):
        block: dict = {}
        with httpx.stream("GET", url, timeout=30, **kw) as r:
            self.status, self.content_type = r.status_code, r.headers.get("content-type", "")
            self.ready.set()
            for line in r.iter_lines():
                if self._stop:
                    return
                if line.startswith(":"):
                    self.comments.append(line)
                elif line == "":
                    if "data" in block:
                        self.events.append({**block, "data": json.loads(block["data"])})
                    block = {}
                else:
                    k, _, v = line.partition(":")
                    block[k] = v.lstrip(" ")

    def close(self):
        self._stop = True

    def wait(self, n: int, timeout: float = 10) -> list[dict]:
        deadline = time.monotonic() + timeout
        while len(self.events) < n:
            assert time.monotonic() < deadline, f"{len(self.events)} events, waited for {n}"
            time.sleep(0.02)
        return self.events


@contextmanager
def live_app(db_url, **settings):
    app = create_app(Settings(database_url=db_url, **{**FAST, **settings}))
    with serving(app) as base:
        yield app, base


def fresh(url: str, template: Path):
    """A writer engine on a new SQLite file at the latest schema (a copy of the migrated `template`)."""
    shutil.copyfile(template, make_url(url).database)
    return make_engine(url, writer=True)


def add(engine, tmp_path: Path, name: str, step: int, n: int, run: str = "live") -> None:
    assert ingest(engine, write_jsonl(tmp_path / f"{name}.jsonl",
                                      [rollout(f"{name}-{i}", run=run, step=step) for i in range(n)])).ok


def test_one_event_per_change_and_only_heartbeats_while_idle(db_url, engine, tmp_path):
    add(engine, tmp_path, "a", 0, 2)
    with live_app(db_url) as (app, base):
        page_version = http.get(f"{base}/runs/live.json").json()["version"]
        s = Listener(f"{base}/runs/live/events", params={"since": page_version})
        assert s.status == 200 and s.content_type.startswith("text/event-stream")
        time.sleep(0.6)  # idle: heartbeats, no event
        assert s.events == [] and len(s.comments) >= 2
        add(engine, tmp_path, "b", 1, 3)
        ev = s.wait(1)[0]
        assert ev["event"] == "run"
        assert ev["data"]["rollouts"] == 5 and ev["data"]["steps"] == 2
        assert ev["data"]["new_steps"] == [1] and ev["data"]["changed_steps"] == [1]
        assert {"endings", "reward", "task_heatmap"} <= set(ev["data"]["charts"])
        new_version = http.get(f"{base}/runs/live.json").json()["version"]
        assert ev["id"] == ev["data"]["version"] == new_version  # the version the run page renders
        time.sleep(0.6)  # idle again: still exactly one event
        assert len(s.events) == 1
        add(engine, tmp_path, "c", 0, 1)  # an old step changes
        ev = s.wait(2)[1]["data"]
        assert ev["new_steps"] == [] and ev["changed_steps"] == [0] and ev["rollouts"] == 6
        time.sleep(0.4)
        assert len(s.events) == 2
        s.close()


def test_one_watcher_per_run_shared_by_every_listener(tmp_path, _sqlite_template):
    url = f"sqlite:///{tmp_path / 'live.db'}"
    engine = fresh(url, _sqlite_template)
    with live_app(url, web={"live_poll_seconds": 0.1, "live_heartbeat_seconds": 0.2}) as (app, base):
        add(engine, tmp_path, "a", 0, 1)
        add(engine, tmp_path, "b", 0, 1, run="other")
        listeners = [Listener(f"{base}/runs/live/events") for _ in range(5)]
        other = Listener(f"{base}/runs/other/events")
        hub = app.state.live
        assert set(hub.watchers) == {("run", "live"), ("run", "other")}  # one each, whatever the listeners
        watcher, t0 = hub.watchers[("run", "live")], time.monotonic()
        p0 = watcher.polls
        time.sleep(1.0)
        polls = watcher.polls - p0
        assert polls <= (time.monotonic() - t0) / 0.1 + 1, polls  # at most one read per 0.1 s for five listeners
        add(engine, tmp_path, "c", 1, 1)
        for s in listeners:
            assert s.wait(1)[0]["data"]["new_steps"] == [1]
        time.sleep(0.3)
        assert other.events == []  # another run's change is not this run's
        for s in [*listeners, other]:
            s.close()
        # the streams end when their clients go: the watchers stop with the last listener
        deadline = time.monotonic() + 10
        while hub.watchers:
            assert time.monotonic() < deadline, hub.watchers
            add(engine, tmp_path, f"d{time.monotonic_ns()}", 2, 1)  # a write makes each stream try to send
            add(engine, tmp_path, f"e{time.monotonic_ns()}", 2, 1, run="other")
            time.sleep(0.3)
    engine.dispose()


def test_a_stale_since_gets_one_catch_up_event_at_once(tmp_path, _sqlite_template):
    url = f"sqlite:///{tmp_path / 'live.db'}"
    engine = fresh(url, _sqlite_template)
    add(engine, tmp_path, "a", 0, 1)
    with live_app(url) as (app, base):
        old = http.get(f"{base}/runs/live.json").json()["version"]
        add(engine, tmp_path, "b", 1, 1)
        s = Listener(f"{base}/runs/live/events", params={"since": old})
        ev = s.wait(1)[0]["data"]
        assert ev["catch_up"] and ev["rollouts"] == 2 and "reward" in ev["charts"]
        again = Listener(f"{base}/runs/live/events", headers={"Last-Event-ID": ev["version"]})  # a reconnect
        time.sleep(0.4)
        assert again.events == [] and len(s.events) == 1
        s.close()
        again.close()
    engine.dispose()


def test_unknown_run_is_404_and_a_locked_server_wants_a_token(tmp_path, _sqlite_template):
    url = f"sqlite:///{tmp_path / 'live.db'}"
    engine = fresh(url, _sqlite_template)
    add(engine, tmp_path, "a", 0, 1)
    token, _ = auth.issue(engine, "read")
    with live_app(url, require_read_token=True) as (app, base):
        for path in ("/runs/live/events", "/ingest/events", "/runs/live/live/run", "/ingest/live"):
            r = http.get(base + path)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", path
        r = http.get(f"{base}/runs/nope/events", headers={"Authorization": f"Bearer {token}",
                                                                  "Accept": "application/json"})
        assert r.status_code == 404 and "nope" in r.json()["error"]["message"]
        s = Listener(f"{base}/runs/live/events?token={token}")
        assert s.status == 200
        s.close()
        r = http.get(f"{base}/runs/live/live/run", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and "run-steps" in r.json()["fragments"]
    engine.dispose()


def test_ingest_events_follow_the_ingest_status(tmp_path, _sqlite_template):
    url = f"sqlite:///{tmp_path / 'live.db'}"
    engine = fresh(url, _sqlite_template)
    with live_app(url) as (app, base):
        s = Listener(f"{base}/ingest/events")
        time.sleep(0.4)
        assert s.events == []
        add(engine, tmp_path, "a", 0, 2)
        ev = s.wait(1)[0]
        assert ev["event"] == "ingest" and ev["data"]["version"]
        frag = http.get(f"{base}/ingest/live").json()["fragments"]["ingest-status"]
        assert frag.startswith('<div id="ingest-status">') and "2 rollouts stored" in frag
        time.sleep(0.4)
        assert len(s.events) == 1
        s.close()
    engine.dispose()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT")
def test_ctrl_c_stops_rollscope_serve_with_a_stream_open(tmp_path, _sqlite_template):
    url = f"sqlite:///{tmp_path / 'live.db'}"
    engine = fresh(url, _sqlite_template)
    add(engine, tmp_path, "a", 0, 1)
    engine.dispose()
    port = _free_port()
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": url}
    rollscope = Path(sys.executable).with_name("rollscope")
    proc = subprocess.Popen([str(rollscope), "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    started = time.monotonic()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if http.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and proc.poll() is None, "the server did not start"
            time.sleep(0.1)
        s = Listener(f"http://127.0.0.1:{port}/runs/live/events")
        assert s.status == 200
        time.sleep(0.3)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        proc.wait(timeout=10)  # not hung on the open stream
        print(f"started in {t0 - started:.1f} s, stopped in {time.monotonic() - t0:.1f} s")
        assert proc.returncode == 0, proc.stderr.read().decode()[-2000:]
        s.thread.join(5)
        assert not s.thread.is_alive()  # and the stream ended with it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_deleted_run_says_gone_and_ends_its_stream(tmp_path, _sqlite_template):
    url = f"sqlite:///{tmp_path / 'live.db'}"
    engine = fresh(url, _sqlite_template)
    add(engine, tmp_path, "a", 0, 1)
    admin, _ = auth.issue(engine, "admin")
    with live_app(url) as (app, base):
        s = Listener(f"{base}/runs/live/events")
        time.sleep(0.2)
        assert http.delete(f"{base}/api/v1/runs/live", headers={"Authorization": f"Bearer {admin}"}).is_success
        assert s.wait(1)[0]["event"] == "gone"
        s.thread.join(5)
        assert not s.thread.is_alive()  # the server ended the stream
    engine.dispose()
