"""Load: many concurrent readers on the pages and /api/v1 while ingest writes, on SQLite and on
Postgres. Prints p50 / p99 latency and the error count per endpoint and overall.

The server is the real one (`rollscope serve --workers N` in a subprocess, over TCP); the data is
the demo run (`rollscope demo`), ingested before the readers start; during the measurement the
ingest worker (`rollscope worker`, another process) ingests a second demo run (run `live`, 1,920
rollouts) from its spool folder. Readers are threads with one httpx client each, cycling through:
the rollouts list page, a rollout page, the run page (both charts), the API's rollouts list, one
rollout and the run metrics, first for `--warmup` seconds unmeasured (every server worker warms its
pools and caches), then for `--seconds` measured while the worker ingests. Any status other than
200 or a transport error counts as an error, in both phases. Goal (issue 12): zero errors, p99
under 1 s.

The machine is shared, so the load average (`os.getloadavg()`) is printed beside the figures,
before and after each measurement, and so is the server's CPU time per request (its processes'
user + system time from /proc, Linux), which the machine's other load inflates far less than it
inflates latency.

Run: `.venv/bin/python bench/load.py [--seconds 20] [--warmup 5] [--readers 16] [--workers 2]
[--db sqlite,postgres]`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
RS = str(Path(sys.executable).with_name("rollscope"))
PG = os.environ.get("ROLLSCOPE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
PORT = 8123


def _run(args: list[str], env: dict) -> None:
    subprocess.run(args, env=env, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _pg_database() -> tuple[str, callable]:
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(PG)
    name = f"rs_load_{uuid.uuid4().hex[:10]}"

    def admin():
        return psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, password=u.password,
                               dbname=u.database or "postgres", autocommit=True)

    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop():
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return u.set(database=name).render_as_string(hide_password=False), drop


def _percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of `pid` and its children, from /proc (Linux): what the server
    spent, which the machine's other load does not inflate the way it inflates latency."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def _as_run(src: Path, dst: Path, run: str) -> None:
    """`src` (native JSONL) with every rollout moved to `run`."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with src.open() as f, dst.open("w") as out:
        for line in f:
            rec = json.loads(line)
            rec["run"] = {**rec.get("run", {}), "id": run}
            out.write(json.dumps(rec) + "\n")


def measure(db: str, url: str, tmp: Path, *, seconds: float, warmup: float, readers: int, workers: int) -> None:
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}
    base_file, live_file = tmp / "base.jsonl", tmp / "live.jsonl"
    if not base_file.exists():
        _run([RS, "demo", "--out", str(base_file), "--steps", "10"], env)
        _run([RS, "demo", "--out", str(live_file), "--steps", "30", "--seed", "1"], env)
    spool = tmp / f"spool-{db}"
    t0 = time.perf_counter()
    _run([RS, "ingest", str(base_file), "--tokenizer", str(base_file.with_suffix(".tokenizer.json"))], env)
    print(f"{db}: base run ingested in {time.perf_counter() - t0:.1f} s")
    server = subprocess.Popen([RS, "serve", "--port", str(PORT), "--workers", str(workers)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{PORT}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            raise SystemExit(f"{db}: server did not become ready")
        rows = httpx.get(f"{base}/api/v1/runs/demo-grpo/rollouts", params={"limit": 200, "fields": "rollout_id"}).json()
        ids = [r["rollout_id"] for r in rows["items"]]
        endpoints = {
            "page: rollouts list": lambda i: "/runs/demo-grpo/rollouts",
            "page: rollout": lambda i: f"/runs/demo-grpo/rollouts/{ids[i % len(ids)]}",
            "page: run + charts": lambda i: "/runs/demo-grpo",
            "api: rollouts list": lambda i: f"/api/v1/runs/demo-grpo/rollouts?limit=100&step={i % 10}",
            "api: rollout": lambda i: f"/api/v1/runs/demo-grpo/rollouts/{ids[(i * 7) % len(ids)]}",
            "api: metrics": lambda i: "/api/v1/runs/demo-grpo/metrics",
        }
        names = list(endpoints)
        lat: dict[str, list[float]] = defaultdict(list)
        errors: dict[str, int] = defaultdict(int)
        lock = threading.Lock()

        def reader(k: int, stop: float, record: bool) -> None:
            with httpx.Client(base_url=base, timeout=30) as c:
                i = k
                while time.perf_counter() < stop:
                    name = names[i % len(names)]
                    start = time.perf_counter()
                    try:
                        ok = c.get(endpoints[name](i)).status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    took = time.perf_counter() - start
                    with lock:
                        if record:
                            lat[name].append(took)
                        if not ok:
                            errors[name] += 1
                    i += 1

        def readers_for(duration: float, record: bool) -> None:
            stop = time.perf_counter() + duration
            threads = [threading.Thread(target=reader, args=(k, stop, record)) for k in range(readers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        # Every server worker's connection pool, statement caches and lazily imported modules
        # warm up before the measurement (errors count from here on): a steady state, not a start.
        readers_for(warmup, record=False)
        print(f"{db}: before the load: {_load()}")
        _as_run(live_file, spool / "live" / "demo.native.jsonl", "live")
        writer = subprocess.Popen([RS, "worker", "--spool", str(spool), "--poll", "0.2"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cpu0 = _cpu_seconds(server.pid)
        readers_for(seconds, record=True)
        server_cpu = _cpu_seconds(server.pid) - cpu0
        live = httpx.get(f"{base}/api/v1/runs/live").json()["totals"]["rollouts"]
        after = _load()
        writer.terminate()
        writer.wait(30)
        print(f"{db}: {readers} readers for {seconds:.0f} s, {workers} server workers; the worker ingesting a "
              f"1,920-rollout run had stored {live} of them by the end; {after}")
        print(f"  {'endpoint':24} {'requests':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6}")
        everything = []
        for name in names:
            v = lat[name]
            everything += v
            print(f"  {name:24} {len(v):8d} {statistics.median(v) * 1000:8.1f} {_percentile(v, 99) * 1000:8.1f} "
                  f"{errors[name]:6d}")
        total_errors = sum(errors.values())
        print(f"  {'all':24} {len(everything):8d} {statistics.median(everything) * 1000:8.1f} "
              f"{_percentile(everything, 99) * 1000:8.1f} {total_errors:6d}")
        print(f"{db}: p99 {_percentile(everything, 99) * 1000:.0f} ms, {total_errors} errors, "
              f"{len(everything) / seconds:.0f} requests/s, server CPU {server_cpu / len(everything) * 1000:.1f} ms "
              f"a request; {after}")
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=5, help="seconds of unmeasured reads first")
    ap.add_argument("--readers", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--db", default="sqlite,postgres")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rollscope-load-") as d:
        tmp = Path(d)
        for db in args.db.split(","):
            if db == "sqlite":
                measure(db, f"sqlite:///{tmp / 'load.db'}", tmp, seconds=args.seconds, warmup=args.warmup,
                        readers=args.readers,
                        workers=args.workers)
            elif db == "postgres":
                url, drop = _pg_database()
                try:
                    measure(db, url, tmp, seconds=args.seconds, warmup=args.warmup, readers=args.readers,
                            workers=args.workers)
                finally:
                    drop()


if __name__ == "__main__":
    main()
