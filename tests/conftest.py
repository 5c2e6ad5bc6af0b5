"""Fixtures: a fresh database per test, on SQLite (a real file) and on the real Postgres.

Every test gets its own database, already migrated: each pytest(-xdist) process migrates one
template once (a SQLite file; a Postgres database) and each test gets a copy of it (a file copy;
`CREATE DATABASE ... TEMPLATE`), which is 5-50 times cheaper than migrating a new one.
`empty_db_url` gives an empty, unmigrated database instead, for tests of the migrations. A test
marked `with_demo` gets, in `db_url`, a copy of a template that also holds the demo run
(`demo_jsonl` ingested: 1,920 rollouts, 20-60 s to ingest here), ingested once per process.
(Not one xdist group: `--dist loadgroup` groups nothing under pytest 9.2, whose items no longer
read the `_nodeid` xdist rewrites.)

Postgres: `ROLLSCOPE_TEST_POSTGRES_URL` (default postgresql+psycopg://postgres@127.0.0.1:5432/test)
names a server where each test gets its own database, dropped afterwards. If the server is not
reachable the Postgres tests fail rather than skip: `.ci/run` starts it. Tests on Postgres carry
the `postgres` marker (`-m "not postgres"` runs the rest).
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from app.config import Settings, get_settings
from app.db.engine import make_engine
from app.db.migrate import upgrade
from app.main import create_app

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
PG_URL = os.environ.get("ROLLSCOPE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def data_path(*parts: str) -> Path:
    """A test input under tests/fixtures (the handed cases, real traces, tokenizers)."""
    return FIXTURES.joinpath(*parts)


def _pg_admin():
    u = make_url(PG_URL)
    return psycopg.connect(host=u.host, port=u.port or 5432, user=u.username, password=u.password,
                           dbname=u.database or "postgres", autocommit=True)


@pytest.fixture(autouse=True)
def _fresh_settings():
    """`get_settings()` reads the environment once per process; tests that set it (monkeypatch)
    and run the CLI in-process need it read again."""
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


DIALECTS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

# The files that cost a worker 40 s or more (`make test`'s --durations and a JUnit report,
# 2026-12-07, heaviest first). `make test` hands out whole files (`--dist loadfile`: a module's
# fixtures are made once, by the one worker running it) in collection order; these go first, so
# that the run does not end on one of them while the other worker idles.
HEAVY_FIRST = (
    "web/test_page_sweep.py", "store/test_export_roundtrip.py", "analytics/test_search.py",
    "browser/test_live.py", "producers/test_verifiers.py", "web/test_attempts_and_display.py",
    "producers/test_inspect.py", "mcp/test_mcp_server.py", "analytics/test_step_alerts.py",
    "web/test_urls_and_query_values.py", "api/test_schemathesis.py", "browser/test_paired.py",
    "browser/test_charts_layout.py", "browser/test_views.py", "worker/test_crash_safety.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    """`HEAVY_FIRST`'s files first, in its order; every other test after them as collected."""
    here = Path(__file__).parent
    gone = [name for name in HEAVY_FIRST if not (here / name).exists()]
    if gone:
        raise pytest.UsageError(f"tests/conftest.py HEAVY_FIRST names files that are not there: {gone}")
    rank = {name: k for k, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.relative_to(here).as_posix(), len(rank)))


def _pg_url(name: str) -> str:
    return make_url(PG_URL).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory) -> Path:
    """One migrated SQLite file per test process, its WAL folded in so the file alone is the
    whole database."""
    path = tmp_path_factory.mktemp("template") / "rollscope.db"
    eng = make_engine(f"sqlite:///{path}", writer=True)
    upgrade(eng)
    eng.dispose()
    _fold_wal(path)
    return path


@pytest.fixture(scope="session")
def demo_jsonl(tmp_path_factory) -> Path:
    """The demo run as `rollscope demo` writes it (ingest/demo: run `demo-grpo`, 30 steps of 8
    groups of 8, the step-18 sandbox crash; no tokenizer file), written once per test process.
    Shared: read it, never change it."""
    from ingest import demo

    path = tmp_path_factory.mktemp("demo") / "demo.jsonl"
    demo.write(path, tokenizer=False)
    return path


