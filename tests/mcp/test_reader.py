"""app.mcp.reader on the real app in-process: twins read, links made, and every failure one short
line: the app's 404 and 422 messages, a 500 (a database missing its table), the read lock's 401."""
from __future__ import annotations

import shutil
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import anyio
import pytest

from app.config import Settings
from app.main import create_app
from app.mcp.reader import Reader, ReadError


def _call(fn, *args):
    """Run `fn(*args)` (async) in a fresh thread (a Playwright session may hold this one's loop)."""
    with ThreadPoolExecutor(1) as ex:
        return ex.submit(anyio.run, fn, *args).result()


async def _read(reader: Reader, path: str):
    try:
        return await reader.get(path)
    except ReadError as exc:
        return exc
    finally:
        await reader.aclose()


@pytest.fixture
def db(_sqlite_template, tmp_path) -> str:
    path = tmp_path / "rollscope.db"
    shutil.copyfile(_sqlite_template, path)
    return str(path)


def test_twins_and_the_apps_messages(db):
    app = create_app(Settings(database_url=f"sqlite:///{db}"))
    try:
        got = _call(_read, Reader.for_app(app, base_url="http://h:1"), "/runs.json")
        assert got["runs"] == []
        missing = _call(_read, Reader.for_app(app), "/runs/nope/steps/1.json")
        assert isinstance(missing, ReadError) and (missing.status, missing.message) == (404, "no run 'nope'")
        bad = _call(_read, Reader.for_app(app), "/runs/nope/rollouts.json?ending=x")
        assert bad.status == 422 and bad.message.startswith("ending must be one of submitted")
    finally:
        app.state.engine.dispose()


def test_an_app_failure_is_a_short_line_not_a_stack(db):
    app = create_app(Settings(database_url=f"sqlite:///{db}"))
    try:
        with sqlite3.connect(db) as conn:
            conn.execute("DROP TABLE run")
        failed = _call(_read, Reader.for_app(app), "/runs.json")
        assert isinstance(failed, ReadError) and failed.status == 500
        assert failed.message == "Rollscope failed on this request (HTTP 500); try again, or see the server's log"
    finally:
        app.state.engine.dispose()


def test_the_read_lock_is_a_401_naming_the_token(db):
    app = create_app(Settings(database_url=f"sqlite:///{db}", require_read_token=True))
    try:
        refused = _call(_read, Reader.for_app(app), "/runs.json")
        assert refused.status == 401 and "give `rollscope mcp` a read token" in refused.message
        assert "\n" not in refused.message
    finally:
        app.state.engine.dispose()
