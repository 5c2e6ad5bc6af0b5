"""Training-step analytics at scale: a run of 1,000,000 rollouts over 1,000 steps, loaded directly
into SQLite and Postgres with bulk inserts made for this benchmark, then timed over real HTTP.

Prints p50 and p95 latency (ms) of every chart endpoint, the run page, the step page, the
rollouts list (first page, a filtered page, a page deep in the list, a sorted page), facet
counts, compare, and a search for a rare and a common word; and the server's peak RSS
(sampled from /proc while the requests run). Goals on this machine: p95 < 300 ms for charts and
the run page, < 200 ms for list pages and facets, < 500 ms for search; RSS < 300 MB.

The load bypasses the ingest pipeline on purpose (a million parsed traces would take an hour
and measure the parser): it writes the summary rows the pipeline would write (`rollout`, the
`finding` rows behind `flags`, the group checks' outcomes of every group, one `search_doc` per
rollout for its tool output), then builds the rollups with `app.store.rollups.rebuild`, the same
code ingest runs per batch.

At scale on Postgres (`--runs R`, R > 1): N rollouts over R runs are loaded with SQL alone by
bench/generate_pg.py (10 M in well under an hour, where this loader would take many), `--steps`
per run, and the pages of its first run are timed (compare: its first two runs; search: the
first run, and all runs). `--partitions P` partitions the tables first (app/db/partition.py,
`rollscope db partition`); 0 leaves them plain. The load's time, per stage, and the database's
size are printed.

Run: `.venv/bin/python bench/analytics.py [--rollouts N] [--steps S] [--db sqlite|postgres|both]
[--requests K] [--keep DIR] [--runs R] [--partitions P]`; at 10 M: `nice -n 19 .venv/bin/python
bench/analytics.py --rollouts 10000000 --db postgres --runs 50 --partitions 16`. Not part of the
test suite.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import charts  # noqa: E402
from app.db import models  # noqa: E402
from app.db.engine import make_engine  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.store import rollups  # noqa: E402

PG = os.environ.get("ROLLSCOPE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
PORT = int(os.environ.get("BENCH_PORT", "8133"))  # analytics: 81 + "33"
RUN = "bench-1m"
PAIRED: str | None = None  # a second run with rollouts, for the paired compare (`use_generated`)
PAIRED_REQUESTS = 3  # the paired compare reads every rollout of both runs: seconds a request at 10 M
ONLY: list[str] = []  # --only: labels to time (all when empty)
ENDINGS = ["submitted", "task_detected", "truncated", "length_cut", "error"]
DETAILS = {"error": ["sandbox_crash", "tool_server_timeout", "connection_reset"], "truncated": ["max_turns"],
           "length_cut": ["max_output_tokens"], "submitted": ["agent_completed"], "task_detected": ["env_done"]}
KINDS = ["token_drift", "empty_response", "unanswered_tool_call"]
COMMON, RARE = "result", "xylophone"
NO_ADVANTAGES = "no advantages recorded for this group's rollouts"
WORDS = [f"w{i:04d}" for i in range(3000)]

ROLLOUT_COLS = ["pk", "run_id", "rollout_id", "attempt", "step", "group_id", "group_index", "group_size", "episode_id",
                "agent", "task_key", "ending", "ending_detail", "reward", "reward_status", "stop_condition",
                "policy_version_min", "policy_version_max", "n_nodes", "n_turns", "n_tool_calls", "n_tokens",
                "n_trained_tokens", "n_branches", "flags", "content_hash", "source_format", "source_file",
                "source_line", "ingested_at", "n_response_tokens", "n_tool_errors", "model_latency", "tool_latency",
                "staleness", "mismatch_tokens", "mismatch_abs_sum", "mismatch_abs_max", "mismatch_out_of_range",
                "trainer_filtered"]


def generate(n: int, steps: int, seed: int = 0):
    """Yield chunks of (rollout rows, finding rows, search_doc rows, group finding rows) as tuples
    in column order. Group findings are what ingest's group checks store for these groups (none
    records advantages): `advantage_mismatch` skipped for every group, `errored_reward_in_baseline`
    skipped for a group with an errored member, `zero_variance_group` for a group whose members
    outside errors all have one reward."""
    rng = np.random.default_rng(seed)
    per_step = n // steps
    group_size = 8  # 1,000 rollouts per step = 125 groups of 8
    groups = max(1, per_step // group_size)
    now = datetime.now(UTC).isoformat()
    pk = 0
    incident = set(rng.choice(steps, size=max(1, steps // 50), replace=False).tolist())
    rare_at = set(rng.choice(n, size=10, replace=False).tolist())
    for s in range(steps):
        base = 0.2 + 0.55 * (1 - np.exp(-2.5 * s / max(1, steps - 1)))
        p_err = 0.03 + (0.3 if s in incident else 0.0)
        m = groups * group_size
        u = rng.random(m)
        ending = np.where(u < p_err, 4, np.where(u < p_err + 0.05, 2, np.where(u < p_err + 0.08, 3,
                          np.where(u < p_err + 0.2, 1, 0))))
        # half the tasks score pass/fail, half give partial credit
        reward = np.where(rng.random(m) < 0.5, (rng.random(m) < base).astype(float),
                          np.clip(rng.normal(base, 0.3, m), 0, 1).round(3))
        tokens = rng.integers(20, 2000, m)
        turns = rng.integers(1, 12, m)
        stale = rng.integers(0, 3, m)
        flagged = rng.random(m) < 0.05
        kind = rng.integers(0, len(KINDS), m)
        detail = rng.integers(0, 3, m)
        masked = rng.random(m) < 0.3
        tool_err = (rng.random(m) < 0.1).astype(int)
        mm_max = rng.random(m) * 0.5
        mm_out = rng.integers(0, 5, m)
        word_ix = rng.integers(0, len(WORDS), (m, 12))
        rows, finds, docs, group_finds = [], [], [], []
        for k in range(m):
            pk += 1
            g = k // group_size
            e = ENDINGS[int(ending[k])]
            flag = KINDS[int(kind[k])] if flagged[k] else None
            tok = int(tokens[k])
            trained = 0 if (e == "truncated" and masked[k]) else int(tok * 0.6)
            det = DETAILS[e][int(detail[k]) % len(DETAILS[e])]
            rows.append((pk, RUN, f"s{s:04d}-g{g:03d}-r{k % group_size:02d}", 0, s, f"s{s:04d}-g{g:03d}",
                         k % group_size, group_size, None, "solver", f"task-{(s * 7 + g * 13) % 500:04d}", e,
                         det, None if e == "error" else float(reward[k]),
                         "ok", None, s - int(stale[k]), s, 4, int(turns[k]), int(turns[k]) - 1, tok,
                         trained, 1, f'["{flag}"]' if flag else "[]", f"{pk:064x}", "rollscope/1", "bench.jsonl",
                         pk, now, int(tok * 0.6), int(tool_err[k]), float(turns[k] * 0.8),
                         float(turns[k] * 0.3), int(stale[k]), int(tok * 0.6), float(tok * 0.01),
                         float(mm_max[k]), int(mm_out[k]), None))
            if flag:
                finds.append((pk, flag, "warning", 1, None, f"{flag} (bench)", None))
            words = " ".join(WORDS[i] for i in word_ix[k])
            extra = f" {RARE}" if (pk - 1) in rare_at else ""
            docs.append((pk, pk, RUN, 3, "tool_output", "tool", False, f"tool {COMMON}: {words}{extra}"))
        for g in range(groups):
            members = rows[g * group_size:(g + 1) * group_size]
            gid = members[0][5]
            group_finds.append((RUN, gid, "advantage_mismatch", "skipped", NO_ADVANTAGES))
            if any(r[11] == "error" for r in members):
                group_finds.append((RUN, gid, "errored_reward_in_baseline", "skipped", NO_ADVANTAGES))
            kept = {r[13] for r in members if r[11] != "error" and r[13] is not None}
            if len(kept) == 1:
                n_kept = sum(1 for r in members if r[11] != "error" and r[13] is not None)
                group_finds.append((RUN, gid, "zero_variance_group", "warning",
                                    f"all {n_kept} members in the baseline have reward {kept.pop():g}: "
                                    "std 0, no learning signal"))
        yield rows, finds, docs, group_finds


def load_sqlite(engine, n: int, steps: int) -> None:
    raw = engine.raw_connection()
    cur = raw.driver_connection.cursor()
    cur.execute("INSERT INTO run (id, name, type, created_at, extra) VALUES (?, ?, 'train', ?, ?)",
                (RUN, "Benchmark run, 1M rollouts", datetime.now(UTC).isoformat(), '{"model": "bench"}'))
    ins = f"INSERT INTO rollout ({', '.join(ROLLOUT_COLS)}) VALUES ({', '.join('?' * len(ROLLOUT_COLS))})"
    for rows, finds, docs, group_finds in generate(n, steps):
        cur.execute("BEGIN")
        cur.executemany(ins, rows)
        cur.executemany("INSERT INTO finding (rollout_pk, kind, severity, node_idx, position, message, detail) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)", finds)
        cur.executemany("INSERT INTO finding (run_id, group_id, kind, severity, message) VALUES (?, ?, ?, ?, ?)",
                        group_finds)
        cur.executemany("INSERT INTO search_doc (pk, rollout_pk, run_id, node_idx, kind, role, truncated, text) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", docs)
        cur.execute("COMMIT")
    cur.execute("INSERT INTO search_fts(search_fts) VALUES ('rebuild')")  # the index, built once
    cur.execute("ANALYZE")
    raw.close()


def load_postgres(engine, n: int, steps: int) -> None:
    raw = engine.raw_connection()
    conn = raw.driver_connection
    conn.autocommit = True
    conn.execute("INSERT INTO run (id, name, type, created_at, extra) VALUES (%s, %s, 'train', now(), %s)",
                 (RUN, "Benchmark run, 1M rollouts", '{"model": "bench"}'))
    conn.execute("DROP INDEX ix_search_doc_tsv")
    for rows, finds, docs, group_finds in generate(n, steps):
        with conn.transaction():
            with conn.cursor().copy(f"COPY rollout ({', '.join(ROLLOUT_COLS)}) FROM STDIN") as cp:
                for r in rows:
                    cp.write_row(r)
            with conn.cursor().copy("COPY finding (rollout_pk, kind, severity, node_idx, position, message, detail) "
                                    "FROM STDIN") as cp:
                for r in finds:
                    cp.write_row(r)
            with conn.cursor().copy("COPY finding (run_id, group_id, kind, severity, message) FROM STDIN") as cp:
                for r in group_finds:
                    cp.write_row(r)
            with conn.cursor().copy("COPY search_doc (pk, rollout_pk, run_id, node_idx, kind, role, truncated, text) "
                                    "FROM STDIN") as cp:
                for r in docs:
                    cp.write_row(r)
    conn.execute("SELECT setval(pg_get_serial_sequence('rollout', 'pk'), (SELECT max(pk) FROM rollout))")
    conn.execute("SELECT setval(pg_get_serial_sequence('search_doc', 'pk'), (SELECT max(pk) FROM search_doc))")
    conn.execute("SET maintenance_work_mem = '256MB'")
    conn.execute("CREATE INDEX ix_search_doc_tsv ON search_doc USING gin (tsv)")
    conn.execute("VACUUM ANALYZE")
    raw.close()


class RSS:
    """Peak resident set size of a process, sampled every 50 ms."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak = max(self.peak, int(line.split()[1]) * 1024)
            except OSError:
                return
            time.sleep(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._t.join()
        return self.peak


def endpoints(steps: int, client: httpx.Client) -> list[tuple[str, str, str]]:
    """(group, label, path) of everything timed."""
    r = f"/runs/{RUN}"
    deep = f"{r}/rollouts?page=100"  # replaced below by the real cursor of a deep page when the list has one
    first = client.get(f"{r}/rollouts.json?step={int(steps * 0.9)}").json()
    if first.get("next_url"):
        deep = first["next_url"].replace("/rollouts.json", "/rollouts")
    out = [("chart", f"chart {c}", f"{r}/charts/{c}.json") for c in charts.REGISTRY]
    out += [("page", "run page", r), ("page", "step page", f"{r}/steps/{steps // 2}"),
            ("page", "compare (the run and a copy of its rollups under another id)",
             f"/compare.json?runs={RUN},{RUN}-copy"),
            ("list", "rollouts: first page", f"{r}/rollouts"),
            ("list", "rollouts: filtered (ending=error, task prefix)", f"{r}/rollouts?ending=error&task=task-01*"),
            ("list", "rollouts: deep page", deep),
            ("list", "rollouts: sorted by reward", f"{r}/rollouts?sort=-reward"),
            ("list", "facets", f"{r}/facets.json"),
            ("list", "facets (filtered)", f"{r}/facets.json?ending=error"),
            # counted from the rows (a group prefix is not in the rollups): the flag facet with the
            # members of flagged groups, and the list of a group-scope kind's rollouts
            ("list", "facets (group prefix, from the rows)", f"{r}/facets.json?group=s{steps // 2:04d}-g00"),
            ("list", "rollouts: flag=zero_variance_group", f"{r}/rollouts?flag=zero_variance_group&step={steps // 2}"),
            ("search", f"search rare word ({RARE})", f"/search.json?q={RARE}&run={RUN}"),
            ("search", f"search common word ({COMMON})", f"/search.json?q={COMMON}&run={RUN}"),
            ("search", "search common word, all runs", f"/search.json?q={COMMON}")]
    if PAIRED:
        out.append(("page", f"compare with {PAIRED} (paired by task, from the rows; {PAIRED_REQUESTS} requests)",
                    f"/compare.json?runs={RUN},{PAIRED}"))
    return [e for e in out if not ONLY or any(w in e[1] for w in ONLY)]


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes so far (0 for one that is gone)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def server_pids(pid: int, url: str) -> list[int]:
    """The app server and, on Postgres, the backends serving its database (readable /proc: run as
    root or the server's user; otherwise the app server's CPU alone)."""
    if url.startswith("sqlite"):
        return [pid]
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(url)
    with psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, password=u.password,
                         dbname=u.database) as c:
        rows = c.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                         "AND pid <> pg_backend_pid()").fetchall()
    return [pid, *(r[0] for r in rows)]