def _ingest_demo(url: str, demo_path: Path) -> None:
    from tests.helpers import ingest

    eng = make_engine(url, writer=True)
    try:
        assert ingest(eng, demo_path).ok
    finally:
        eng.dispose()


@pytest.fixture(scope="session")
def sqlite_demo_template(_sqlite_template, demo_jsonl, tmp_path_factory) -> Path:
    """A migrated SQLite file holding the demo run (`demo_jsonl` ingested through the real
    pipeline), made once per test process, its WAL folded in: copy it, never open it."""
    path = tmp_path_factory.mktemp("demo-template") / "rollscope.db"
    shutil.copyfile(_sqlite_template, path)
    _ingest_demo(f"sqlite:///{path}", demo_jsonl)
    _fold_wal(path)
    return path


def _fold_wal(path: Path) -> None:
    """Checkpoint the SQLite file's WAL into it, so the file alone is the whole database."""
    conn = sqlite3.connect(path)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    wal = path.with_name(path.name + "-wal")
    assert busy == 0 and (not wal.exists() or wal.stat().st_size == 0), "the template's WAL is not folded in"


@pytest.fixture(scope="session")
def _pg_dropper():
    """Drops the tests' Postgres databases in the background, all of them done before the
    session ends. A drop waits for a checkpoint (0.1-1.3 s here under load); four at once share
    one, which made drops about four times cheaper each."""
    def drop(name: str) -> None:
        with _pg_admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="pg-drop") as pool:
        futures = []
        yield lambda name: futures.append(pool.submit(drop, name))
        for f in futures:
            f.result()


@pytest.fixture(scope="session")
def _pg_template(_pg_dropper) -> str:
    """One migrated Postgres database per test process, the template of each test's database
    (a template must have no open connection while it is copied); dropped at the end."""
    name = f"rs_tpl_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_{uuid.uuid4().hex[:8]}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        eng = make_engine(_pg_url(name), writer=True)
        upgrade(eng)
        eng.dispose()
        yield name
    finally:
        _pg_dropper(name)


@pytest.fixture(scope="session")
def _pg_demo_template(_pg_template, _pg_dropper, demo_jsonl) -> str:
    """A Postgres database holding the demo run (as `sqlite_demo_template`), made once per test
    process from the migrated template; the template of `with_demo` tests' databases."""
    name = f"rs_demo_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_{uuid.uuid4().hex[:8]}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{_pg_template}"')
    try:
        _ingest_demo(_pg_url(name), demo_jsonl)
        yield name
    finally:
        _pg_dropper(name)


def _database(request, tmp_path, *, migrated: bool):
    """A fresh database of the test's dialect, empty or a copy of the migrated template (of the
    demo template for a test marked `with_demo`)."""
    demo_run = migrated and request.node.get_closest_marker("with_demo") is not None
    if request.param == "sqlite":
        path = tmp_path / "rollscope.db"
        if migrated:
            shutil.copyfile(request.getfixturevalue("sqlite_demo_template" if demo_run else "_sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    source = request.getfixturevalue("_pg_demo_template" if demo_run else "_pg_template")
    template = f' TEMPLATE "{source}"' if migrated else ""
    drop = request.getfixturevalue("_pg_dropper")
    name = f"rs_test_{uuid.uuid4().hex[:12]}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"{template}')
    try:
        yield _pg_url(name)
    finally:
        drop(name)


@pytest.fixture(params=DIALECTS)
def db_url(request, tmp_path):
    """A URL of a fresh database at the latest schema: a SQLite file, or a Postgres database."""
    yield from _database(request, tmp_path, migrated=True)


@pytest.fixture(params=DIALECTS)
def empty_db_url(request, tmp_path):
    """A URL of a fresh, empty (unmigrated) database: a SQLite file, or a Postgres database."""
    yield from _database(request, tmp_path, migrated=False)


@pytest.fixture
def engine(db_url):
    """A writer engine on `db_url` (already migrated)."""
    eng = make_engine(db_url, writer=True)
    yield eng
    eng.dispose()


@pytest.fixture
def client(db_url, engine):
    app = create_app(Settings(database_url=db_url))
    with TestClient(app) as c:
        yield c
    app.state.engine.dispose()
