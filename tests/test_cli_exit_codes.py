"""Every `rollscope` command says what its exit codes mean in its `--help`, and `rollscope worker`
refuses a spool folder that does not exist (exit 2, one line naming it) unless `--create`."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import typer
from typer.testing import CliRunner

from app.cli import app
from app.cli.exits import CODES
from tests.conftest import ROOT
from tests.helpers import run_cli


def _commands(group, prefix=()) -> list[tuple[str, ...]]:
    """Every command of the CLI as the words typed to run it (`("token", "create")`)."""
    out = []
    for name, cmd in sorted(group.commands.items()):
        if hasattr(cmd, "commands"):
            out += _commands(cmd, (*prefix, name))
        else:
            out.append((*prefix, name))
    return out


def test_every_command_help_lists_its_exit_codes():
    """`rollscope X --help` ends with an `Exit codes:` paragraph for every command the CLI has
    (a command added without one fails here), naming 0 and each of its own codes."""
    commands = _commands(typer.main.get_command(app))
    assert {" ".join(c) for c in commands} == set(CODES), "a command without exit codes in app/cli/exits.py"
    runner = CliRunner()
    for words in commands:
        res = runner.invoke(app, [*words, "--help"], terminal_width=400)
        assert res.exit_code == 0, (words, res.output)
        text = " ".join(res.output.split())  # rich wraps and frames; compare words
        assert "Exit codes: 0 " in text, (words, text[-500:])
        codes = re.findall(r"(?:^ |; )(\d+) ", text.split("Exit codes:", 1)[1])
        assert codes[0] == "0" and "2" in codes, (words, codes)
        for line in CODES[" ".join(words)]:
            assert line.split(" ", 1)[0] in codes, (words, line)
    worker = " ".join(runner.invoke(app, ["worker", "--help"], terminal_width=400).output.split())
    assert "a --spool folder that does not exist (without --create)" in worker


def _worker(*args: str, db: str) -> subprocess.CompletedProcess:
    """`rollscope --db DB worker --once ARGS`, in-process (tests.helpers.run_cli)."""
    return run_cli("--db", db, "worker", "--once", *args)


def test_a_missing_spool_folder_is_exit_2_naming_it_unless_create(tmp_path):
    """A mistyped --spool is one line naming the folder and exit 2, before any database is
    opened, and the folder is not created; with --create it is created and read."""
    db = f"sqlite:///{tmp_path / 'w.db'}"
    typo = tmp_path / "spoool" / "run"
    res = _worker("--spool", str(tmp_path), "--spool", str(typo), db=db)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        f"error: the spool folder {typo} does not exist (a mistyped path? give --create to create it)"]
    assert not typo.exists() and not (tmp_path / "spoool").exists()
    assert not (tmp_path / "w.db").exists()  # refused before the database was opened
    (tmp_path / "afile").write_text("x")
    res = _worker("--spool", str(tmp_path / "afile"), db=db)
    assert res.returncode == 2 and f"the spool folder {tmp_path / 'afile'} is not a folder" in res.stderr
    res = _worker("--spool", str(typo), "--create", db=db)
    assert res.returncode == 0, res.stderr
    assert typo.is_dir() and f"worker: created the spool folder {typo}" in res.stderr


def test_an_empty_spool_value_is_exit_2_not_the_working_folder(tmp_path, monkeypatch):
    """`--spool ""` (an unset `$SPOOL` in a script) or one of blanks is one line and exit 2,
    before the database is opened: never the working folder read as the spool; so is an empty
    ROLLSCOPE_WORKER__SPOOL_DIR when no --spool is given."""
    db = f"sqlite:///{tmp_path / 'w.db'}"
    monkeypatch.chdir(tmp_path)  # the working folder the empty value must not become
    for value in ("", "  "):
        res = _worker("--spool", value, db=db)
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip().splitlines() == [
            f"error: an empty --spool value ({value!r}): give a folder (an unset variable in a script?)"]
    res = run_cli("--db", db, "worker", "--once", env={"ROLLSCOPE_WORKER__SPOOL_DIR": ""})
    assert res.returncode == 2 and "ROLLSCOPE_WORKER__SPOOL_DIR is set but empty" in res.stderr, res.stderr
    assert not (tmp_path / "w.db").exists()  # refused before the database was opened
    worker = " ".join(CliRunner().invoke(app, ["worker", "--help"], terminal_width=400).output.split())
    assert "an empty --spool value" in worker


def test_serve_on_a_taken_port_is_exit_1_not_the_databases_3(tmp_path):
    """uvicorn exits 3 when it cannot start; `rollscope serve` says so in one line and exits 1,
    as its help says (3 means the database stayed unreachable)."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = subprocess.run([sys.executable, "-m", "app.cli", "--db", f"sqlite:///{tmp_path / 's.db'}", "serve",
                              "--port", str(port)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1] == (f"error: the server could not start on 127.0.0.1:{port} "
                                                   "(uvicorn's reason is above)")


def test_ingest_with_nothing_to_ingest_is_exit_2_and_touches_no_database(tmp_path):
    db = tmp_path / "never.db"
    res = subprocess.run([sys.executable, "-m", "app.cli", "--db", f"sqlite:///{db}", "ingest"], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "give files or folders" in res.stdout + res.stderr and not db.exists()
