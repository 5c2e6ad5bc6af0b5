"""Figures for ingest and page speed on a real SQLite file (and Postgres when reachable).

Prints: ingest throughput (rollouts/s, tokens/s) for the 1,920-rollout demo run; bytes of the
compact token arrays against the same arrays as JSON text (ratio); median latency of the list
page, a deep keyset page, and the first page of a 5,000-turn rollout; the HTML size of a rollout
with a 12 MB tool output. Run: `make bench` (or `.venv/bin/python bench/ingest_and_pages.py`).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa
from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.db import models  # noqa: E402
from app.db.engine import make_engine  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.main import create_app  # noqa: E402
from app.worker.sync import ingest_paths  # noqa: E402
from ingest import demo  # noqa: E402
from ingest.formats.base import ReadContext  # noqa: E402

PG = os.environ.get("ROLLSCOPE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def median_ms(fn, n=15) -> float:
    fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def bench(url: str, label: str, work: Path) -> None:
    engine = make_engine(url)
    upgrade(engine)
    run_file = work / "demo.jsonl"
    if not run_file.exists():
        demo.write(run_file)
    t = time.perf_counter()
    rep = ingest_paths(engine, [run_file], ReadContext())
    dt = time.perf_counter() - t
    with engine.connect() as c:
        n_tok = c.execute(sa.select(sa.func.sum(models.Rollout.__table__.c.n_tokens))).scalar()
    print(f"[{label}] ingest demo run: {rep.total.inserted} rollouts in {dt:.2f} s = "
          f"{rep.total.inserted / dt:,.0f} rollouts/s, {n_tok / dt:,.0f} tokens/s")
    t = time.perf_counter()
    again = ingest_paths(engine, [run_file], ReadContext())
    print(f"[{label}] re-ingest (no changes): {again.total.unchanged} unchanged, {again.total.inserted} new in "
          f"{time.perf_counter() - t:.2f} s")
    for name in ("15-huge-tool-output.json", "17-many-turns.json"):
        ingest_paths(engine, [work / name], ReadContext(run_id="large"))

    app = create_app(Settings(database_url=url))
    with TestClient(app) as client:
        first = client.get("/runs/demo-grpo/rollouts.json?limit=50").json()
        cursor = first["next"]
        for _ in range(20):
            cursor = client.get(f"/runs/demo-grpo/rollouts.json?limit=50&after={cursor}").json()["next"]
        print(f"[{label}] list page (50 rows): {median_ms(lambda: client.get('/runs/demo-grpo/rollouts')):.1f} ms; "
              f"deep keyset page (row 1000+): "
              f"{median_ms(lambda: client.get(f'/runs/demo-grpo/rollouts?after={cursor}')):.1f} ms")
        print(f"[{label}] run page (30 steps, charts): {median_ms(lambda: client.get('/runs/demo-grpo')):.1f} ms")
        print(f"[{label}] 5,000-turn rollout, first page of 50 messages: "
              f"{median_ms(lambda: client.get('/runs/large/rollouts/case17'), n=7):.1f} ms")
        big = client.get("/runs/large/rollouts/case15")
        print(f"[{label}] rollout with a 12 MB tool output: page HTML {len(big.content) / 1024:.0f} KB, "
              f"{median_ms(lambda: client.get('/runs/large/rollouts/case15'), n=5):.1f} ms")
    app.state.engine.dispose()

    with engine.connect() as c:
        rows = c.execute(sa.select(models.Node.__table__.c.token_ids, models.Node.__table__.c.mask,
                                   models.Node.__table__.c.logprobs, models.Node.__table__.c.n_tokens)).all()
    from app.db.tokenarrays import floats_or_none, unpack_bits, unpack_floats, unpack_ids

    binary = sum(len(r.token_ids or b"") + len(r.mask or b"") + len(r.logprobs or b"") for r in rows)
    as_json = sum(len(json.dumps(unpack_ids(r.token_ids).tolist()))
                  + len(json.dumps(unpack_bits(r.mask, r.n_tokens).tolist()))
                  + len(json.dumps(floats_or_none(unpack_floats(r.logprobs)))) for r in rows if r.n_tokens)
    print(f"[{label}] token arrays: {binary / 1e6:.2f} MB binary vs {as_json / 1e6:.2f} MB as JSON text "
          f"(binary is {binary / as_json:.2f}x the size)")
    engine.dispose()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, str(ROOT / "tests/fixtures/cases/15-17-make-large-cases.py"), str(work),
                        "12", "5000"],
                       check=True, capture_output=True)
        bench(f"sqlite:///{work / 'bench.db'}", "sqlite", work)
        try:
            import psycopg

            u = sa.engine.make_url(PG)
            name = f"rs_bench_{os.getpid()}"
            with psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, dbname=u.database,
                                 autocommit=True) as c:
                c.execute(f'CREATE DATABASE "{name}"')
            try:
                bench(u.set(database=name).render_as_string(hide_password=False), "postgres", work)
            finally:
                with psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, dbname=u.database,
                                     autocommit=True) as c:
                    c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except psycopg.OperationalError as exc:
            print(f"[postgres] skipped: {exc}")


if __name__ == "__main__":
    main()
