"""The real `trackio` (the `producers` extra, pinned in pyproject.toml) writes a project offline,
in local mode; Rollscope ingests it through the CLI and the HTTP app shows it, compared field by
field with what trackio itself reads back (`SQLiteStorage.get_traces` / `get_logs`, the
dashboard's own readers).

The project (tests/producers/trackio_writer.py): one run, 3 steps, each a `trackio.log()` of a
list of 4 traces (one tool call, two parallel calls, a tool call that fails with a tool span in
status `error`, no tool) with reward / advantage / policy version / finish reason / task id in
the metadata (a `group_id` in steps 0 and 1; step 2 names none, so the logged list is the group),
scalars beside them, and one single trace (not in a list) at step 2.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

# The `producers` extra (make install): the real library, never skipped. It runs in the writer's
# own process only (importing it here would read TRACKIO_DIR from this process's environment).
assert importlib.util.find_spec("trackio"), "trackio is missing: pip install -e '.[test,producers]'"

from tests.conftest import ROOT

WRITER = Path(__file__).with_name("trackio_writer.py")
RS = Path(sys.executable).with_name("rollscope")
TRACKIO_VERSION = "0.43.0"


def _writer_env(trackio_dir: Path, **extra: str) -> dict:
    """Local mode: no Space, server, bucket or dataset, no Hub token, Hub offline."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRACKIO_", "HF_", "SPACE_", "GRADIO_")) and k not in ("SYSTEM",)}
    env.update(TRACKIO_DIR=str(trackio_dir), HF_HUB_OFFLINE="1", HF_HOME=str(trackio_dir.parent / "hf-home"),
               **extra)
    return env


