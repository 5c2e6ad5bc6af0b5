"""The CLI's start-up: `rollscope --help` imports no database, web or array library (they cost
most of a second on this machine), and a database already at the migration head is opened
without Alembic (app/db/migrate.py `at_head`). Each run in a fresh interpreter, the real entry
point, whose loaded modules are read back from `sys.modules`."""
from __future__ import annotations

import json
import os
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


@pytest.mark.parametrize(("args", "named"), [
    (["ingest", "a.jsonl", "--db", "sqlite:///x.db"], "ingest"),  # --db hoisted before the command
    (["--db=sqlite:///x.db", "token", "list"], "token"),
    (["rebuild-analytics"], "rebuild-analytics"),
    (["--help"], None), ([], None), (["ingst", "a.jsonl"], None),  # help and typos: the whole app answers
    (["--db", "sqlite:///ingest"], None),  # the URL is not a command
])
def test_main_builds_only_the_command_it_runs(args, named):
    from app.cli import COMMANDS, build, command_named, hoist_db

    assert command_named(hoist_db(args)) == named
    cli = build(named)
    built = [c.name for c in cli.registered_commands] + [g.name for g in cli.registered_groups]
    assert sorted(built) == sorted([named] if named else COMMANDS)


def test_a_command_built_alone_parses_as_in_the_whole_app(tmp_path, monkeypatch):
    """The same words give the same result through the one-command app `main` runs and the whole
    app the tests invoke: the group's `--db` and the command's own options both parse."""
    from typer.testing import CliRunner

    from app.cli import app, build, common

    db = f"sqlite:///{tmp_path / 'x.db'}"
    # `--db` exports the URL to this process's environment (common.choose_database): undone after
    # the test, or every later subprocess of this test worker would inherit it
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db)
    monkeypatch.delenv("ROLLSCOPE_DB__URL", raising=False)
    monkeypatch.setattr(common, "_db_source", common._db_source)
    for cli in (app, build("link")):
        res = CliRunner().invoke(cli, ["--db", db, "link", "--base", "http://h:1", "run-1", "r-2"])
        assert res.exit_code == 0, res.output
        assert res.output.strip().startswith("http://h:1/runs/run-1/"), res.output


def test_printing_a_string_compiles_no_highlighter(capsys):
    """The consoles print strings as given: rich's default highlighter compiles its regular
    expressions at the first string printed (13 ms of a CLI start here)."""
    from rich.highlighter import ReprHighlighter

    from app.cli.common import console, out

    calls = []
    original = ReprHighlighter.highlight
    ReprHighlighter.highlight = lambda self, text: calls.append(text) or original(self, text)
    try:
        console.print("database: sqlite:////tmp/x.db 12 rows", markup=False)
        out.print("1 new, 0 replaced")
    finally:
        ReprHighlighter.highlight = original
    assert calls == []
    assert "12 rows" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "said"), [
    (["ingest", "a.jsonl", "--db"], "'--db': needs a value: a database URL"),
    (["--db=", "ingest", "a.jsonl"], "'--db': needs a value"),
    (["ingest", "--db", "--run", "x", "a.jsonl"], "'--db': needs a value"),  # an option is not a URL
    (["--db", "ingest", "a.jsonl"], "'--db': needs a value"),  # nor is a command's name
    (["--db", "", "token", "list"], "'--db': needs a value"),  # nor an empty word (it used the default)
    (["ingest", "--db", "sqlite:///a.db", "a.jsonl", "--db=sqlite:///b.db"],
     "'--db': given 2 times (sqlite:///a.db, sqlite:///b.db): name one database"),
])
def test_a_db_option_without_one_database_is_a_usage_error_naming_it(args, said, tmp_path):
    """`--db` with no value used to say "No such option: --db"; two different values took the
    later one silently. Both are usage errors (exit code 2) naming `--db`, from the real CLI."""
    proc = subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and said in proc.stderr + proc.stdout, proc.stderr + proc.stdout
    assert "No such option" not in proc.stderr


def test_the_same_database_named_twice_is_one_database():
    from app.cli import hoist_db

    assert hoist_db(["ingest", "--db", "sqlite:///a.db", "x", "--db=sqlite:///a.db"]) == \
        ["--db", "sqlite:///a.db", "ingest", "x"]