def measure(base: str, pid: int, steps: int, requests: int, url: str = "sqlite") -> list[tuple]:
    """Per endpoint: (group, label, first status, last status, p50 ms, p95 ms, CPU ms a request of
    the server and its database backends: what the machine's load does not inflate)."""
    rss = RSS(pid)
    results = []
    with httpx.Client(base_url=base, timeout=300) as client:
        for group, label, path in endpoints(steps, client):
            first = client.get(path)
            pids = server_pids(pid, url)
            cpu0 = cpu_seconds(pids)
            times = []
            for _ in range(PAIRED_REQUESTS if PAIRED and path.endswith(f",{PAIRED}") else requests):
                t = time.perf_counter()
                resp = client.get(path)
                times.append((time.perf_counter() - t) * 1000)
            times.sort()
            p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
            cpu = (cpu_seconds(pids) - cpu0) * 1000 / len(times)
            results.append((group, label, first.status_code, resp.status_code, statistics.median(times), p95, cpu))
    return results, rss.stop()


GOALS = {"chart": 300, "page": 300, "list": 200, "search": 500}


COPIED = (models.StepRollup.__table__, models.TaskRollup.__table__, models.RunTaskRollup.__table__)


def copy_rollups(conn: sa.Connection) -> bool:
    """A second run for /compare: the same rollups under another id (rollups only, no rollouts).
    Made when missing or out of date (a migration rebuilds every rollup from the rollouts, and
    the copy has none); returns whether it was made."""
    copy = f"{RUN}-copy"
    count = lambda t, r: conn.execute(sa.select(sa.func.count()).select_from(t).where(t.c.run_id == r)).scalar()  # noqa: E731
    if all(count(t, copy) == count(t, RUN) for t in COPIED):
        return False
    if conn.execute(sa.select(models.Run.__table__.c.id).where(models.Run.__table__.c.id == copy)).first() is None:
        conn.execute(models.Run.__table__.insert().values(id=copy, type="train", created_at=datetime.now(UTC)))
    for table in COPIED:
        conn.execute(table.delete().where(table.c.run_id == copy))
        cols = [c.name for c in table.c if c.name not in ("pk", "run_id")]
        conn.execute(table.insert().from_select(["run_id", *cols], sa.select(sa.literal(copy),
                     *[table.c[c] for c in cols]).where(table.c.run_id == RUN)))
    return True


