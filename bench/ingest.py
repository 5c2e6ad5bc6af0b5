"""Ingest speed against a floor measured in the same run, and statements per batch.

For each database it prints what Rollscope's ingest achieves, through the CLI's path and through
the spool worker (rollouts/s, tokens/s, SQL statements per rollout and per batch), and a *floor*:
the same bytes parsed with orjson and the equivalent raw rows written into Rollscope's own tables
with the bare driver (one `rollout` row with plain counts, one `rollout_detail` with the envelope
as JSON text, one `node` row per message with its token arrays packed as int32 / bits / float32):
`executemany` on sqlite3, `COPY` on psycopg, one transaction per 200 rollouts. No checks, no
validation, no hash. Then `ratio = rollscope / floor`. Both run on the same machine in the same
minute, so the ratio holds when the machine is busy (figures in rollouts/s do not).

    .venv/bin/python bench/ingest.py            # 2,000 agentic rollouts, SQLite and Postgres, + spool and latency
    .venv/bin/python bench/ingest.py --quick    # SQLite only, 300 rollouts, under a minute
    .venv/bin/python bench/ingest.py --spool-mb 2000   # also drain a 2 GB spool with the worker CLI
    .venv/bin/python bench/ingest.py --latency         # only the append → page latency
    .venv/bin/python bench/ingest.py --text-only       # text-only (Trackio's) workload + a 5,000-turn rollout,
                                                       # Trackio itself logging the same (offline, local SQLite)

The workload (bench/workload.py) is the issue's: rollouts of 20 turns and ~8k tokens with ids,
masks and logprobs (`--demo` uses the demo run instead). Beside the figures it prints
`os.getloadavg()`: the machine is shared, and rollouts/s move with its load (the ratio less so).
`--spool-mb` drains a spool of that size with `rollscope worker --once` in a child process and
prints its peak RSS; the latency step appends rollouts one by one to a spool a running worker
tails and times each until its page answers. The last line reads
`sqlite: N rollouts/s, floor M rollouts/s, ratio R` (N through the worker).

Beside the CLI path's figures it prints the re-ingest rate of the same, unchanged file against
the fresh rate, and the time per stage of the fresh ingest (ingest/stages.py: read, decode,
normalise, hash, checks, rows, write; `--quick` included).
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import orjson
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.db import models  # noqa: E402
from app.db.engine import make_engine  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.store.write import BATCH  # noqa: E402
from app.worker.parse import auto_parsers  # noqa: E402
from app.worker.sync import ingest_paths  # noqa: E402
from ingest import demo, stages  # noqa: E402
from ingest.formats.base import ReadContext  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import workload  # noqa: E402

# The worker alone (`--parsers 0`), then with one parser process, forked beside it (`rollscope
# worker`'s default on two cores or more: app/worker/parse.py `auto_parsers`); the ratio is
# printed for each, the worker's default last. BENCH_PARSERS=0,1,2 tries others.
PARSERS = tuple(int(p) for p in os.environ.get("BENCH_PARSERS", "0,1").split(","))
DEFAULT_PARSERS = auto_parsers()
PG = os.environ.get("ROLLSCOPE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


# --- the floor --------------------------------------------------------------------------------

ROLLOUT_COLS = ("pk", "run_id", "rollout_id", "attempt", "step", "group_id", "group_index", "ending", "reward",
                "reward_status", "n_nodes", "n_turns", "n_tool_calls", "n_tokens", "n_trained_tokens",
                "n_branches", "content_hash", "ingested_at")
NODE_COLS = ("rollout_pk", "idx", "parent", "role", "sampled", "content_len", "message", "n_tokens", "token_ids",
             "mask", "is_content", "logprobs")


def _floor_rows(lines: list[bytes], base: int, now: str):
    """Rows of the real tables (rollout, rollout_detail, node) for one batch, computed the
    plainest way from orjson's parse: the least any store must do with these bytes."""
    rollouts, details, nodes = [], [], []
    for k, line in enumerate(lines):
        d = orjson.loads(line)
        body_nodes = d.pop("nodes", [])
        pk = base + k
        group = d.get("group") or {}
        rollouts.append((pk, d["run"]["id"], d["id"], d.get("attempt", 0), d.get("step"), group.get("id"),
                         group.get("index"), (d.get("ending") or {}).get("type", "unknown"), d.get("reward"), "ok",
                         len(body_nodes), sum(n["message"]["role"] == "assistant" for n in body_nodes),
                         sum(len(n["message"].get("tool_calls") or []) for n in body_nodes),
                         sum(len(n.get("token_ids") or []) for n in body_nodes),
                         sum(sum(n.get("mask") or []) for n in body_nodes), 1, "", now))
        details.append((pk, orjson.dumps(d).decode()))
        for i, n in enumerate(body_nodes):
            ids, msg = n.get("token_ids") or [], n["message"]
            nodes.append((pk, i, n.get("parent"), msg["role"], n.get("sampled", False),
                          len(msg.get("content") or ""), orjson.dumps(msg).decode(), len(ids),
                          np.asarray(ids, dtype="<i4").tobytes(),
                          np.packbits(np.asarray(n.get("mask") or [], dtype=bool)).tobytes(),
                          np.packbits(np.asarray(n.get("is_content") or [], dtype=bool)).tobytes(),
                          np.asarray(n.get("logprobs") or [], dtype="<f8").astype("<f4").tobytes()))
    return rollouts, details, nodes


