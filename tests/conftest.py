"""Fixtures: a fresh database per test, on SQLite (a real file) and on the real Postgres.

Postgres: `ROLLSCOPE_TEST_POSTGRES_URL` (default postgresql+psycopg://postgres@127.0.0.1:5432/test)
names a server where each test gets its own database, dropped afterwards. If the server is not
reachable the Postgres tests fail rather than skip: `.ci/run` starts it.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from app.config import Settings, get_settings
from app.db.engine import make_engine
from app.main import create_app
from app.db.migrate import upgrade

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SHARED = ROOT.parent / "shared"
PG_URL = os.environ.get("ROLLSCOPE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def data_path(*parts: str) -> Path:
    """A test input: the committed copy under tests/fixtures, else ../shared (same layout)."""
    committed = FIXTURES.joinpath(*parts)
    return committed if committed.exists() else SHARED.joinpath(*parts)


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


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path):
    """A URL of an empty database: a SQLite file, or a fresh Postgres database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'rollscope.db'}"
        return
    name = f"rs_test_{uuid.uuid4().hex[:12]}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with _pg_admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def engine(db_url):
    eng = make_engine(db_url, writer=True)
    upgrade(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def client(db_url, engine):
    app = create_app(Settings(database_url=db_url))
    with TestClient(app) as c:
        yield c
    app.state.engine.dispose()


@pytest.fixture(scope="session")
def browser():
    """Debian's chromium (never a downloaded browser), headless."""
    from playwright.sync_api import sync_playwright

    from tests.browser import ARGS, CHROMIUM

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()
