"""A database that cannot be used is not an outage (app/db/unusable.py): a Postgres database or
role that does not exist, a connection option libpq does not know, a URL that does not parse, a
SQLite file in a folder that does not exist or a file that is not a SQLite database fail at once
(not after ROLLSCOPE_DB__RETRY_SECONDS) with one line naming the database, password masked, and
what is wrong; exit code 2, no traceback unless --debug. The real CLI against the real Postgres
and real files; the worker too, at start and when its database is dropped under it."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from sqlalchemy.engine import make_url

from app.worker.run import wait_for
from ingest.formats.native import write_line
from tests.conftest import PG_URL, ROOT
from tests.helpers import rollout, run_cli
from tests.worker import new_pg_database, start_worker


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    """The real `rollscope` in a new interpreter (its entry point and `--debug` traceback)."""
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env={**os.environ, **env}, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def _pg(**parts) -> str:
    return make_url(PG_URL).set(**parts).render_as_string(hide_password=False)


@pytest.mark.postgres
@pytest.mark.slow
def test_an_unusable_database_fails_at_once_naming_it_and_what_is_wrong(tmp_path):
    data = tmp_path / "r.jsonl"
    data.write_bytes(write_line(rollout("a")))
    (tmp_path / "not-a-db.db").write_text("hello, I am not SQLite\n" * 100)
    cases = [  # (URL, what the line says is wrong)
        (_pg(database="rs_nope_no_such_db", password="s3cret-pw"), 'database "rs_nope_no_such_db" does not exist'),
        (_pg(username="rs_nobody_no_such_role", password="s3cret-pw"), 'role "rs_nobody_no_such_role" does not exist'),
        (_pg(query={"bogus_option": "1"}), 'invalid connection option "bogus_option"'),
        (f"sqlite:///{tmp_path / 'no-such-folder' / 'x.db'}",
         f"its folder {tmp_path / 'no-such-folder'} does not exist"),
        (f"sqlite:///{tmp_path / 'not-a-db.db'}", f"{tmp_path / 'not-a-db.db'} is not a SQLite database"),
    ]
    env = {"ROLLSCOPE_DB__RETRY_SECONDS": "30"}  # an outage would be waited for this long
    (tmp_path / "spool").mkdir()
    for url, why in cases:
        for args in (("ingest", str(data)), ("worker", "--once", "--spool", str(tmp_path / "spool"))):
            t0 = time.monotonic()
            out = run_cli("--db", url, *args, env=env)  # in-process: the same main(), no interpreter start
            took = time.monotonic() - t0
            lines = out.stderr.strip().splitlines()
            assert out.returncode == 2, (url, args, out.stderr)
            assert took < 15, (url, args, took)  # not the 30 s retry budget
            assert "retrying" not in out.stderr and "Traceback" not in out.stderr, out.stderr
            assert "s3cret-pw" not in out.stderr + out.stdout, out.stderr
            shown = make_url(url).render_as_string(hide_password=True)
            assert lines[0] == f"database: {shown}", lines
            assert len(lines) == 2 and lines[1] == (f"error: the database {shown} cannot be used: {why} "
                                                    "(not retried: waiting will not fix this)"), lines
    debug = _cli("--debug", "--db", cases[0][0], "ingest", str(data), env=env)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_a_url_that_does_not_parse_is_named_with_its_password_masked(tmp_path):
    out = run_cli("--db", "postgresql://postgres:s3cret-pw@127.0.0.1:notaport/x", "quarantine")
    assert out.returncode == 2 and "Traceback" not in out.stderr and "s3cret-pw" not in out.stderr
    assert "postgresql+psycopg://postgres:***@127.0.0.1:notaport/x" in out.stderr and "not a valid URL" in out.stderr
    out = run_cli("--db", "mysql://root:s3cret-pw@x/y", "quarantine")
    assert out.returncode == 2 and "s3cret-pw" not in out.stderr and "mysql://root:***@x/y" in out.stderr, out.stderr


@pytest.mark.postgres
def test_a_worker_whose_database_is_dropped_stops_with_one_line(tmp_path):
    # An outage is waited out for as long as the worker runs; a database that no longer exists
    # is not an outage: the worker says so and stops (exit 2) instead of retrying forever.
    from tests.conftest import _pg_admin

    name, url = new_pg_database("rs_dropped")
    spool = tmp_path / "spool" / "d"
    spool.mkdir(parents=True)
    (spool / "r.jsonl").write_bytes(write_line(rollout("a")))
    proc = start_worker(url, tmp_path / "spool")
    try:
        import sqlalchemy as sa

        from app.db.engine import make_engine

        engine = make_engine(url)

        def stored() -> int:
            try:
                with engine.connect() as conn:
                    return conn.execute(sa.text("SELECT count(*) FROM rollout")).scalar_one()
            except sa.exc.DBAPIError:
                return -1

        assert wait_for(lambda: stored() == 1, 60)
        engine.dispose()
        with _pg_admin() as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        err = proc.communicate(timeout=30)[1].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        with _pg_admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    lines = err.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in err, err[-3000:]
    assert lines[-1].startswith(f"error: the database {make_url(url).render_as_string(hide_password=True)} "
                                f'cannot be used: database "{name}" does not exist'), lines