def floor_sqlite(path: Path, url: str) -> float:
    """Seconds to parse `path` and write its raw rows into Rollscope's tables in a fresh SQLite
    file (WAL, like ours) with sqlite3's executemany, one transaction per batch."""
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    con = sqlite3.connect(sa.engine.make_url(url).database, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    run_id = orjson.loads(path.open("rb").readline())["run"]["id"]
    con.execute("INSERT INTO run (id, type, created_at) VALUES (?, 'train', '2026-01-01 00:00:00')", (run_id,))
    now = "2026-01-01 00:00:00.000000"
    t, cpu = time.perf_counter(), time.process_time()
    base = 0
    for chunk in _chunks(path):
        rollouts, details, nodes = _floor_rows(chunk, base, now)
        con.execute("BEGIN")
        con.executemany(_sql("rollout", ROLLOUT_COLS, "?"), rollouts)
        con.executemany(_sql("rollout_detail", ("rollout_pk", "envelope"), "?"), details)
        con.executemany(_sql("node", NODE_COLS, "?"), nodes)
        con.execute("COMMIT")
        base += len(rollouts)
    dt = time.perf_counter() - t
    print(f"[sqlite] floor: {base} rollouts in {dt:.2f} s = {base / dt:,.0f} rollouts/s "
          f"(CPU {time.process_time() - cpu:.2f} s); {load()}")
    con.close()
    return dt


def _sql(table: str, cols: tuple[str, ...], mark: str) -> str:
    return f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join([mark] * len(cols))})"


def floor_postgres(path: Path, url: str) -> float:
    """Seconds to parse `path` and COPY its raw rows into Rollscope's tables in a fresh Postgres
    database, one transaction per batch."""
    import psycopg

    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    u = sa.engine.make_url(url)
    now = "2026-01-01 00:00:00+00"
    with psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, dbname=u.database) as con:
        run_id = orjson.loads(path.open("rb").readline())["run"]["id"]
        con.execute("INSERT INTO run (id, type, created_at) VALUES (%s, 'train', now())", (run_id,))
        con.commit()
        t, cpu = time.perf_counter(), time.process_time()
        base = 0
        for chunk in _chunks(path):
            rollouts, details, nodes = _floor_rows(chunk, base, now)
            with con.cursor() as cur:
                for table, cols, rows in (("rollout", ROLLOUT_COLS, rollouts),
                                          ("rollout_detail", ("rollout_pk", "envelope"), details),
                                          ("node", NODE_COLS, nodes)):
                    with cur.copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as cp:
                        for row in rows:
                            cp.write_row(row)
            con.commit()
            base += len(rollouts)
        dt = time.perf_counter() - t
        print(f"[postgres] floor: {base} rollouts in {dt:.2f} s = {base / dt:,.0f} rollouts/s "
              f"(CPU {time.process_time() - cpu:.2f} s); {load()}")
        return dt


def _chunks(path: Path):
    batch = []
    with path.open("rb") as f:
        for line in f:
            if line.strip():
                batch.append(line)
                if len(batch) == BATCH:
                    yield batch
                    batch = []
    if batch:
        yield batch


# --- Rollscope --------------------------------------------------------------------------------

