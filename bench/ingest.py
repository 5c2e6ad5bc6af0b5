"""Ingest speed against a floor measured in the same run, and statements per batch.

For each database it prints what Rollscope's ingest achieves (rollouts/s, tokens/s, SQL
statements per rollout and per batch) and a *floor*: the same bytes parsed with orjson and the
equivalent raw rows written into Rollscope's own tables with the bare driver (one `rollout` row
with plain counts, one `rollout_detail` with the envelope as JSON text, one `node` row per
message with its token arrays packed as int32 / bits / float32): `executemany` on sqlite3,
`COPY` on psycopg, one transaction per 200 rollouts. No checks, no validation, no hash. Then
`ratio = rollscope / floor`. Both run on the same machine in the same minute, so the ratio holds
when the machine is busy (figures in rollouts/s do not).

    .venv/bin/python bench/ingest.py            # the demo run, SQLite and Postgres
    .venv/bin/python bench/ingest.py --quick    # SQLite only, under a minute

The last line reads `sqlite: N rollouts/s, floor M rollouts/s, ratio R`.
"""
from __future__ import annotations

import argparse
import os
import sqlite3
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
from app.worker.sync import ingest_paths  # noqa: E402
from ingest import demo  # noqa: E402
from ingest.formats import ReadContext  # noqa: E402

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
    con.execute("INSERT INTO run (id, type, created_at) VALUES ('demo-grpo', 'train', '2026-01-01 00:00:00')")
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
          f"(CPU {time.process_time() - cpu:.2f} s)")
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
        con.execute("INSERT INTO run (id, type, created_at) VALUES ('demo-grpo', 'train', now())")
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
              f"(CPU {time.process_time() - cpu:.2f} s)")
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
    with count_statements(engine) as n:
        t, cpu = time.perf_counter(), time.process_time()
        rep = ingest_paths(engine, [path], ReadContext())
        dt, cpu = time.perf_counter() - t, time.process_time() - cpu
    total = rep.total
    with engine.connect() as c:
        n_tok = c.execute(sa.select(sa.func.sum(models.Rollout.__table__.c.n_tokens))).scalar() or 0
    print(f"[{label}] rollscope: {total.inserted} rollouts in {dt:.2f} s = {total.inserted / dt:,.0f} rollouts/s, "
          f"{n_tok / dt:,.0f} tokens/s (CPU {cpu:.2f} s); {n[0]} statements = {n[0] / max(total.inserted, 1):.3f} per rollout, "
          f"{n[0] / max(total.batches, 1):.1f} per batch of {BATCH} ({total.batches} batches, "
          f"{total.fallbacks} written one by one)")
    with count_statements(engine) as n:
        t = time.perf_counter()
        again = ingest_paths(engine, [path], ReadContext())
        dt2 = time.perf_counter() - t
    print(f"[{label}] re-ingest: {again.total.unchanged} unchanged, {again.total.inserted} new in {dt2:.2f} s; "
          f"{n[0]} statements = {n[0] / max(again.total.unchanged, 1):.3f} per rollout")
    engine.dispose()
    return dt, total.inserted


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="SQLite only, the demo run (under a minute)")
    ap.add_argument("--file", type=Path, help="a native JSONL file to ingest instead of the demo run")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        path = args.file
        if path is None:
            path = work / "demo.jsonl"
            demo.write(path)
        size = path.stat().st_size
        print(f"workload: {path.name}, {size / 1e6:.1f} MB")
        results = []
        if not args.quick:
            try:
                url, drop = _pg_database()
            except Exception as exc:  # noqa: BLE001 - a bench without Postgres still reports SQLite
                print(f"[postgres] skipped: {exc}")
            else:
                try:
                    dt, n = rollscope(path, url, "postgres")
                finally:
                    drop()
                url, drop = _pg_database()
                try:
                    floor = floor_postgres(path, url)
                finally:
                    drop()
                results.append(("postgres", n / dt, n / floor))
        floor = floor_sqlite(path, f"sqlite:///{work / 'floor.db'}")
        dt, n = rollscope(path, f"sqlite:///{work / 'bench.db'}", "sqlite")
        results.append(("sqlite", n / dt, n / floor))
        for label, ours, fl in results:
            print(f"{label}: {ours:,.0f} rollouts/s, floor {fl:,.0f} rollouts/s, ratio {ours / fl:.2f}")


if __name__ == "__main__":
    main()
