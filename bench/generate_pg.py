"""Load N synthetic rollouts straight into Postgres with SQL (INSERT ... SELECT FROM
generate_series, no Python per row), for measuring the pages at 10 M rollouts (bench/analytics.py
`--runs`): going through the real ingest took 38 min for 10 M on a faster machine.

Shape: `runs` runs of N/runs rollouts each; per run `steps` training steps, groups of 8, tasks
`task-0000..0499`; endings (submitted, task_detected, truncated, length_cut, error 3%, 33% on one
step in 50: the incidents); rewards pass/fail or partial credit that climb with the step; token
counts, turns, staleness, latencies, mismatch figures; 5% of rollouts flagged with one rollout
finding (`flags` says which); the group findings ingest's group checks store (advantage_mismatch
skipped for every group, errored_reward_in_baseline for a group with an error,
zero_variance_group for a group whose kept members share one reward); 3 nodes per rollout (user,
assistant with a tool call, tool), one search document per rollout (the tool output: 12 words of
3,000, the word `result` in every one, `xylophone` in 10 rollouts of the first run). Then the
rollups: the first run's by the app's own `app.store.rollups.rebuild` (the code ingest runs per
batch), copied to the others (`copy_rollups`: every run draws the same figures).

Indexes and constraints of the loaded tables are dropped before the load and made again after
(the usual bulk-load order; the same definitions, read from the catalog). With `partitions`,
the tables are partitioned first (app/db/partition.py) and loaded partitioned.

Run: `nice -n 19 .venv/bin/python bench/generate_pg.py --rollouts 1000000 [--runs 50] [--steps 1000]
[--partitions 16] [--db NAME]`; prints the time of each stage and the database's size. The
database is dropped and made again.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import psycopg
import sqlalchemy as sa
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.db.engine import make_engine  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.db.partition import partition  # noqa: E402
from app.store import rollups  # noqa: E402

PG = os.environ.get("ROLLSCOPE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
LOADED = ("rollout", "node", "finding", "search_doc")
GROUP = 8
KINDS = ("token_drift", "empty_response", "unanswered_tool_call")
COMMON, RARE = "result", "xylophone"
NO_ADVANTAGES = "no advantages recorded for this group's rollouts"


def run_name(i: int) -> str:
    return f"bench-r{i:02d}"


def db_url(name: str) -> str:
    return make_url(PG).set(database=name).render_as_string(hide_password=False)


def recreate(name: str) -> None:
    u = make_url(PG)
    with psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, password=u.password,
                         dbname=u.database or "postgres", autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{name}"')


def drop(name: str) -> None:
    u = make_url(PG)
    with psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, password=u.password,
                         dbname=u.database or "postgres", autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _renice(conn) -> None:
    """The server process doing the load runs at the lowest priority too (others measure on this
    machine); possible when run as root or as the server's user, skipped otherwise."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    try:
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    except OSError:
        pass


def take_indexes(conn) -> list[str]:
    """Drop the indexes and constraints (but NOT NULL) of the LOADED tables, returning the
    statements that make them again, in order (primary keys and uniques before foreign keys)."""
    cons = conn.execute("""SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid), contype
                           FROM pg_constraint WHERE conrelid = ANY(%s::regclass[]) AND contype IN ('p','u','f')
                             AND conparentid = 0""", (list(LOADED),)).fetchall()
    idx = conn.execute("""SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i
                          WHERE i.indrelid = ANY(%s::regclass[]) AND i.indexrelid <> 'ix_search_doc_tsv'::regclass
                            AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)""",
                       (list(LOADED),)).fetchall()
    # foreign keys from other tables to these (they would block dropping a primary key)
    incoming = conn.execute("""SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
                               WHERE confrelid = ANY(%s::regclass[]) AND contype = 'f' AND conparentid = 0
                                 AND NOT conrelid = ANY(%s::regclass[])""", (list(LOADED), list(LOADED))).fetchall()
    again = []
    for t, name, d in incoming:
        conn.execute(f'ALTER TABLE {t} DROP CONSTRAINT "{name}"')
    for t, name, _, _ in sorted(cons, key=lambda c: c[3] != "f"):  # foreign keys first
        conn.execute(f'ALTER TABLE {t} DROP CONSTRAINT "{name}"')
    for name, _ in idx:
        conn.execute(f"DROP INDEX {name}")
    again += [f'ALTER TABLE {t} ADD CONSTRAINT "{n}" {d}' for t, n, d, k in cons if k != "f"]
    # a partitioned table's index reads "ON ONLY": made so, it would cover no partition (INVALID)
    again += [d.replace(" ON ONLY ", " ON ", 1) for _, d in idx]
    again += [f'ALTER TABLE {t} ADD CONSTRAINT "{n}" {d}' for t, n, d, k in cons if k == "f"]
    again += [f'ALTER TABLE {t} ADD CONSTRAINT "{n}" {d}' for t, n, d in incoming]
    return again