@contextmanager
def count_statements(engine):
    """Counts SQL statements sent to the database (BEGIN included) while the block runs."""
    n = [0]

    def on_execute(*_args):
        n[0] += 1

    sa.event.listen(engine, "before_cursor_execute", on_execute)
    try:
        yield n
    finally:
        sa.event.remove(engine, "before_cursor_execute", on_execute)


def rollscope(path: Path, url: str, label: str) -> tuple[float, int]:
    """Ingest `path` through the CLI's path; print rollouts/s and statements. Returns
    (seconds, rollouts)."""
    engine = make_engine(url, writer=True)
    upgrade(engine)
    with count_statements(engine) as n, stages.measure() as table:
        t, cpu = time.perf_counter(), time.process_time()
        rep = ingest_paths(engine, [path], ReadContext())
        dt, cpu = time.perf_counter() - t, time.process_time() - cpu
    total = rep.total
    with engine.connect() as c:
        n_tok = c.execute(sa.select(sa.func.sum(models.Rollout.__table__.c.n_tokens))).scalar() or 0
    print(f"[{label}] rollscope: {total.inserted} rollouts in {dt:.2f} s = {total.inserted / dt:,.0f} rollouts/s, "
          f"{n_tok / dt:,.0f} tokens/s (CPU {cpu:.2f} s); "
          f"{n[0]} statements = {n[0] / max(total.inserted, 1):.3f} per rollout, "
          f"{n[0] / max(total.batches, 1):.1f} per batch of {BATCH} ({total.batches} batches, "
          f"{total.fallbacks} written one by one); {load()}")
    with count_statements(engine) as n:
        t = time.perf_counter()
        again = ingest_paths(engine, [path], ReadContext())
        dt2 = time.perf_counter() - t
    print(f"[{label}] re-ingest: {again.total.unchanged} unchanged, {again.total.inserted} new in {dt2:.2f} s; "
          f"{n[0]} statements = {n[0] / max(again.total.unchanged, 1):.3f} per rollout")
    print(f"[{label}] re-ingest rate: {again.total.unchanged / dt2:,.0f} rollouts/s = "
          f"{(again.total.unchanged / dt2) / (total.inserted / dt):.1f}x the fresh rate")
    print(f"[{label}] time per stage, fresh ingest ({dt:.2f} s wall clock; stages nest and, on Postgres, "
          "the write overlaps the next batch):")
    for line in stages.table_lines(table, total.inserted):
        print(line)
    engine.dispose()
    return dt, total.inserted


def through_worker(path: Path, url: str, label: str, work: Path, parsers: int) -> tuple[float, int]:
    """Ingest `path` through the spool worker (`rollscope worker --once`) with `parsers` parser
    processes: the file is put in a spool folder and the worker drains it. Returns (seconds,
    rollouts). CPU is the worker's and its parsers' together (their start included)."""
    import resource
    import shutil

    from app.worker.run import run

    spool = work / f"spool-{label}-{parsers}" / "bench"
    spool.mkdir(parents=True)
    shutil.copy(path, spool / path.name)
    engine = make_engine(url, writer=True)
    upgrade(engine)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    t, cpu = time.perf_counter(), time.process_time()
    run(engine, [spool.parent], once=True, log=lambda _m: None, parsers=parsers)
    dt, cpu = time.perf_counter() - t, time.process_time() - cpu
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_kids = after.ru_utime + after.ru_stime - kids.ru_utime - kids.ru_stime
    with engine.connect() as c:
        n = c.execute(sa.select(sa.func.count()).select_from(models.Rollout.__table__)).scalar_one()
        n_tok = c.execute(sa.select(sa.func.sum(models.Rollout.__table__.c.n_tokens))).scalar() or 0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"[{label}] worker, {parsers} parser process{'es' if parsers != 1 else ''}: {n} rollouts in {dt:.2f} s = "
          f"{n / dt:,.0f} rollouts/s, {n_tok / dt:,.0f} tokens/s (CPU {cpu + cpu_kids:.2f} s = "
          f"{(cpu + cpu_kids) / max(n, 1) * 1e3:.2f} ms per rollout, "
          f"of which parser processes {max(cpu_kids, 0):.2f} s); "
          f"peak RSS of the bench process {rss:,.0f} MB, of a parser {after.ru_maxrss / 1024:,.0f} MB; {load()}")
    engine.dispose()
    return dt, n


