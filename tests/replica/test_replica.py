"""Read replicas on a real streaming replica (issue 25, "Read replicas"; docs/deploy.md).

The module builds its own pair of Postgres servers on this machine (tests/replica/cluster.py): a
primary (`initdb` in a temporary folder, `wal_level=replica`, replication allowed from 127.0.0.1)
and a replica cloned from it with `pg_basebackup -R`, each on a free port, both stopped and removed
at the end even when a test fails. The app runs against them as in production: `create_app` with
`ROLLSCOPE_DB__READ_URL`, migrated on the primary (the replica replays the migrations), over the
real HTTP app. The tests check that reads come from the replica (its `pg_stat_activity`, and a page
only the replica can still show), that a client never reads a page older than its own write even
while the replica's replay is paused, that a replica lagging past the limit is skipped, and that
pages keep being served from the primary while the replica is stopped, and from the replica again
after it comes back.

Skipped, saying why, where the Postgres server programs (`initdb`, `pg_ctl`, `pg_basebackup`)
are not installed.
"""
from __future__ import annotations

import html
import re
import time

import pytest
from fastapi.testclient import TestClient

from app import auth
from app.config import Settings
from app.db.engine import make_engine
from app.db.replica import APPLICATION_NAME, ReadRouting, format_lsn, parse_lsn, replica_url
from app.main import create_app
from ingest.formats.native import write_line
from rollscope.client import Client
from tests.conftest import PG_URL
from tests.helpers import rollout, serving
from tests.replica.cluster import DB, Cluster, streaming_pair, unavailable

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def pair():
    """(primary, replica): a primary with an empty database `rollscope`, and its streaming replica."""
    why = unavailable()
    if why:
        pytest.skip(why)
    with streaming_pair() as (primary, replica):
        yield primary, replica