# One run's rollouts: i = 0..per_run-1 → step, group, member; `u` columns are uniform draws.
ROLLOUTS = """
INSERT INTO rollout (pk, run_id, rollout_id, attempt, step, group_id, group_index, group_size, agent, task_key,
    ending, ending_detail, reward, reward_status, policy_version_min, policy_version_max, n_nodes, n_turns,
    n_tool_calls, n_tokens, n_trained_tokens, n_branches, n_response_tokens, n_tool_errors, model_latency,
    tool_latency, staleness, mismatch_tokens, mismatch_abs_sum, mismatch_abs_max, mismatch_out_of_range, flags,
    content_hash, source_format, source_file, source_line, ingested_at)
SELECT pk, %(run)s::text, format('s%%s-g%%s-r%%s', lpad(step::text, 4, '0'), lpad(g::text, 3, '0'), k),
    0, step, format('s%%s-g%%s', lpad(step::text, 4, '0'), lpad(g::text, 3, '0')), k, 8, 'solver',
    'task-' || lpad(((step * 7 + g * 13) %% 500)::text, 4, '0'), ending,
    CASE ending WHEN 'error' THEN (ARRAY['sandbox_crash','tool_server_timeout','connection_reset'])[1 + (i %% 3)]
        WHEN 'truncated' THEN 'max_turns' WHEN 'length_cut' THEN 'max_output_tokens'
        WHEN 'submitted' THEN 'agent_completed' ELSE 'env_done' END,
    CASE WHEN ending = 'error' THEN NULL WHEN u2 < 0.5 THEN (u3 < base)::int::float8
         ELSE round(least(1, greatest(0, base + 0.3 * (u3 - 0.5) * 2))::numeric, 3)::float8 END,
    'ok', step - stale, step, 3, turns, turns - 1, tokens, (tokens * 0.6)::int, 1, (tokens * 0.6)::int,
    (u4 < 0.1)::int, turns * 0.8, turns * 0.3, stale, (tokens * 0.6)::int, tokens * 0.01, u5 * 0.5,
    (u5 * 5)::int, CASE WHEN u6 < 0.05 THEN jsonb_build_array((%(kinds)s::text[])[1 + (i %% 3)]) ELSE '[]' END,
    lpad(to_hex(pk), 64, '0'), 'rollscope/1', %(run)s::text || '.jsonl', i + 1, now()
FROM (
    SELECT i, %(first)s + i AS pk, i / %(per_step)s AS step, (i %% %(per_step)s) / 8 AS g, i %% 8 AS k,
        0.2 + 0.55 * (1 - exp(-2.5 * (i / %(per_step)s) / greatest(1, %(steps)s - 1))) AS base,
        CASE WHEN u1 < p_err THEN 'error' WHEN u1 < p_err + 0.05 THEN 'truncated'
             WHEN u1 < p_err + 0.08 THEN 'length_cut' WHEN u1 < p_err + 0.2 THEN 'task_detected'
             ELSE 'submitted' END AS ending,
        u2, u3, u4, u5, u6, 20 + (u7 * 1980)::int AS tokens, 1 + (u8 * 10)::int AS turns, (u4 * 3)::int AS stale
    FROM (SELECT i, random() u1, random() u2, random() u3, random() u4, random() u5, random() u6, random() u7,
                 random() u8, CASE WHEN (i / %(per_step)s) %% 50 = 17 THEN 0.33 ELSE 0.03 END AS p_err
          FROM generate_series(0, %(n)s - 1) i) d
) r
"""