def _pg_database():
    import psycopg

    u = sa.engine.make_url(PG)
    name = f"rs_bench_{os.getpid()}"
    admin = dict(host=u.host, port=u.port or 5432, user=u.username, dbname=u.database, autocommit=True)
    with psycopg.connect(**admin) as c:
        c.execute(f'CREATE DATABASE "{name}"')

    def drop():
        with psycopg.connect(**admin) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return u.set(database=name).render_as_string(hide_password=False), drop


def load() -> str:
    """The machine's load average (1, 5, 15 min), printed beside every figure."""
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def drain_spool(work: Path, mb: int) -> None:
    """Fill a spool with `mb` MB of workload files, drain it with `rollscope worker --once` in a
    child process (SQLite), and print rollouts/s and the child's peak RSS."""
    import subprocess

    spool = work / "big-spool" / "bench"
    spool.mkdir(parents=True)
    per_file = 2000  # rollouts per file (~210 MB)
    rng_seed, n, size = 0, 0, 0
    while size < mb * 1e6:
        f = spool / f"part-{rng_seed:03d}.jsonl"
        workload.write(f, per_file, seed=rng_seed, start=n)
        size += f.stat().st_size
        n += per_file
        rng_seed += 1
    url = f"sqlite:///{work / 'spool.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROLLSCOPE_DATABASE_URL": url}
    parsers = DEFAULT_PARSERS  # the worker as it runs by default
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--spool", str(spool.parent), "--once",
                             "--parsers", str(parsers)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tree = 0.0  # the worker and its parser processes together (PSS), sampled every 0.2 s
    while proc.poll() is None:
        tree = max(tree, _tree_pss_mb(proc.pid))
        time.sleep(0.2)
    dt = time.perf_counter() - t
    if proc.returncode:
        raise RuntimeError(f"worker exited {proc.returncode}")
    engine = make_engine(url)
    with engine.connect() as c:
        stored = c.execute(sa.select(sa.func.count()).select_from(models.Rollout.__table__)).scalar_one()
    engine.dispose()
    print(f"[sqlite] spool of {size / 1e9:.2f} GB ({n} rollouts, {rng_seed} files) drained by `rollscope worker "
          f"--once --parsers {parsers}`: {stored} stored in {dt:.1f} s = {stored / dt:,.0f} rollouts/s; peak memory of "
          f"the worker and its parsers together {tree:,.0f} MB (PSS: shared pages counted once); {load()}")


def _tree_pss_mb(pid: int) -> float:
    """Proportional set size in MB of a process and its children, from /proc (0 once it is
    gone): each resident page counted once, shared among the processes that map it (a forked
    parser shares the worker's pages; summing their RSS would count those twice). Reads only
    their own files: a scan of every process's status took most of a core every 0.2 s."""
    def pss_kb(p: str) -> int:
        try:
            for ln in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if ln.startswith("Pss:"):
                    return int(ln.split()[1])
        except OSError:
            pass
        return 0

    kids: list[str] = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            kids += children.read_text().split()
        except OSError:
            continue
    return (pss_kb(str(pid)) + sum(pss_kb(k) for k in kids)) / 1024


def latency(work: Path, n: int = 20) -> None:
    """A running worker (child process, SQLite, default poll) tails a spool; rollouts are appended
    one at a time, each timed from its line's write to its page answering 200 (after one untimed
    rollout: the worker's start-up, seconds on a slow machine, is not what is measured)."""
    import subprocess

    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.main import create_app
    from app.urls import rollout as rollout_url

    spool = work / "live-spool"
    (spool / "bench").mkdir(parents=True)
    url = f"sqlite:///{work / 'live.db'}"
    engine = make_engine(url, writer=True)
    upgrade(engine)
    engine.dispose()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROLLSCOPE_DATABASE_URL": url}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--spool", str(spool)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import numpy as _np

    rng = _np.random.default_rng(7)
    times = []
    try:
        app = create_app(Settings(database_url=url))
        with TestClient(app) as client, (spool / "bench" / "live.jsonl").open("ab") as out:
            for k in range(n + 1):  # the first is not timed: it waits for the worker to start
                rec = workload.rollout(k, rng)
                page = rollout_url(rec["run"]["id"], rec["id"])
                t = time.perf_counter()
                out.write(orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE))
                out.flush()
                while client.get(page).status_code != 200:
                    if time.perf_counter() - t > 60:
                        raise RuntimeError(f"{rec['id']} not visible after 60 s")
                    time.sleep(0.02)
                if k:
                    times.append(time.perf_counter() - t)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    times.sort()
    print(f"[sqlite] append → page visible, {n} rollouts one at a time: median {times[len(times) // 2]:.2f} s, "
          f"max {times[-1]:.2f} s (worker poll 0.5 s); {load()}")


