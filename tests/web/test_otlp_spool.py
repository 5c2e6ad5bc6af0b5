"""`POST /v1/traces` survives a SIGKILL: the real server (uvicorn, a subprocess) on a SQLite file
takes spans of a trace whose root has not come, is killed, restarts, and assembles the trace
from its spool when the root arrives; a restart after that stores nothing again."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import sqlalchemy as sa

from app.auth import issue
from app.config import Settings
from app.main import create_app
from tests.helpers import http
from tests.web.test_otlp_receiver import CHAT, _post, _span_json

REPO = Path(__file__).resolve().parents[2]
TRACE, ROOT, CHAT_ID, TOOL_ID = "5a" * 16, "a1" * 8, "b2" * 8, "c3" * 8
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "bash", "gen_ai.tool.call.id": "call_1",
        "gen_ai.tool.call.result": "total 0"}
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a", "rollscope.run": "killed",
         "rollscope.rollout_id": "r1", "rollscope.reward": 1}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(env: dict, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--host",
                             "127.0.0.1", "--port", str(port), "--log-level", "warning"], cwd=REPO, env=env)
    for _ in range(300):
        try:
            if http.get(f"http://127.0.0.1:{port}/runs.json", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, "the server exited"
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the server did not start")


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


def _rows(url: str) -> tuple[list, list]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rollouts = conn.execute(sa.text("SELECT pk, rollout_id, content_hash FROM rollout")).all()
            spool = conn.execute(sa.text("SELECT spool, offset, size, status, records FROM spool_file")).all()
        return rollouts, spool
    finally:
        engine.dispose()


def test_spans_answered_200_survive_sigkill(tmp_path):
    url = f"sqlite:///{tmp_path / 'rollscope.db'}"
    spool = tmp_path / "otlp-spool"
    app = create_app(Settings(database_url=url))
    token, _ = issue(app.state.engine, "write", name="kill test")
    app.state.engine.dispose()
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": url, "ROLLSCOPE_WORKER__OTLP_SPOOL_DIR": str(spool),
           "ROLLSCOPE_WORKER__OTLP_IDLE_SECONDS": "3600"}
    port = _port()
    base = f"http://127.0.0.1:{port}"

    proc = _start(env, port)
    try:  # the chat and the tool span, each in its own request, answered 200; the root not yet sent
        assert _post(base, [_span_json(TRACE, CHAT_ID, ROOT, "chat m", CHAT, 2)], token).status_code == 200
        assert _post(base, [_span_json(TRACE, TOOL_ID, ROOT, "execute_tool bash", TOOL, 3)], token).status_code == 200
        assert http.get(f"{base}/runs/killed/rollouts/r1.json").status_code == 404
    finally:
        _kill(proc)
    assert _rows(url)[0] == []  # nothing was stored before the kill

    proc = _start(env, port)
    try:
        assert _post(base, [_span_json(TRACE, ROOT, None, "invoke_agent a", AGENT, 1)], token).status_code == 200
        got = http.get(f"{base}/runs/killed/rollouts/r1.json")
        assert got.status_code == 200
        d = got.json()
        assert [m["role"] for m in d["messages"]] == ["user", "assistant", "tool"]
        assert d["messages"][-1]["content"] == "total 0"
        assert d["reward"] == 1.0 and len(d["calls"]) == 1
    finally:
        _kill(proc)
    rollouts, files = _rows(url)
    assert [r.rollout_id for r in rollouts] == ["r1"]
    assert [(f.spool, f.status, f.records) for f in files] == [("otlp", "done", 1)]
    assert files[0].offset == files[0].size == (spool / f"{TRACE}.jsonl").stat().st_size
    assert len((spool / f"{TRACE}.jsonl").read_bytes().splitlines()) == 3  # one line per request

    proc = _start(env, port)  # a restart after completion: nothing to assemble, nothing stored again
    try:
        assert http.get(f"{base}/runs/killed/rollouts/r1.json").status_code == 200
    finally:
        proc.terminate()
        proc.wait(10)
    assert _rows(url) == (rollouts, files)


def test_trace_spool_torn_line_and_exactly_once(engine, tmp_path):
    """The spool on the real database: a line torn by a crash is skipped and the next append
    starts a new line; a range is committed once, a later range again (the rollout replaced)."""
    from app.worker.trace_spool import TraceSpool
    from ingest.otel.read import rollout_from_spans
    from ingest.otel.wire import decode_json

    def spans(*items):
        return decode_json(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(items)}]}]}))

    spool = TraceSpool(engine, tmp_path / "s")
    [a] = spool.append(spans(_span_json(TRACE, CHAT_ID, ROOT, "chat m", CHAT, 2)))
    torn = b'{"resourceSpans": [{"scopeSp'  # the process died mid-write: never answered 200
    with spool.path(TRACE).open("ab") as f:
        f.write(torn)
    [b] = spool.append(spans(_span_json(TRACE, ROOT, None, "invoke_agent a", AGENT, 1)))
    assert b.start == a.end + len(torn) and spool.path(TRACE).read_bytes().count(b"\n") == 3
    got, end = spool.read(TRACE)
    assert sorted(s.span_id for s in got) == sorted([CHAT_ID, ROOT]) and end == b.end
    assert [p.trace_id for p in spool.pending()] == [TRACE]
    rollout = rollout_from_spans(got, source={"format": "otlp"})
    assert spool.commit([(TRACE, rollout, end)]).inserted == 1
    assert spool.commit([(TRACE, rollout, end)]).inserted == 0  # the same range again: nothing
    assert list(spool.pending()) == []
    [c] = spool.append(spans(_span_json(TRACE, TOOL_ID, ROOT, "execute_tool bash", TOOL, 3)))
    assert [p.trace_id for p in spool.pending()] == [TRACE]  # a late span: the trace is pending again
    got, end = spool.read(TRACE)
    res = spool.commit([(TRACE, rollout_from_spans(got, source={"format": "otlp"}), end)])
    assert res.replaced == 1 and end == c.end
    with engine.connect() as conn:  # one trace per file: stored again, still one record
        assert conn.execute(sa.text("SELECT records FROM spool_file")).scalar_one() == 1
    assert spool.prune(keep=3600) == 0 and spool.prune(keep=-1) == 1 and not spool.path(TRACE).exists()