# 3 nodes per rollout (user prompt, assistant with a tool call, tool output); words from a
# fixed list of 3,000 by the rollout's pk, so the search document below is the tool output.
NODES = """
INSERT INTO node (rollout_pk, idx, parent, role, sampled, content_len, tool_call_id, tool_name, tool_calls, message,
                  n_tokens)
SELECT r.pk, n.idx, CASE WHEN n.idx = 0 THEN NULL ELSE n.idx - 1 END, n.role, n.idx = 1, length(n.text),
    CASE WHEN n.idx = 2 THEN 'call-1' END, CASE WHEN n.idx = 2 THEN 'bash' END,
    CASE WHEN n.idx = 1 THEN '[{"id": "call-1", "name": "bash"}]'::jsonb END,
    jsonb_build_object('role', n.role, 'content', n.text), 10 + n.idx
FROM rollout r CROSS JOIN LATERAL (VALUES
    (0, 'user', 'Solve ' || r.task_key || ' in the repository.'),
    (1, 'assistant', 'I will run the tests first.'),
    (2, 'tool', tool_text(r.pk))) n(idx, role, text)
WHERE r.run_id = %(run)s
"""

DOCS = """
INSERT INTO search_doc (rollout_pk, run_id, node_idx, kind, role, truncated, text)
SELECT pk, run_id, 2, 'tool_output', 'tool', false,
    tool_text(pk) || CASE WHEN pk = ANY(%(rare)s::bigint[]) THEN ' xylophone' ELSE '' END
FROM rollout WHERE run_id = %(run)s
"""

FINDINGS = """
INSERT INTO finding (rollout_pk, kind, severity, node_idx, message)
SELECT pk, flags->>0, 'warning', 1, (flags->>0) || ' (bench)' FROM rollout WHERE run_id = %(run)s AND flags <> '[]'
"""

GROUP_FINDINGS = """
INSERT INTO finding (run_id, group_id, kind, severity, message)
SELECT run_id, group_id, f.kind, f.severity, f.message FROM (
    SELECT run_id, group_id, bool_or(ending = 'error') AS errored,
           count(DISTINCT reward) FILTER (WHERE ending <> 'error' AND reward IS NOT NULL) AS nvals,
           count(*) FILTER (WHERE ending <> 'error' AND reward IS NOT NULL) AS kept,
           min(reward) FILTER (WHERE ending <> 'error') AS one
    FROM rollout WHERE run_id = %(run)s GROUP BY run_id, group_id) g
CROSS JOIN LATERAL (VALUES
    ('advantage_mismatch', 'skipped', %(none)s, true),
    ('errored_reward_in_baseline', 'skipped', %(none)s, g.errored),
    ('zero_variance_group', 'warning', format('all %%s members in the baseline have reward %%s: std 0, no learning '
                                             'signal', g.kept, g.one), g.nvals = 1)) f(kind, severity, message, keep)
WHERE f.keep
"""

# word j of a text: (pk * P_j + j) mod 3000, P_j a prime: spread, and the same on every load
PRIMES = (7919, 104729, 1299709, 15485863, 32452843, 49979687, 67867967, 86028121, 104395301, 122949823,
          141650939, 160481183)
WORD = "'w' || lpad(((pk * {p} + {j}) % 3000)::text, 4, '0')"
TOOL_TEXT = ("CREATE OR REPLACE FUNCTION tool_text(pk bigint) RETURNS text LANGUAGE sql IMMUTABLE AS $$ "
             "SELECT 'tool result: ' || " + " || ' ' || ".join(WORD.format(p=p, j=j) for j, p in enumerate(PRIMES))
             + " $$")