def text_only(work: Path, n: int) -> None:
    """The peers' text-only workload (bench/workload.py `text_rollout`: 20-turn agent rollouts,
    messages and tool calls, no token arrays) through the CLI's path on SQLite: `n` rollouts
    (rollouts/s, re-ingest, time per stage), then one rollout of 5,000 turns (seconds). Trackio
    logs the same rollouts in the same run (`trackio_logs`): 200 and `n` rollouts and the 5,000-turn
    one, each beside Rollscope's figure with the ratio rollscope / trackio (> 1: Rollscope ahead)."""
    path = workload.write_text(work / "text.jsonl", n)
    print(f"text-only workload: {n} rollouts of {workload.TURNS} turns, {path.stat().st_size / 1e6:.1f} MB; {load()}")
    dt, stored = rollscope(path, f"sqlite:///{work / 'text.db'}", "text-only sqlite")
    sides = [(stored, stored / dt, trackio_logs(path, work / f"trackio-{n}"))]
    if n > 200:  # the smaller size, both sides again
        small = workload.write_text(work / "text-200.jsonl", 200)
        dt, stored = rollscope(small, f"sqlite:///{work / 'text-200.db'}", "text-only sqlite, 200 rollouts")
        sides.insert(0, (stored, stored / dt, trackio_logs(small, work / "trackio-200")))
    for stored, ours, (logged, secs, cpu) in sides:
        print(f"[text-only] trackio: {logged} rollouts in {secs:.2f} s = {logged / secs:,.0f} rollouts/s (CPU "
              f"{cpu:.2f} s); rollscope {ours:,.0f} rollouts/s; speed ratio rollscope / trackio "
              f"{ours / (logged / secs):.2f}")
    long = workload.write_text(work / "long.jsonl", 1, turns=5000, start=n)
    engine = make_engine(f"sqlite:///{work / 'long.db'}", writer=True)
    upgrade(engine)
    with stages.measure() as table:
        t = time.perf_counter()
        rep = ingest_paths(engine, [long], ReadContext())
        dt = time.perf_counter() - t
    engine.dispose()
    print(f"[text-only sqlite] one rollout of 5,000 turns ({long.stat().st_size / 1e6:.1f} MB): {dt:.2f} s "
          f"({rep.total.inserted} stored); {load()}")
    for line in stages.table_lines(table, 1):
        print(line)
    _, secs, cpu = trackio_logs(long, work / "trackio-long")
    print(f"[text-only] trackio: one rollout of 5,000 turns in {secs:.2f} s (CPU {cpu:.2f} s); rollscope "
          f"{dt:.2f} s; speed ratio rollscope / trackio {secs / dt:.2f}")


def trackio_logs(path: Path, home: Path) -> tuple[int, float, float]:
    """Trackio (the installed `trackio`, local mode: no Space, no server, no network) logs each
    rollout of the native file `path` as one `trackio.Trace` (its messages, tool calls in OpenAI's
    shape, id / group / reward as metadata) with `trackio.log`, then `trackio.finish()`, which
    waits for its background writer to commit them to SQLite under `home` (`TRACKIO_DIR`).
    Timed: log and finish, from messages already in memory (as a trainer holds them; the file is
    parsed beforehand, so Trackio is spared the read and parse Rollscope's figure includes).
    Not timed: import and `trackio.init`. Runs in a fresh interpreter: Trackio reads
    `TRACKIO_DIR` at import and keeps its current run in module state. Returns (traces Trackio
    stored, counted back from its database; seconds; CPU seconds of its process, its writer thread
    included). Raises CalledProcessError with Trackio's output if it fails."""
    proc = subprocess.run([sys.executable, "-c", TRACKIO_CHILD, str(path)], capture_output=True, text=True,
                          env={**os.environ, "TRACKIO_DIR": str(home), "HF_HUB_OFFLINE": "1"}, check=False)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, "trackio", proc.stdout, proc.stderr)
    stored, secs, cpu = proc.stdout.split()[-3:]
    return int(stored), float(secs), float(cpu)