def use_generated() -> None:
    """Time the pages of bench/generate_pg.py's first run (compare: with a copy of its rollups, as
    at 1 M, and with its second run)."""
    global RUN, PAIRED
    from bench.generate_pg import run_name

    RUN, PAIRED = run_name(0), run_name(1)


def bench_generated(name: str, url: str, n: int, runs: int, steps: int, partitions: int, requests: int,
                    reuse: bool, load_only: bool) -> None:
    """Postgres at scale: load database `name` with bench/generate_pg.py (unless `reuse`), then time."""
    from bench import generate_pg

    use_generated()
    if not reuse:
        t = time.perf_counter()
        times = generate_pg.load(name, n, runs, steps, partitions, say=lambda m: print(f"[postgres] {m}"))
        stages = ", ".join(f"{k} {v:.0f} s" for k, v in times.items())
        print(f"[postgres] loaded {n:,} rollouts ({runs} runs of {steps:,} steps, "
              f"{f'{partitions} partitions' if partitions else 'no partitions'}) in {time.perf_counter() - t:.0f} s "
              f"(SQL, bench/generate_pg.py: {stages}); load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    else:
        print("[postgres] reusing the loaded database")
    with make_engine(url).begin() as conn:
        copy_rollups(conn)
        from app.db.partition import partition_count

        parts = partition_count(conn, "rollout")
        total = conn.execute(sa.text("SELECT count(*) FROM rollout")).scalar()
        size = conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar()
    print(f"[postgres] {total:,} rollouts, rollout table {f'in {parts} partitions' if parts else 'not partitioned'}, "
          f"database {size / 2**30:.1f} GB")
    if not load_only:
        serve_and_measure("postgres", url, steps, requests)


def bench(label: str, url: str, n: int, steps: int, requests: int, reuse: bool = False,
          load_only: bool = False, partitions: int = 0) -> None:
    engine = make_engine(url, writer=True)
    upgrade(engine)
    if partitions and not url.startswith("sqlite"):
        from app.db.partition import partition

        partition(engine, partitions)
    with engine.connect() as conn:
        loaded = conn.execute(sa.select(sa.func.count()).select_from(models.StepRollup.__table__)).scalar()
    if reuse and loaded:
        print(f"[{label}] reusing the loaded database")
        with engine.begin() as conn:
            copied = copy_rollups(conn)
        if copied:  # a migration rebuilt the rollups from the rollouts, and the copy has none
            print(f"[{label}] copied the rollups to {RUN}-copy again")
        engine.dispose()
        return serve_and_measure(label, url, steps, requests)
    t = time.perf_counter()
    (load_sqlite if url.startswith("sqlite") else load_postgres)(engine, n, steps)
    t_load = time.perf_counter() - t
    t = time.perf_counter()
    with engine.begin() as conn:
        n_steps = rollups.rebuild(conn, RUN)
        copy_rollups(conn)
    t_rollup = time.perf_counter() - t
    engine.dispose()
    print(f"[{label}] loaded {n:,} rollouts over {steps:,} steps in {t_load:.0f} s (bulk); "
          f"rollups of {n_steps} steps in {t_rollup:.1f} s")
    if not load_only:
        serve_and_measure(label, url, steps, requests)


def serve_and_measure(label: str, url: str, steps: int, requests: int) -> None:
    env = dict(os.environ, ROLLSCOPE_DATABASE_URL=url)
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "app.main:create_app", "--factory", "--port",
                               str(PORT), "--log-level", "warning"], cwd=ROOT, env=env)
    try:
        base = f"http://127.0.0.1:{PORT}"
        for _ in range(300):
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        load_before = os.getloadavg()
        results, peak = measure(base, server.pid, steps, requests, url)
        load_after = os.getloadavg()
    finally:
        server.terminate()
        server.wait(timeout=30)
    load = lambda t: " ".join(f"{x:.1f}" for x in t)  # noqa: E731
    print(f"[{label}] machine load average (1, 5, 15 min): {load(load_before)} before, {load(load_after)} after "
          f"({os.cpu_count()} cores)")
    print(f"[{label}] {'endpoint':58} {'status':>6} {'p50 ms':>8} {'p95 ms':>8}  goal       CPU ms/request")
    for group, name, s0, s1, p50, p95, cpu in results:
        goal = GOALS[group]
        ok = "ok" if p95 < goal and s0 == 200 else "MISSED"
        print(f"[{label}] {name:58} {s1:>6} {p50:8.1f} {p95:8.1f}  <{goal} {ok:6} {cpu:8.1f}")
    print(f"[{label}] server peak RSS: {peak / 2**20:.0f} MB (goal < 300 MB)")


