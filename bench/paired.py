"""Figures for the paired comparison of two runs (issue 24, item 3): 1,000 tasks × 16 rollouts
per run.

Prints, for pass/fail rewards (the ideal bootstrap, exact) and for continuous rewards (the
sampled bootstrap, 2,000 replicates a task):
- the statistics alone (app/paired_stats.py `paired_differences` + the sign test), and at
  10,000 tasks;
- `GET /compare.json?runs=a,b` through the real app on a SQLite file (the two runs' rollout rows
  written straight into the table: `store_runs`), median of 3, and the paired section alone.

Run: `.venv/bin/python bench/paired.py` (SQLite in a temporary folder; nothing is kept).
`ROLLSCOPE_BENCH_TASKS=N` changes the 1,000.
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402
from sqlmodel import Session  # noqa: E402

from app import paired_stats  # noqa: E402
from app.config import Settings  # noqa: E402
from app.db import models  # noqa: E402
from app.db.engine import make_engine  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.main import create_app  # noqa: E402
from app.queries.steps import StepRange  # noqa: E402
from app.store import rollups  # noqa: E402
from app.views import paired as paired_view  # noqa: E402

TASKS = int(os.environ.get("ROLLSCOPE_BENCH_TASKS", "1000"))
PER_TASK = 16


def rewards(kind: str, tasks: int, shift: float, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind == "pass/fail":
        return [(rng.random(PER_TASK) < rng.uniform(0.2, 0.8) + shift).astype(float) for _ in range(tasks)]
    return [np.clip(rng.normal(0.5 + shift, 0.2, PER_TASK), 0, 1) for _ in range(tasks)]


def time_stats(kind: str, tasks: int) -> float:
    keys = [f"task-{i:05d}" for i in range(tasks)]
    a, b = rewards(kind, tasks, 0.0, 1), rewards(kind, tasks, 0.03, 2)
    t = time.perf_counter()
    diffs, _ = paired_stats.paired_differences(keys, a, b)
    paired_stats.sign_test_of(diffs)
    return time.perf_counter() - t


def store_runs(url: str, kind: str) -> None:
    """Two runs' rollout rows (the columns the paired section reads) written straight into a
    migrated database, then their rollups built by `rollups.rebuild` (what ingest keeps per
    batch; the paired section reads every task's count, mean and moments from them): the real
    ingest pipeline is measured in bench/ingest.py, and at 32,000 rollouts it would be this
    bench's whole time."""
    engine = make_engine(url, writer=True)
    upgrade(engine)
    run_t, rollout_t = models.Run.__table__, models.Rollout.__table__
    with engine.begin() as conn:
        for run, shift, seed in (("base", 0.0, 1), ("new", 0.03, 2)):
            conn.execute(run_t.insert().values(id=run, type="train", created_at=datetime.now(timezone.utc)))
            conn.execute(rollout_t.insert(), [
                {c.name: c.default.arg for c in rollout_t.c if c.default is not None and not callable(c.default.arg)}
                | {"run_id": run, "rollout_id": f"{run}-{t}-{i}", "attempt": 0, "step": i % 4,
                   "task_key": f"task-{t:05d}", "ending": "submitted", "reward": float(r), "reward_status": "ok",
                   "content_hash": f"{run}-{t}-{i}",
                   "ingested_at": datetime.now(timezone.utc)}
                for t, rs in enumerate(rewards(kind, TASKS, shift, seed)) for i, r in enumerate(rs)])
        rollups.rebuild(conn)
    engine.dispose()


def time_page(kind: str, folder: Path) -> tuple[float, float]:
    url = f"sqlite:///{folder / (kind.replace('/', '-') + '.db')}"
    store_runs(url, kind)
    app = create_app(Settings(database_url=url))
    page, section = [], []
    with TestClient(app) as client:
        for _ in range(3):
            t = time.perf_counter()
            got = client.get("/compare.json?runs=base,new")
            page.append(time.perf_counter() - t)
            assert got.status_code == 200 and got.json()["paired"]["tasks_total"] == TASKS
        for _ in range(3):
            with Session(app.state.engine) as s:
                t = time.perf_counter()
                paired_view.paired_section(s, "base", "new", steps=StepRange())
                section.append(time.perf_counter() - t)
    app.state.engine.dispose()
    return statistics.median(page), statistics.median(section)


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="rollscope-bench-paired-"))
    try:
        print(f"paired comparison, {TASKS} tasks × {PER_TASK} rollouts per run, {os.cpu_count()} cores")
        for kind in ("pass/fail", "continuous"):
            print(f"{kind:>10}: statistics {time_stats(kind, TASKS):.3f} s"
                  f" ({10 * TASKS} tasks: {time_stats(kind, 10 * TASKS):.3f} s)")
            page, section = time_page(kind, folder)
            print(f"{'':>10}  GET /compare.json {page:.3f} s (median of 3), the paired section {section:.3f} s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