def _wait(predicate, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _replayed(replica: Cluster, lsn: int) -> bool:
    return int(replica.one("SELECT pg_last_wal_replay_lsn() - '0/0'::pg_lsn")) >= lsn


def _app(primary: Cluster, replica: Cluster, **db):
    settings = Settings(db={"url": primary.url(), "read_url": replica.url(), **db})
    return create_app(settings)


def _dispose(app) -> None:
    app.state.engine.dispose()
    app.state.read_routing.replica.dispose()


def _ingest(client: TestClient, token: str, run: str, rid: str) -> int:
    body = write_line(rollout(rid, run=run, step=0))
    r = client.post(f"/api/v1/ingest?run={run}", content=body, headers={"Authorization": f"Bearer {token}",
                                                                       "Content-Type": "application/x-ndjson"})
    assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
    return parse_lsn(r.headers["Rollscope-LSN"])


def _labels(client: TestClient, run: str, rid: str, **kw) -> list[str]:
    """The labels the rollouts list page shows on `rid` (a page read)."""
    r = client.get(f"/runs/{run}/rollouts.json", **kw)
    assert r.status_code == 200, r.text
    row = next(x for x in r.json()["rollouts"] if x["rollout_id"] == rid)
    return row["labels"]


def test_reads_go_to_the_replica_but_never_behind_the_clients_own_write(pair):
    primary, replica = pair
    app = _app(primary, replica, read_max_lag_seconds=60, read_retry_seconds=1)
    routing = app.state.read_routing
    token, _ = auth.issue(app.state.engine, "write", "alice")
    try:
        with TestClient(app) as alice, TestClient(app) as bob:
            lsn = _ingest(alice, token, "rw", "x")  # a write: on the primary (the replica refuses writes)
            assert alice.cookies.get("rollscope_lsn") == format_lsn(lsn)
            _wait(lambda: _replayed(replica, lsn), what="the replica to replay the ingest")
            time.sleep(routing.probe_seconds)  # the last check of the replica may predate it

            before = dict(routing.reads)
            assert _labels(bob, "rw", "x") == [] and _labels(alice, "rw", "x") == []
            assert routing.reads["replica"] == before["replica"] + 2, routing.reads
            assert replica.one("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND datname = %s",
                               APPLICATION_NAME, DB) >= 1

            # the replica stops replaying: whatever is written now exists only on the primary
            replica.one("SELECT pg_wal_replay_pause()")
            _wait(lambda: replica.one("SELECT pg_get_wal_replay_pause_state()") == "paused", what="replay paused")
            r = alice.put("/api/v1/runs/rw/rollouts/x/labels/reward-hacking",
                          headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 204 and parse_lsn(r.headers["Rollscope-LSN"]) > lsn
            written = parse_lsn(r.headers["Rollscope-LSN"])
            assert alice.cookies.get("rollscope_lsn") == format_lsn(written)
            assert not _replayed(replica, written)

            time.sleep(routing.probe_seconds)
            before = dict(routing.reads)
            # alice (her cookie) never sees the page from before her write: the primary serves her
            for _ in range(3):
                assert _labels(alice, "rw", "x") == ["reward-hacking"]
                got = alice.get("/api/v1/runs/rw/rollouts/x/labels").json()["items"]
                assert [x["label"] for x in got] == ["reward-hacking"]
            assert routing.reads["primary"] == before["primary"] + 6
            # bob has written nothing: the replica (within the lag allowed) may serve him, and does
            assert _labels(bob, "rw", "x") == []
            assert routing.reads["replica"] == before["replica"] + 1
            # the header alone carries the write too (an API client without cookies)
            with TestClient(app) as carol:
                assert _labels(carol, "rw", "x", headers={"Rollscope-LSN": format_lsn(written)}) == ["reward-hacking"]
                assert _labels(carol, "rw", "x", headers={"Rollscope-LSN": "not-an-lsn"}) == []
            ready = bob.get("/readyz").json()
            assert ready["status"] == "ready" and ready["replica"] == "ok" and ready["replica_lag_seconds"] > 0

            # a server allowing 0.2 s of lag skips the paused replica for everyone
            strict = _app(primary, replica, read_max_lag_seconds=0.2)
            try:
                with TestClient(strict) as dave:
                    time.sleep(0.3)
                    assert _labels(dave, "rw", "x") == ["reward-hacking"]
                    ready = dave.get("/readyz").json()
                    assert ready["replica"] == "lagging" and ready["replica_lag_seconds"] > 0.2, ready
                    assert strict.state.read_routing.reads == {"replica": 0, "primary": 1}
            finally:
                _dispose(strict)

            # the Python client over real HTTP (uvicorn): its httpx client keeps the cookie
            served = _app(primary, replica, read_max_lag_seconds=60)
            with serving(served) as url, Client(url, token) as api, Client(url) as other:
                api.label("rw", "x", "seen-by-client")
                assert [r["rollout_id"] for r in api.rollouts("rw", label="seen-by-client")] == ["x"]
                assert list(other.rollouts("rw", label="seen-by-client")) == []  # the paused replica
                assert served.state.read_routing.reads == {"primary": 1, "replica": 1}
            served.state.read_routing.replica.dispose()

            replica.one("SELECT pg_wal_replay_resume()")
            last = int(primary.one("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"))
            _wait(lambda: _replayed(replica, last), what="the replica to replay the labels")
            time.sleep(routing.probe_seconds)
            before = dict(routing.reads)
            both = ["reward-hacking", "seen-by-client"]
            assert _labels(alice, "rw", "x") == both and _labels(bob, "rw", "x") == both
            assert routing.reads["replica"] == before["replica"] + 2, "caught up: the replica serves alice again"
    finally:
        if replica.one("SELECT pg_is_wal_replay_paused()"):
            replica.one("SELECT pg_wal_replay_resume()")
        _dispose(app)


def test_pages_are_served_from_the_primary_while_the_replica_is_gone(pair):
    primary, replica = pair
    app = _app(primary, replica, read_retry_seconds=1)
    routing = app.state.read_routing
    token, _ = auth.issue(app.state.engine, "write", "bob")
    try:
        with TestClient(app) as writer, TestClient(app) as reader:
            lsn = _ingest(writer, token, "gone", "y")
            _wait(lambda: _replayed(replica, lsn), what="the replica to replay the ingest")
            time.sleep(routing.probe_seconds)
            assert reader.get("/runs/gone/rollouts.json").status_code == 200
            assert routing.reads["replica"] >= 1

            replica.stop()
            before = dict(routing.reads)
            pages = ("/runs/gone/rollouts.json", "/runs/gone", "/api/v1/runs/gone/rollouts", "/runs/gone/rollouts/y")
            for path in pages:
                r = reader.get(path)
                assert r.status_code == 200, (path, r.text)
            assert routing.reads["replica"] == before["replica"], "no read served by a stopped replica"
            assert routing.reads["primary"] == before["primary"] + 4
            ready = reader.get("/readyz")
            assert ready.status_code == 200 and ready.json()["replica"] == "down", ready.json()
            assert ready.json()["replica_detail"]

            replica.start()
            _wait(lambda: replica.one("SELECT 1") == 1, what="the replica to accept connections")
            time.sleep(routing.retry_seconds)  # the replica rests out its retry interval
            deadline = time.monotonic() + 10
            while routing.reads["replica"] == before["replica"]:
                assert time.monotonic() < deadline, f"the replica was not used again: {routing.check(fresh=True)}"
                assert reader.get("/runs/gone/rollouts.json").status_code == 200
                time.sleep(0.1)
            assert reader.get("/readyz").json()["replica"] == "ok"
    finally:
        _dispose(app)


LINK = re.compile(r'''(?:href|hx-get|data-href|data-url)="(/[^"#]*)"''')
NOT_READS = ("/static/", "/media/", "/events", "/api/docs")  # files, endless event streams


def test_every_page_a_run_links_to_reads_from_the_replica(pair):
    """No page or API read does anything a hot standby refuses (a write, a lock, a sequence): the
    run's pages and every page they link to answer 200, all served by the replica."""
    primary, replica = pair
    app = _app(primary, replica)
    routing = app.state.read_routing
    token, _ = auth.issue(app.state.engine, "write", "carol")
    rs = [rollout(f"s{s}-g{g}-r{i}", run="sweep", step=s, group=f"s{s}-g{g}", index=i, reward=float(i % 2),
                  ending="error" if i == 2 else "submitted") for s in (0, 1) for g in (0, 1) for i in range(3)]
    try:
        with TestClient(app) as writer, TestClient(app) as reader:
            r = writer.post("/api/v1/ingest", content=b"".join(write_line(x) for x in rs),
                            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"})
            assert r.status_code == 200 and r.json()["accepted"] == len(rs), r.text
            lsn = parse_lsn(r.headers["Rollscope-LSN"])
            _wait(lambda: _replayed(replica, lsn), what="the replica to replay the ingest")
            time.sleep(routing.probe_seconds)
            before = dict(routing.reads)
            seen, todo = set(), ["/runs", "/runs/sweep", "/runs/sweep/rollouts", "/runs/sweep/rollouts/s1-g0-r2",
                                 "/runs/sweep/groups/s1-g0", "/runs/sweep/steps/1", "/search?q=2%2B2",
                                 "/runs/sweep/failures", "/quarantine", "/api/v1/runs/sweep/steps",
                                 "/api/v1/runs/sweep/rollouts?limit=5", "/api/v1/runs/sweep/export?format=native"]
            for page in list(todo[:6]):  # one level of links from the main pages
                todo += [html.unescape(u) for u in LINK.findall(reader.get(page).text)]
            for url in todo:
                if url in seen or any(x in url for x in NOT_READS):
                    continue
                seen.add(url)
                r = reader.get(url)
                assert r.status_code == 200, (url, r.status_code, r.text[:500])
            assert len(seen) >= 30, sorted(seen)
            assert routing.reads["primary"] == before["primary"], "every read on the replica"
            assert routing.reads["replica"] >= before["replica"] + len(seen)
    finally:
        _dispose(app)


def test_a_standby_of_another_primary_serves_no_read(pair):
    """The replica URL names a real, streaming standby, but of the pair's primary, not of the
    primary the app writes to (this machine's Postgres): its pages would be another database's, so
    it is down, saying why, and every read goes to the primary. Its own primary it serves."""
    primary, replica = pair
    ours = make_engine(PG_URL)
    theirs = make_engine(replica_url(replica.url()))
    own = make_engine(primary.url())
    try:
        routing = ReadRouting(ours, theirs, max_lag_seconds=30, retry_seconds=60)
        check = routing.check(fresh=True)
        assert check.state == "down", check
        assert "not a standby of this primary" in check.detail and "system identifier" in check.detail
        assert routing.engine_for() is ours
        assert ReadRouting(own, theirs, max_lag_seconds=30, retry_seconds=60).check(fresh=True).state == "ok"
    finally:
        for e in (ours, theirs, own):
            e.dispose()


def test_lsn_text_round_trip_and_settings():
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert format_lsn(parse_lsn("16/B374D848")) == "16/B374D848"
    assert parse_lsn("0/0") == 0 and parse_lsn(" 0/3000060 ") == 0x3000060
    for bad in (None, "", "16", "16/", "x/1", "1/2/3", "123456789/0", "0/3000060; x"):
        assert parse_lsn(bad) is None, bad
    with pytest.raises(ValueError, match="READ_URL needs a Postgres primary"):
        Settings(db={"url": "sqlite:///x.db", "read_url": "postgresql://h/db"})
    with pytest.raises(ValueError, match="postgresql"):
        Settings(db={"url": "postgresql://h/db", "read_url": "sqlite:///x.db"})
    assert Settings(db={"url": "postgresql://h/db", "read_url": ""}).db.read_url is None