def main() -> None:
    global ONLY, PAIRED_REQUESTS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=1_000)
    ap.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--keep", type=Path, help="write the SQLite file here and keep it")
    ap.add_argument("--reuse", action="store_true",
                    help="time the databases a previous --keep run loaded "
                         "(SQLite in --keep, Postgres --pg-db)")
    ap.add_argument("--load-only", action="store_true", help="load (and keep) the databases, time nothing")
    ap.add_argument("--runs", type=int, default=1,
                    help="Postgres: more than 1 loads N rollouts over this many runs with bench/generate_pg.py")
    ap.add_argument("--partitions", type=int, default=0, help="Postgres: hash partitions per table (0: none)")
    ap.add_argument("--pg-db", default="rs_bench_analytics",
                    help="Postgres: the database's name (with --reuse: one bench/generate_pg.py --db loaded)")
    ap.add_argument("--only", default="",
                    help="time only the endpoints whose label holds one of these comma-separated words")
    ap.add_argument("--paired-requests", type=int, default=PAIRED_REQUESTS,
                    help="requests timed of the paired compare (it read every rollout of both runs: seconds each)")
    a = ap.parse_args()
    ONLY = [w for w in a.only.split(",") if w]
    PAIRED_REQUESTS = a.paired_requests
    if a.runs > 1 and a.db != "postgres":
        ap.error("--runs needs --db postgres")
    if a.db in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            path = (a.keep or Path(tmp)) / "bench-analytics.db"
            if not a.reuse:
                path.unlink(missing_ok=True)
            bench("sqlite", f"sqlite:///{path}", a.rollouts, a.steps, a.requests, a.reuse, a.load_only)
    if a.db in ("postgres", "both"):
        import psycopg
        from sqlalchemy.engine import make_url

        u = make_url(PG)
        name = a.pg_db
        admin = dict(host=u.host, port=u.port or 5432, user=u.username, password=u.password,
                     dbname=u.database or "postgres", autocommit=True)
        keep = a.reuse or a.load_only or a.keep is not None
        with psycopg.connect(**admin) as c:
            exists = c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if not (a.reuse and exists):
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                c.execute(f'CREATE DATABASE "{name}"')
        try:
            url = u.set(database=name).render_as_string(hide_password=False)
            if a.runs > 1:
                bench_generated(name, url, a.rollouts, a.runs, a.steps, a.partitions, a.requests, a.reuse,
                                a.load_only)
            else:
                bench("postgres", url, a.rollouts, a.steps, a.requests, a.reuse, a.load_only, a.partitions)
        finally:
            if not keep:
                with psycopg.connect(**admin) as c:
                    c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
