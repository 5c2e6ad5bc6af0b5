"""Read replicas, measured: what routing reads to a streaming replica costs a page, how long a
write takes to reach the replica, and what a replica that vanished costs (docs/deploy.md, "Read
replicas").

It builds a private Postgres primary and a `pg_basebackup -R` replica on this machine
(tests/replica/cluster.py; both removed afterwards), ingests `--rollouts` rollouts over HTTP, and
times through the real app (in-process, `fastapi.testclient`):

- `GET /runs/{run}/rollouts.json` on an app without a replica, on one whose replica serves it, and
  with a `Rollscope-LSN` ahead of the replica (sent to the primary): p50 / p95 over `--reads`;
- a label `PUT` without a replica and with one (its response stamped with the primary's LSN);
- one check of the replica (`ReadRouting.check`: a query on each server);
- replay delay: from a label's response to the replica having replayed its LSN;
- the first read after the replica is stopped (`pg_ctl stop -m immediate`), and reads while down.

Both servers share this machine's cores with the app, so a replica adds no capacity here: the
figures are the routing's cost, not its gain. The load average is printed beside them.

Run: `.venv/bin/python bench/replica.py [--rollouts 200] [--reads 300]`.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from app import auth  # noqa: E402
from app.config import Settings  # noqa: E402
from app.db.replica import parse_lsn  # noqa: E402
from app.main import create_app  # noqa: E402
from ingest.formats.native import write_line  # noqa: E402
from tests.helpers import rollout  # noqa: E402
from tests.replica.cluster import streaming_pair, unavailable  # noqa: E402

RUN = "bench"
REPLAYED = "SELECT pg_last_wal_replay_lsn() - '0/0'::pg_lsn"


def _figures(ms: list[float]) -> str:
    ms = sorted(ms)
    return f"p50 {statistics.median(ms):6.2f} ms, p95 {ms[int(0.95 * (len(ms) - 1))]:6.2f} ms"


def _timed(call, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        call()
        out.append((time.perf_counter() - t) * 1000)
    return out


def page(client, **kw):
    """A call that reads the rollouts list's JSON twin."""
    return lambda: _ok(client.get(f"/runs/{RUN}/rollouts.json", **kw))


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=200)
    ap.add_argument("--reads", type=int, default=300)
    args = ap.parse_args()
    why = unavailable()
    if why:
        sys.exit(f"bench/replica.py: {why}")
    with streaming_pair() as (primary, replica):
        only = create_app(Settings(db={"url": primary.url()}))
        both = create_app(Settings(db={"url": primary.url(), "read_url": replica.url()}))
        routing = both.state.read_routing
        try:
            token, _ = auth.issue(only.state.engine, "write", "bench")
            bearer = {"Authorization": f"Bearer {token}"}
            body = b"".join(write_line(rollout(f"x{i}", run=RUN, step=i % 10)) for i in range(args.rollouts))
            with TestClient(only) as plain, TestClient(both) as routed:
                r = plain.post(f"/api/v1/ingest?run={RUN}", content=body,
                               headers={**bearer, "Content-Type": "application/x-ndjson"})
                assert r.status_code == 200 and r.json()["accepted"] == args.rollouts, r.text
                time.sleep(1)  # replayed, and the replica checked again

                print(f"[replica] {args.rollouts} rollouts, {args.reads} reads per line; {_load()}")
                for _ in range(2):  # twice: the machine's other load moves each line
                    for client in (plain, routed):
                        _timed(page(client), 20)  # warm pools and caches
                    print(f"[replica] rollouts page, primary only:      {_figures(_timed(page(plain), args.reads))}")
                    print(f"[replica] rollouts page, replica serves:    {_figures(_timed(page(routed), args.reads))}")
                    ahead = page(routed, headers={"Rollscope-LSN": "FF/0"})
                    print(f"[replica] rollouts page, LSN ahead→primary: {_figures(_timed(ahead, args.reads))}")
                print(f"[replica] reads by engine: {routing.reads}")

                labels = iter(range(10**9))

                def put(client):
                    return lambda: _ok(client.put(f"/api/v1/runs/{RUN}/rollouts/x{next(labels) % args.rollouts}"
                                                  f"/labels/l{next(labels)}", headers=bearer), 204)

                print(f"[replica] label PUT, no replica:             {_figures(_timed(put(plain), 100))}")
                print(f"[replica] label PUT, LSN stamped:            {_figures(_timed(put(routed), 100))}")
                print(f"[replica] replica check (2 queries):         "
                      f"{_figures(_timed(lambda: routing.check(fresh=True), 50))}")
                delays = []
                with replica.connect() as watch:
                    for i in range(30):
                        r = routed.put(f"/api/v1/runs/{RUN}/rollouts/x{i}/labels/seen", headers=bearer)
                        lsn, t = parse_lsn(r.headers["Rollscope-LSN"]), time.perf_counter()
                        while int(watch.execute(REPLAYED).fetchone()[0]) < lsn:
                            time.sleep(0.0002)
                        delays.append((time.perf_counter() - t) * 1000)
                print(f"[replica] write's response → replayed:       {_figures(delays)}")
            with TestClient(both) as reader:  # no cookie: the replica serves it
                time.sleep(routing.probe_seconds)
                served = routing.reads["replica"]
                _timed(page(reader), 5)
                assert routing.reads["replica"] == served + 5, routing.reads
                replica.stop()
                first = _timed(page(reader), 1)[0]
                print(f"[replica] first read after the replica stopped: {first:.1f} ms (replica "
                      f"{routing.check().state}); reads while down: {_figures(_timed(page(reader), 100))}")
                print(f"[replica] {_load()}")
        finally:
            for app in (only, both):
                app.state.engine.dispose()
            routing.replica.dispose()


def _ok(r, status: int = 200):
    assert r.status_code == status, (r.status_code, r.text[:300])
    return r


if __name__ == "__main__":
    main()
