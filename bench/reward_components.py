"""Reward components at scale (issue 23 part 4): a run of N rollouts (default 100,000 over 500
steps) with two components each (`correct` weight 1, `format` weight 0.1), loaded directly into
SQLite (or Postgres, `--db postgres`: a fresh database next to ROLLSCOPE_TEST_POSTGRES_URL's, dropped
after) with bench/analytics.py's loaders plus the `reward_component` rows, then timed in process
(best of 5, ms): the per-step component means (`step_means`, what the `reward_components` chart
reads, a GROUP BY at read time), the rollouts list's first page with `component=correct&
component_min=1`, with `sort=-component:format` (first page and the page after it), and the
count of the filtered list.

Run: `.venv/bin/python bench/reward_components.py [--rollouts N] [--steps S] [--db sqlite|postgres]`.
Not part of the tests.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from sqlmodel import Session  # noqa: E402

from app.db.engine import make_engine  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.queries import reward_components as q_rc  # noqa: E402
from app.queries import rollout_facets, rollout_list  # noqa: E402
from app.queries.rollout_list import RolloutFilters  # noqa: E402
from bench.analytics import PG, RUN, load_postgres, load_sqlite  # noqa: E402


def best(fn, k: int = 5) -> float:
    times = []
    for _ in range(k):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rollouts", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if a.db == "postgres":
            import psycopg
            from sqlalchemy.engine import make_url

            u = make_url(PG)
            admin = psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, password=u.password,
                                    dbname=u.database or "postgres", autocommit=True)
            admin.execute("DROP DATABASE IF EXISTS rollscope_bench_components")
            admin.execute("CREATE DATABASE rollscope_bench_components")
            url = u.set(database="rollscope_bench_components").render_as_string(hide_password=False)
        else:
            url = f"sqlite:///{Path(tmp) / 'b.db'}"
        engine = make_engine(url)
        upgrade(engine)
        t = time.perf_counter()
        (load_postgres if a.db == "postgres" else load_sqlite)(engine, a.rollouts, a.steps)
        with engine.begin() as conn:
            pks = [r[0] for r in conn.exec_driver_sql("SELECT pk FROM rollout")]
        rng = np.random.default_rng(1)
        correct, fmt = rng.random(len(pks)) < 0.5, rng.random(len(pks)).round(3)
        rows = ([(pk, "correct", float(c), 1.0) for pk, c in zip(pks, correct)]
                + [(pk, "format", float(f), 0.1) for pk, f in zip(pks, fmt)])
        with engine.begin() as conn:
            from app.db.engine import bulk_insert

            bulk_insert(conn, q_rc.RC, ("rollout_pk", "name", "score", "weight"), rows)
        with engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE")
            conn.commit()
        print(f"loaded {len(pks):,} rollouts, {2 * len(pks):,} components in {time.perf_counter() - t:.0f} s")
        f = RolloutFilters(component="correct", component_min=1.0)
        cols = rollout_list.list_columns()
        with Session(engine) as s:
            print(f"step_means (chart)          {best(lambda: q_rc.step_means(session=s, run_id=RUN)):8.1f} ms")
            print(f"filter, first page          {best(lambda: rollout_list.page(session=s, run_id=RUN, filters=f, columns=cols, limit=50)):8.1f} ms")  # noqa: E501
            first = rollout_list.page(session=s, run_id=RUN, filters=RolloutFilters(), columns=cols,
                                      sort="-component:format", limit=50)
            print(f"sort, first page            {best(lambda: rollout_list.page(session=s, run_id=RUN, filters=RolloutFilters(), columns=cols, sort='-component:format', limit=50)):8.1f} ms")  # noqa: E501
            print(f"sort, next page             {best(lambda: rollout_list.page(session=s, run_id=RUN, filters=RolloutFilters(), columns=cols, sort='-component:format', after=first['next'], limit=50)):8.1f} ms")  # noqa: E501
            print(f"filter, count               {best(lambda: rollout_facets.count(session=s, run_id=RUN, filters=f)):8.1f} ms")  # noqa: E501
        engine.dispose()
        if a.db == "postgres":
            admin.execute("DROP DATABASE rollscope_bench_components")


if __name__ == "__main__":
    main()