def load(name: str, n: int, runs: int, steps: int, partitions: int, say=print) -> dict[str, float]:
    """Make database `name` afresh and load it (see the module docstring); returns seconds per
    stage. `partitions` 0: plain tables."""
    times: dict[str, float] = {}
    clock = [time.perf_counter()]

    def lap(stage: str) -> None:
        now = time.perf_counter()
        times[stage] = times.get(stage, 0.0) + now - clock[0]
        clock[0] = now

    recreate(name)
    engine = make_engine(db_url(name), writer=True)
    upgrade(engine)
    if partitions:
        partition(engine, partitions)
    lap("schema")
    per_run = n // runs
    per_step = max(GROUP, per_run // steps // GROUP * GROUP)
    u = make_url(db_url(name))
    with psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, password=u.password, dbname=name,
                         autocommit=True) as conn:
        _renice(conn)
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute("SET max_parallel_maintenance_workers = 0")  # two cores, shared
        conn.execute("SET synchronous_commit = off")
        conn.execute(TOOL_TEXT)  # 12 words of WORDS picked by the pk (inlined: no call per row)
        again = take_indexes(conn)
        conn.execute("DROP INDEX IF EXISTS ix_search_doc_tsv")  # left out of `again`: made last, timed alone
        lap("drop indexes")
        for r in range(runs):
            run = run_name(r)
            conn.execute("INSERT INTO run (id, name, type, created_at, extra) VALUES (%s, %s, 'train', now(), %s)",
                         (run, f"Benchmark run {r}", '{"model": "bench"}'))
            first = 1 + r * per_run
            rare = [first + k * (per_run // 10) for k in range(10)] if r == 0 else []
            args = dict(run=run, first=first, n=per_run, per_step=per_step, steps=steps, kinds=list(KINDS),
                        rare=rare, none=NO_ADVANTAGES)
            with conn.transaction():
                conn.execute("SELECT setseed(0.25)")  # every run draws the same figures: see `copy_rollups`
                conn.execute(ROLLOUTS, args)
                lap("rollouts")
                conn.execute(NODES, args)
                lap("nodes")
                conn.execute(FINDINGS, args)
                conn.execute(GROUP_FINDINGS, args)
                lap("findings")
                conn.execute(DOCS, args)
                lap("search docs")
            say(f"  run {r + 1}/{runs}: {per_run:,} rollouts; {sum(times.values()):.0f} s so far")
        for seq_table in ("rollout", "node", "finding", "search_doc"):
            conn.execute(f"SELECT setval(pg_get_serial_sequence('{seq_table}', 'pk'), "
                         f"(SELECT coalesce(max(pk), 1) FROM {seq_table}))")
        for stmt in again:
            conn.execute(stmt)
        lap("indexes")
        conn.execute("CREATE INDEX ix_search_doc_tsv ON search_doc USING gin (tsv)")
        lap("search index")
        conn.execute("VACUUM ANALYZE")
        for t in ("rollout", "node", "finding", "step_rollup", "task_rollup", "run_task_rollup"):
            conn.execute(f"ANALYZE {t}")  # a partitioned parent's own statistics
        lap("vacuum analyze")
    with engine.begin() as c:
        _renice(c.connection.driver_connection)
        rollups.rebuild(c, run_name(0))
        copy_rollups(c, run_name(0), [run_name(r) for r in range(1, runs)])
    lap("rollups")
    with engine.connect() as c:
        c.execute(sa.text("ANALYZE step_rollup; ANALYZE task_rollup; ANALYZE run_task_rollup"))
    engine.dispose()
    lap("rollups")
    return times


ROLLUPS = ("step_rollup", "task_rollup", "run_task_rollup")


def copy_rollups(conn: sa.Connection, source: str, targets: list[str]) -> None:
    """The rollups of run `source` (built by `app.store.rollups.rebuild`) copied to `targets`:
    exactly what the rebuild would make for them, since every run draws the same figures (one
    seed) and differs only in pks and texts, which no rollup reads. The rebuild of one run of
    200,000 rollouts takes minutes here; of 50, hours."""
    for t in ROLLUPS:
        cols = [c for c in conn.execute(sa.text(f"SELECT * FROM {t} LIMIT 0")).keys() if c not in ("pk", "run_id")]
        listed = ", ".join(cols)
        conn.execute(sa.text(f"INSERT INTO {t} (run_id, {listed}) SELECT r, {listed} FROM {t}, "
                             "unnest(CAST(:targets AS text[])) r WHERE run_id = :source"),
                     {"source": source, "targets": targets})


def size(name: str) -> int:
    u = make_url(db_url(name))
    with psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, dbname=name) as c:
        return c.execute("SELECT pg_database_size(current_database())").fetchone()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rollouts", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--steps", type=int, default=1_000, help="training steps per run")
    ap.add_argument("--partitions", type=int, default=16, help="0: plain tables")
    ap.add_argument("--db", default="rs_bench_generated", help="database name (dropped and made again)")
    a = ap.parse_args()
    t = time.perf_counter()
    times = load(a.db, a.rollouts, a.runs, a.steps, a.partitions)
    total = time.perf_counter() - t
    print(f"loaded {a.rollouts:,} rollouts ({a.runs} runs, {a.partitions or 'no'} partitions) in {total:.0f} s; "
          f"database {size(a.db) / 2**30:.1f} GB; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for stage, s in times.items():
        print(f"  {stage:16} {s:8.1f} s")


if __name__ == "__main__":
    main()
