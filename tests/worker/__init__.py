"""What the worker tests share: a fresh Postgres database, and the real worker as a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from sqlalchemy.engine import make_url

from tests.conftest import PG_URL, ROOT, _pg_admin


def new_pg_database(prefix: str) -> tuple[str, str]:
    """(name, URL) of a new, empty Postgres database on the test server; drop it when done."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, make_url(PG_URL).set(database=name).render_as_string(hide_password=False)


def start_worker(url: str, spool_root: Path) -> subprocess.Popen:
    """`rollscope worker --spool spool_root` on `url`, polling every 50 ms; stderr is piped."""
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": url}
    return subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--spool", str(spool_root), "--poll", "0.05"],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop_worker_and_drop(proc: subprocess.Popen, engine, name: str, admin=_pg_admin) -> str:
    """SIGTERM the worker and drop its database (through `admin`, a connection factory); returns
    the worker's stderr."""
    import signal

    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=60)[1].decode()
    engine.dispose()
    with admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return err


def rollouts_stored(engine) -> int:
    """Rollouts in the database, or -1 while the worker has not created the tables yet."""
    import sqlalchemy as sa

    from app.db import models

    try:
        with engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(models.Rollout.__table__)).scalar_one()
    except sa.exc.DBAPIError:  # not migrated yet
        return -1
