"""Inspect as it writes logs today: the real inspect_ai runs a task offline (tests/producers/inspect_task.py),
Rollscope ingests the log it wrote, and every sample is compared with what Inspect itself reads back
(`inspect_ai.log.read_eval_log`): messages and roles, tool calls and their results, the tool error,
scores → rewards, endings, groups per epoch, usage; and every page of every sample answers 200.

Both log forms: `.eval` (a zip whose members inspect_ai ≥ 0.3.1xx compresses with Zstandard, method
93) and `.json`; 1 and 3 epochs."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import quote

import pytest
from inspect_ai.log import read_eval_log

from tests.producers.inspect_task import MESSAGE_LIMIT, SAMPLES, write_logs

RS = str(Path(sys.executable).parent / "rollscope")


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[tuple[str, int], Path]:
    out = tmp_path_factory.mktemp("inspect-logs")
    return {(fmt, epochs): write_logs(out / f"{fmt}-{epochs}", fmt, epochs)
            for fmt in ("eval", "json") for epochs in (1, 3)}


def ingest(path: Path, db_url: str) -> None:
    done = subprocess.run([RS, "ingest", str(path), "--db", db_url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_current_eval_members_are_zstandard(logs):
    """The premise: today's `.eval` is a zip of Zstandard members, which `zipfile` alone cannot read
    before Python 3.14. (Importing inspect_ai patches `zipfile` in its process, through
    `zipfile_zstd`: the plain standard library is tried in a fresh interpreter.)"""
    path = logs[("eval", 1)]
    with zipfile.ZipFile(path) as z:
        assert {i.compress_type for i in z.infolist()} == {93}
    plain = subprocess.run([sys.executable, "-c",
                            "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).read('header.json')",
                            str(path)], capture_output=True, text=True, timeout=60)
    if sys.version_info < (3, 14):
        assert plain.returncode != 0 and "compression method is not supported" in plain.stderr


@pytest.mark.parametrize("fmt,epochs", [("eval", 1), ("json", 1), ("eval", 3)])
def test_every_sample_as_inspect_reads_it(logs, fmt, epochs, db_url, client):
    path = logs[(fmt, epochs)]
    log = read_eval_log(str(path))
    ingest(path, db_url)
    run = log.eval.run_id
    assert len(log.samples) == len(SAMPLES) * epochs
    assert client.get(f"/api/v1/runs/{quote(run, safe='')}").json()["run"]["name"] == log.eval.task
    for s in log.samples:
        rid = f"{log.eval.task}:{s.id}:{s.epoch}"
        base = f"/api/v1/runs/{quote(run, safe='')}/rollouts/{quote(rid, safe='')}"
        detail = client.get(base)
        assert detail.status_code == 200, (rid, detail.text)
        d = detail.json()
        env = d["envelope"]
        msgs = client.get(base + "/branches/0/messages?limit=200").json()["items"]
        ours = [m["message"] for m in msgs]
        assert [m["role"] for m in ours] == [m.role for m in s.messages], rid
        for mine, theirs in zip(ours, s.messages):
            if theirs.role == "assistant":
                calls = [(c.id, c.function) for c in theirs.tool_calls or []]
                assert [(c["id"], c["name"]) for c in mine.get("tool_calls") or []] == calls, rid
            if theirs.role == "tool":
                assert mine["tool_call_id"] == theirs.tool_call_id
                if theirs.error is not None:
                    assert mine["extra"]["error"]["message"] == theirs.error.message
        # groups: one per sample, the epoch its index
        assert env["group"]["id"] == f"{log.eval.task}:{s.id}"
        assert env["group"]["index"] == s.epoch - 1
        assert env["group"]["size"] == epochs
        # scores → rewards, by scorer name
        if s.scores:
            assert set(env["rewards"]) == set(s.scores)
        # endings
        expected = {"crash": "error", "message-limit": "truncated"}.get(s.id, "submitted")
        assert env["ending"]["type"] == expected, (rid, env["ending"])
        if s.id == "message-limit":
            assert s.limit.type == "message" and env["ending"]["detail"] == "message_limit"
            assert len(s.messages) == MESSAGE_LIMIT
        if s.error is not None:  # the failed call's placeholder output is not the model's `stop`
            assert env["calls"][-1]["finish_reason"] == "error", env["calls"]
        else:
            assert all(c.get("finish_reason") != "error" for c in env["calls"])
        for mine, theirs in zip(ours, s.messages):
            if theirs.role == "tool":  # Inspect's tool event times, on the tool message
                t = mine["extra"]["timing"]
                assert t["start"] <= t["end"] and t["working_time"] >= 0
        for name, score in (s.scores or {}).items():  # a label only where the value is a word
            assert ("label" in env["rewards"][name].get("extra", {})) is isinstance(score.value, str)
            assert env["rewards"][name].get("explanation") == score.explanation  # the scorer's own words
        # usage: Inspect's per-model totals are the sum of the calls'
        total = sum((c.get("usage") or {}).get("output_tokens") or 0 for c in env["calls"])
        assert total == sum(u.output_tokens for u in s.model_usage.values()), rid


def test_tool_error_counts_and_shows(logs, db_url, client):
    """The `ToolError` of the divide call is a tool error in the counts, and its message is on the page."""
    path = logs[("eval", 1)]
    log = read_eval_log(str(path))
    ingest(path, db_url)
    rid = f"{log.eval.task}:tool-error:1"
    url = f"/runs/{quote(log.eval.run_id, safe='')}/rollouts/{quote(rid, safe='')}"
    page = client.get(url)
    assert page.status_code == 200
    assert "division by zero" in page.text
    row = client.get(f"/api/v1/runs/{quote(log.eval.run_id, safe='')}/rollouts/{quote(rid, safe='')}").json()["rollout"]
    assert row.get("n_tool_errors") == 1, row


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_every_page_of_every_sample_answers(logs, fmt, db_url, client):
    """The crashed sample's model call has a start and no end: its page is a page, not a 500."""
    path = logs[(fmt, 3)]
    log = read_eval_log(str(path))
    ingest(path, db_url)
    run = quote(log.eval.run_id, safe="")
    for s in log.samples:
        rid = quote(f"{log.eval.task}:{s.id}:{s.epoch}", safe="")
        for url in (f"/runs/{run}/rollouts/{rid}", f"/runs/{run}/rollouts/{rid}.json",
                    f"/runs/{run}/groups/{quote(f'{log.eval.task}:{s.id}', safe='')}"):
            r = client.get(url, headers={"accept": "text/html"})
            assert r.status_code == 200, (url, r.text[:500])
    for url in (f"/runs/{run}", f"/runs/{run}/rollouts", f"/runs/{run}.json"):
        assert client.get(url).status_code == 200, url