# The child `trackio_logs` runs: prints "STORED SECONDS CPU_SECONDS" last.
TRACKIO_CHILD = """
import contextlib, io, os, sqlite3, sys, time
import orjson
import trackio

def openai(message):
    calls = message.get("tool_calls")
    if calls:
        message = {**message, "tool_calls": [{"id": c["id"], "type": "function",
                   "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]}
    return message

with open(sys.argv[1], "rb") as f:
    records = [orjson.loads(line) for line in f]
traces = [([openai(n["message"]) for n in r["nodes"]],
           {"id": r["id"], "group": r["group"]["id"], "reward": r["reward"]}, r["step"]) for r in records]
with contextlib.redirect_stdout(io.StringIO()):
    trackio.init(project="bench", name="text", embed=False, auto_log_cpu=False, auto_log_gpu=False)
    t, cpu = time.perf_counter(), time.process_time()
    for messages, metadata, step in traces:
        trackio.log({"trace": trackio.Trace(messages=messages, metadata=metadata)}, step=step)
    trackio.finish()
    secs, cpu = time.perf_counter() - t, time.process_time() - cpu
db = os.path.join(os.environ["TRACKIO_DIR"], "bench.db")
print(sqlite3.connect(db).execute("SELECT count(*) FROM traces").fetchone()[0], secs, cpu)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="SQLite only, 300 rollouts (under a minute)")
    ap.add_argument("--demo", action="store_true", help="the demo run instead of the agentic workload")
    ap.add_argument("-n", type=int, default=None, help="rollouts in the workload (default 2000; --quick 300)")
    ap.add_argument("--file", type=Path, help="a native JSONL file to ingest instead of the generated workload")
    ap.add_argument("--spool-mb", type=int, default=0,
                    help="also drain a spool of this many MB (2000 = the issue's 2 GB)")
    ap.add_argument("--latency", action="store_true", help="only the append → page latency (SQLite)")
    ap.add_argument("--text-only", action="store_true",
                    help="only the text-only workload (no token arrays; -n rollouts, default 2000) and a "
                         "5,000-turn rollout, SQLite")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.latency:
            latency(work)
            return
        if args.text_only:
            text_only(work, args.n or 2000)
            return
        path = args.file
        if path is None and args.demo:
            path = work / "demo.jsonl"
            demo.write(path)
        elif path is None:
            path = workload.write(work / "agentic.jsonl", args.n or (300 if args.quick else 2000))
        size = path.stat().st_size
        print(f"workload: {path.name}, {size / 1e6:.1f} MB; {load()}")
        results = []
        if not args.quick:
            try:
                url, drop = _pg_database()
            except Exception as exc:  # noqa: BLE001 - a bench without Postgres still reports SQLite
                print(f"[postgres] skipped: {exc}")
            else:
                try:
                    rollscope(path, url, "postgres")
                finally:
                    drop()
                rates = {}
                for parsers in PARSERS:
                    url, drop = _pg_database()
                    try:
                        dt, n = through_worker(path, url, "postgres", work, parsers)
                        rates[parsers] = n / dt
                    finally:
                        drop()
                url, drop = _pg_database()
                try:
                    floor = floor_postgres(path, url)
                finally:
                    drop()
                results += [("postgres", parsers, rate, n / floor) for parsers, rate in rates.items()]
        floor = floor_sqlite(path, f"sqlite:///{work / 'floor.db'}")
        rollscope(path, f"sqlite:///{work / 'bench.db'}", "sqlite")
        for parsers in PARSERS:
            dt, n = through_worker(path, f"sqlite:///{work / f'worker-{parsers}.db'}", "sqlite", work, parsers)
            results.append(("sqlite", parsers, n / dt, n / floor))
        if not args.quick:
            latency(work)
        if args.spool_mb:
            drain_spool(work, args.spool_mb)
        print(load())
        # the worker as it runs by default last, SQLite on the very last line
        for label, parsers, ours, fl in sorted(results, key=lambda r: (r[1] == DEFAULT_PARSERS, r[0] == "sqlite")):
            how = f" (--parsers {parsers})" if parsers != DEFAULT_PARSERS else ""
            print(f"{label}{how}: {ours:,.0f} rollouts/s, floor {fl:,.0f} rollouts/s, ratio {ours / fl:.2f}")


if __name__ == "__main__":
    main()