def _write(base: Path, **env: str) -> dict:
    trackio_dir = base / "trackio"
    trackio_dir.mkdir(parents=True)
    out = base / "trackio-read-back.json"
    done = subprocess.run([sys.executable, str(WRITER), str(out)], env=_writer_env(trackio_dir, **env),
                          capture_output=True, text=True, cwd=base, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    got = json.loads(out.read_text())
    got["dir"] = trackio_dir
    got["db"] = trackio_dir / f"{got['project']}.db"
    return got


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> dict:
    return _write(tmp_path_factory.mktemp("trackio-sqlite"))


@pytest.fixture(scope="module")
def jsonl_project(tmp_path_factory) -> dict:
    return _write(tmp_path_factory.mktemp("trackio-jsonl"), TRACKIO_STORAGE_MODE="jsonl")


def ingest(db_url: str, *paths: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": db_url}
    return subprocess.run([str(RS), "ingest", *map(str, paths)], env=env, capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=300)


def _rollouts(client, run: str) -> dict[str, dict]:
    out, url = {}, f"/api/v1/runs/{quote(run, safe='')}/rollouts?limit=1000"
    page = client.get(url)
    assert page.status_code == 200, page.text
    for item in page.json()["items"]:
        out[item["rollout_id"]] = item
    return out


def _natural_group(t: dict, sizes: dict) -> tuple[str, int, int] | None:
    return ((f"{t['_log_id']}:{t['key']}", t["index"], sizes[(t["_log_id"], t["key"])])
            if t["index"] is not None else None)


def _log_ids(db: Path) -> dict[str, str]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT id, log_id FROM traces"))


def test_trackio_writes_offline(project):
    assert project["version"] == TRACKIO_VERSION
    assert project["connections"] == []  # nothing left the machine
    assert len(project["traces"]) == 13


def test_storage_is_orjson_blobs(project):
    """What the reader relies on: `messages`, `metadata`, `spans` (and the metrics row) are
    orjson bytes stored as BLOBs in TEXT columns, not compressed; non-finite numbers are the
    strings "NaN"/"Infinity"."""
    with sqlite3.connect(project["db"]) as conn:
        kinds = set(conn.execute("SELECT typeof(messages), typeof(metadata), typeof(spans) FROM traces"))
        metrics = conn.execute("SELECT typeof(metrics), metrics FROM metrics WHERE step = 1").fetchone()
    assert kinds == {("blob", "blob", "blob")}
    assert metrics[0] == "blob" and b'"train/loss":"NaN"' in metrics[1]


def test_project_db_through_the_api(db_url, client, project):
    done = ingest(db_url, project["db"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "13 new" in done.stdout
    rows = _rollouts(client, project["run"])
    traces = {t["id"]: t for t in project["traces"]}
    assert set(rows) == set(traces)
    log_ids = _log_ids(project["db"])
    for t in traces.values():
        t["_log_id"] = log_ids[t["id"]]
    sizes: dict = {}
    for t in traces.values():
        if t["index"] is not None:
            sizes[(t["_log_id"], t["key"])] = sizes.get((t["_log_id"], t["key"]), 0) + 1
    logs = {log["step"]: log for log in project["logs"]}

    for tid, t in traces.items():
        row, meta = rows[tid], t["metadata"]
        assert row["step"] == t["step"]
        assert row["reward"] == meta.get("reward", meta.get("score"))
        assert row["advantage"] == meta.get("advantage")
        assert row["policy_version_min"] == meta.get("policy_version")
        assert row["task_key"] == meta.get("task_id")
        if "group_id" in meta:
            assert row["group_id"] == meta["group_id"]
        elif (g := _natural_group(t, sizes)) is not None:
            assert (row["group_id"], row["group_index"], row["group_size"]) == g
        else:
            assert row["group_id"] is None
        calls = [c for m in t["messages"] for c in (m.get("tool_calls") or [])]
        assert row["n_tool_calls"] == len(calls)
        failed = [s for s in t["spans"] if s["kind"] == "tool" and s.get("status") == "error"]
        assert row["n_tool_errors"] == len(failed)
        assert row["n_nodes"] == len(t["messages"])
        assert row["ending"] == ("submitted" if meta.get("finish_reason") == "stop" else "unknown")
        assert not {"unpaired_tool_result", "ambiguous_tool_result"} & set(row["flags"] or [])

        detail = client.get(f"/api/v1/runs/{quote(project['run'], safe='')}/rollouts/{quote(tid, safe='')}").json()
        env = detail["envelope"]
        assert env["run"]["name"] == t["run"]
        # the scalars logged beside the traces (trackio's own get_logs), numbers as numbers, NaN as missing
        for key, value in logs[t["step"]].items():
            if key in ("step", "timestamp"):
                continue
            assert env["metrics"][key] == (None if isinstance(value, float) and math.isnan(value) else value)
        # every generation span became the call of its assistant message: model, usage, times
        gens = [s for s in t["spans"] if s["kind"] == "generation"]
        assert len(env["calls"]) == len(gens)
        for call, span in zip(env["calls"], gens):
            usage = span["usage"]
            assert call["model"] == span["model"]
            assert call["usage"]["input_tokens"] == usage.get("input_tokens", usage.get("prompt_tokens"))
            assert call["usage"]["output_tokens"] == usage.get("output_tokens", usage.get("completion_tokens"))
            assert call["time"]["end"] - call["time"]["start"] == pytest.approx(1.0)
            assert call["extra"]["span_id"] == span["id"]
        assert env["extra"].get("metadata", {}).get("env") == meta.get("env")

        # the page's twin pairs every tool call with its result, by id
        page = client.get(f"/runs/{quote(project['run'], safe='')}/rollouts/{quote(tid, safe='')}.json").json()
        messages = page["messages"]
        assert [m["role"] for m in messages] == [m["role"] for m in t["messages"]]
        by_idx = {m["idx"]: m for m in messages}
        paired = [(c["id"], by_idx[c["result_node"]]["answers"]["id"]) for m in messages for c in m["tool_calls"]]
        assert paired == [(c["id"], c["id"]) for c in calls]

    # re-ingesting adds nothing
    again = ingest(db_url, project["db"])
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 new, 0 replaced, 13 unchanged" in again.stdout
    assert len(_rollouts(client, project["run"])) == 13
    assert all(r["n_attempts"] in (None, 1) for r in _rollouts(client, project["run"]).values())


def test_static_export_parquet_is_the_same_content(db_url, client, project):
    """`aux/traces.parquet` of a static Space export (with `metrics.parquet` one folder up for the
    scalars) stores exactly what the database does: ingesting the database after it changes nothing."""
    static = project["dir"].parent / "static"
    done = ingest(db_url, static / "aux" / "traces.parquet")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "13 new" in done.stdout
    again = ingest(db_url, project["db"])
    assert again.returncode == 0, again.stdout + again.stderr
    assert "0 new, 0 replaced, 13 unchanged" in again.stdout
    assert len(_rollouts(client, project["run"])) == 13


def test_trackio_dir_folder(engine, project, tmp_path):
    """The TRACKIO_DIR folder: the .db is read; its Parquet copy beside it is not read twice; the
    session files, metrics/configs Parquet and the lock file are skipped with a word; nothing is
    rejected and no -wal/-shm file is left in the folder."""
    from app.worker.sync import ingest_paths
    from ingest.formats.base import ReadContext

    folder = tmp_path / "trackio"
    shutil.copytree(project["dir"], folder)
    before = sorted(p.name for p in folder.iterdir())
    report = ingest_paths(engine, [folder], ReadContext())
    assert report.errors == []
    assert report.total.inserted == 13
    notes = {Path(f.path).relative_to(folder).as_posix(): (f.format, f.result.inserted, f.note) for f in report.files}
    assert notes.pop("rl-project.db") == ("trackio", 13, None)
    assert "not read twice" in notes.pop("rl-project_traces.parquet")[2]
    for name in ("rl-project.parquet", "rl-project_configs.parquet"):
        assert "(no traces): not read" in notes.pop(name)[2]
    sessions = [k for k in notes if k.startswith("traces/rl-project/grpo-run/") and k.endswith(".jsonl")]
    assert len(sessions) == 13 and all("trace session file" in notes.pop(k)[2] for k in sessions)
    assert notes == {}
    assert [Path(p).name for p, _ in report.skipped] == ["rl-project.lock"]
    assert sorted(p.name for p in folder.iterdir()) == before


def test_inbox_fragments_match_trackios_import(jsonl_project, tmp_path):
    """TRACKIO_STORAGE_MODE=jsonl (trackio's choice on a network filesystem): the JSONL inbox
    fragments are read with the ids trackio's own import gives (`<run_id>:<log_id>:<key>:<i>`)."""
    from ingest.formats import registry
    from ingest.formats.base import ReadContext
    from ingest.source import open_source

    fragments = sorted((jsonl_project["dir"].parent / "inbox-snapshot").rglob("*.jsonl"))
    assert fragments
    got = {}
    for f in fragments:
        source = open_source(f)
        assert registry.detect(source).NAME == "trackio"
        got.update({r.id: r for r in registry.get("trackio").read(source, ReadContext())})
    traces = {t["id"]: t for t in jsonl_project["traces"]}
    assert set(got) == set(traces)
    for tid, t in traces.items():
        assert got[tid].step == t["step"] and got[tid].run.id == t["run"]
        assert got[tid].reward == t["metadata"].get("reward", t["metadata"].get("score"))
        assert len(got[tid].nodes) == len(t["messages"])


def test_a_bad_row_is_one_error_and_the_rows_around_it_are_kept(project, tmp_path):
    from ingest.formats import registry
    from ingest.formats.base import ReadContext
    from ingest.source import RecordError, open_source

    db = tmp_path / "broken.db"
    shutil.copy(project["db"], db)
    with sqlite3.connect(db) as conn:
        ids = [r[0] for r in conn.execute("SELECT rowid FROM traces ORDER BY rowid")]
        conn.execute("UPDATE traces SET messages = ? WHERE rowid = ?", (b'[{"role": "user", "content": "cut', ids[1]))
        conn.execute("UPDATE traces SET metadata = ? WHERE rowid = ?", (b'{"reward": "high"}', ids[4]))
        conn.execute("UPDATE traces SET messages = ? WHERE rowid = ?", (b'[{"content": "no role"}]', ids[6]))
    items = list(registry.get("trackio").read(open_source(db), ReadContext()))
    errors = [i for i in items if isinstance(i, RecordError)]
    assert [(e.line, e.field) for e in errors] == [(ids[1], "messages"), (ids[4], "metadata.reward"),
                                                   (ids[6], "messages[0].role")]
    assert all(e.file == str(db) for e in errors)
    assert "invalid JSON" in errors[0].message
    assert len(items) - len(errors) == 10


def test_traces_inline_in_metrics_before_trackio_0_26(project, tmp_path):
    """Before trackio 0.26 (#559) a trace stayed in the metrics JSON as a `trackio.trace` value,
    and trackio read it with the id `<run_id>:<step>:<key>[:<i>]`. The same project, put back
    in that layout (no `traces` table), gives the same rollouts under those ids."""
    from ingest.formats import registry
    from ingest.formats.base import ReadContext
    from ingest.source import open_source

    db = tmp_path / "old.db"
    shutil.copy(project["db"], db)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT log_id, key, trace_index, messages, metadata, spans FROM traces "
                            "ORDER BY rowid").fetchall()
        for log_id, key, index, messages, metadata, spans in rows:
            (blob,) = conn.execute("SELECT metrics FROM metrics WHERE log_id = ?", (log_id,)).fetchone()
            values = json.loads(blob)
            payload = {"_type": "trackio.trace", "messages": json.loads(messages), "metadata": json.loads(metadata),
                       "spans": json.loads(spans)}
            if index is None:
                values[key] = payload
            else:
                values.setdefault(key, []).append(payload)
            conn.execute("UPDATE metrics SET metrics = ? WHERE log_id = ?", (json.dumps(values).encode(), log_id))
        conn.execute("DROP TABLE traces")
    got = {r.id: r for r in registry.get("trackio").read(open_source(db), ReadContext())}
    new = {r.id: r for r in registry.get("trackio").read(open_source(project["db"]), ReadContext())}
    old_id = {t["id"]: f"{t['run_id']}:{t['step']}:{t['key']}" + (f":{t['index']}" if t["index"] is not None else "")
              for t in project["traces"]}
    assert set(got) == set(old_id.values())
    for tid, r in new.items():
        g = got[old_id[tid]]
        assert (g.step, g.reward, g.extra.get("advantage")) == (r.step, r.reward, r.extra.get("advantage"))
        assert g.group == r.group  # the metrics rows keep their log id: the same natural groups
        assert [n.message for n in g.nodes] == [n.message for n in r.nodes]
        assert g.metrics == r.metrics and [c.usage for c in g.calls] == [c.usage for c in r.calls]


def test_spans_generation_errors_and_endings(tmp_path):
    """A trace with spans and no messages is built from its spans (as trackio renders it); a failed
    generation span, a trace-level `status: error` and `stop_reason: length` give the endings the
    table says; a batch scalar named `tool_errors` does not stand in for the rollout's own count."""
    from ingest.formats import registry
    from ingest.formats.base import ReadContext
    from ingest.metrics import rollout_metrics
    from ingest.source import open_source

    written = _write(tmp_path, TRACKIO_WRITER_CASE="edge")
    assert written["connections"] == [] and len(written["traces"]) == 5
    got = list(registry.get("trackio").read(open_source(written["db"]), ReadContext()))
    assert [r.id for r in got] == [t["id"] for t in sorted(written["traces"], key=lambda t: t["index"])]
    spans_only, provider_error, status_error, length_cut, retried = got

    assert [(n.message.role, n.message.text()) for n in spans_only.nodes] == [
        ("user", "List the files."), ("assistant", "I will call ls."), ("tool", "PermissionError: /")]
    assert [(c.id, c.name, c.arguments) for c in spans_only.nodes[1].message.tool_calls] == [
        ("t1", "ls", '{"path": "/"}')]
    assert spans_only.nodes[2].message.tool_call_id == "t1"
    assert spans_only.calls[0].model == "m" and spans_only.calls[0].usage.output_tokens == 4
    assert spans_only.extra["trackio"]["spans"][0]["id"] == "s1"
    assert rollout_metrics(spans_only, None)["n_tool_errors"] == 1

    assert provider_error.ending.type == "error"
    assert provider_error.calls[0].error.message == "upstream timeout"
    assert provider_error.calls[0].time.end - provider_error.calls[0].time.start == pytest.approx(1.5)
    assert (status_error.ending.type, status_error.ending.detail) == ("error", "status=error")
    assert status_error.errors[0].message == "sandbox crashed"
    assert (length_cut.ending.type, length_cut.reward) == ("length_cut", 0.5)
    assert length_cut.calls[-1].finish_reason_raw == "length"

    # the retried generation failed, then the next one answered: its message keeps that one's call
    assert [(c.node, c.error.message if c.error else None) for c in retried.calls] == [(None, "429 rate limited"),
                                                                                       (1, None)]
    assert retried.calls[1].usage.output_tokens == 2 and retried.ending.type == "submitted" and not retried.errors

    for r in got:  # the scalar logged beside them is the batch's, not each rollout's
        assert r.extra["logged_metrics"] == {"tool_errors": 7.0}
    assert rollout_metrics(length_cut, None)["n_tool_errors"] == 3  # the trace's own count, in its metadata
    assert "metadata" not in length_cut.extra
