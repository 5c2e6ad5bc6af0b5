"""The CLI's start-up: `rollscope --help` imports no database, web or array library (they cost
most of a second on this machine), and a database already at the migration head is opened
without Alembic (app/db/migrate.py `at_head`). Each run in a fresh interpreter, the real entry
point, whose loaded modules are read back from `sys.modules`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("sqlalchemy", "fastapi", "numpy")

# Runs `main()` with the given arguments, then prints the top-level packages it loaded as JSON.
PROBE = """
import json, sys
sys.argv = ["rollscope", *json.loads(sys.argv[1])]
from app.cli import main
try:
    main()
except SystemExit:
    pass
sys.__stdout__.write("\\nMODULES " + json.dumps(sorted({m.split(".")[0] for m in sys.modules})) + "\\n")
"""


def loaded(*args: str, env: dict | None = None, cwd: Path | None = None) -> set[str]:
    """Top-level packages imported by `rollscope ARGS` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(args))], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=env, timeout=120)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("MODULES ")]
    assert line, proc.stdout + proc.stderr
    return set(json.loads(line[-1].removeprefix("MODULES ")))


@pytest.mark.parametrize("args", [["--help"], ["ingest", "--help"], ["export", "--help"]])
def test_help_imports_no_database_web_or_numpy(args):
    mods = loaded(*args)
    assert "typer" in mods  # the probe really ran the CLI
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))


def test_a_database_at_the_head_is_opened_without_alembic(tmp_path):
    import os

    from tests.helpers import rollout, write_jsonl

    path = write_jsonl(tmp_path / "a.jsonl", [rollout("a1")])
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    first = loaded("ingest", str(path), env=env, cwd=tmp_path)  # a new database: migrated
    assert "alembic" in first and "sqlalchemy" in first
    again = loaded("ingest", str(path), env=env, cwd=tmp_path)  # at the head: one SELECT, no Alembic
    assert "alembic" not in again and "jinja2" not in again
    assert "click" not in again  # typer's own copy serves; the exit code does not import click's
