"""`rollscope export --format otlp` from a real database, and reading the export back: the CLI
as a user runs it (a subprocess on a real SQLite file)."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import data_path
from tests.helpers import run_cli

REAL = data_path("realdata")


def rs(*args, db):
    """`rollscope ARGS` on `db`, in-process (tests.helpers.run_cli): the same entry point and exit codes."""
    return run_cli(*args, env={"ROLLSCOPE_DATABASE_URL": db})


@pytest.mark.slow
def test_export_otlp_and_ingest_again(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(REAL / "swe-agent", data / "swe-agent")
    shutil.copytree(REAL / "openhands", data / "openhands")
    db1, db2 = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    assert rs("ingest", str(data), "--run", "agents", db=db1).returncode == 0
    out = tmp_path / "agents.otlp.jsonl"
    r = rs("export", "--run", "agents", "--format", "otlp", "--out", str(out), db=db1)
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 3
    first = json.loads(lines[0])
    spans = first["resourceSpans"][0]["scopeSpans"][0]["spans"]
    names = [s["name"].split()[0] for s in spans]
    assert names[0] == "invoke_agent" and "chat" in names and "execute_tool" in names
    root_attrs = {a["key"]: a["value"] for a in spans[0]["attributes"]}
    assert root_attrs["rollscope.run"] == {"stringValue": "agents"}
    r = rs("ingest", str(out), db=db2)
    assert r.returncode == 0, r.stderr
    again = tmp_path / "again.jsonl"
    assert rs("export", "--run", "agents", "--format", "otlp", "--out", str(again), db=db2).returncode == 0
    assert again.read_text() == out.read_text()  # the same rollouts, span for span


def test_export_of_an_unknown_run_exits_1_naming_it_and_writes_nothing(tmp_path):
    db = f"sqlite:///{tmp_path / 'a.db'}"
    assert rs("ingest", str(REAL / "tau-bench"), "--run", "tau", db=db).returncode == 0
    out = tmp_path / "nope.jsonl"
    r = rs("export", "--run", "nope", "--out", str(out), db=db)
    assert r.returncode == 1 and "no run 'nope'" in r.stdout + r.stderr
    assert not out.exists()  # the API answers 404; the CLI leaves no empty file
    r = rs("export", "--run", "tau", "--out", str(out), db=db)
    assert r.returncode == 0 and len(out.read_text().splitlines()) == 3



def test_export_refuses_a_filter_value_the_api_refuses(tmp_path):
    """Where GET /api/v1/runs/{run}/export answers 422 (app.params.check_rollout_filters), the CLI
    exits 2 naming the option and the value, and writes no file (it wrote an empty one); good
    values still export."""
    db = f"sqlite:///{tmp_path / 'a.db'}"
    assert rs("ingest", str(REAL / "tau-bench"), "--run", "tau", db=db).returncode == 0
    out = tmp_path / "x.jsonl"
    for args, option, value in ((["--ending", "bogus"], "--ending", "bogus"), (["--flag", "bogus"], "--flag", "bogus"),
                                (["--reward-min", "nan"], "--reward-min", "nan"),
                                (["--format", "samples", "--ending", "nothing"], "--ending", "nothing")):
        r = rs("export", "--run", "tau", "--out", str(out), *args, db=db)
        said = r.stdout + r.stderr
        assert r.returncode == 2 and option in said and value in said, said
        assert not out.exists()
    r = rs("export", "--run", "tau", "--out", str(out), "--reward-min", "-1e9", "--ending", "submitted", db=db)
    assert r.returncode == 0, r.stdout + r.stderr
    assert out.exists()
