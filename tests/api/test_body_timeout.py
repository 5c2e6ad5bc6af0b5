"""Stalled request bodies (app/receivers/body.py, `api.body_timeout_seconds`) over raw sockets
against a real uvicorn server: senders that announce `Content-Length: 1000` and send 4 bytes hold
no `POST /api/v1/ingest` slot (a normal ingest beside them is 200, not 429), and are each answered
408 Request Timeout (RFC 9110 §15.5.9) with `Connection: close` once no byte has come for the
timeout, on `/api/v1/ingest` (the one error shape) and `/v1/traces` (a google.rpc.Status in the
request's encoding); the bytes they held are given back to the body budget."""
from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from google.rpc import code_pb2, status_pb2

from app import auth
from app.config import Settings
from app.main import create_app
from ingest.formats.native import write_line
from tests.helpers import http, rollout, serving

TIMEOUT = 0.3  # the setting under test; the sockets themselves wait up to 30 s for the answer


@pytest.fixture
def tmp_db(tmp_path, _sqlite_template) -> Path:
    """A copy of the session's migrated SQLite file, and a spool folder for `/v1/traces`."""
    shutil.copyfile(_sqlite_template, tmp_path / "rollscope.db")
    return tmp_path


def _app(tmp: Path, **api):
    return create_app(Settings(database_url=f"sqlite:///{tmp / 'rollscope.db'}",
                               worker={"otlp_spool_dir": tmp / "otlp-spool"}, api=api))


def _stall(base: str, path: str, token: str, media: str) -> socket.socket:
    """A connection that sends the headers of a 1000-byte body and 4 bytes of it, then nothing."""
    u = urlsplit(base)
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: {u.netloc}\r\nAuthorization: Bearer {token}\r\n"
              f"Content-Type: {media}\r\nContent-Length: 1000\r\n\r\n".encode() + b'{"a"')
    return s


def _answer(s: socket.socket) -> tuple[str, dict[str, str], bytes]:
    """The status line, headers (lower-case names) and body of the one response, read to EOF: the
    server closes the connection."""
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    return status, {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}, body


def test_stalled_bodies_hold_no_ingest_slot_and_are_answered_408(tmp_db):
    app = _app(tmp_db, body_timeout_seconds=TIMEOUT, ingest_max_inflight=4)
    token, _ = auth.issue(app.state.engine, "write", name="stall")
    with serving(app) as base:
        stalled = [_stall(base, "/api/v1/ingest", token, "application/x-ndjson") for _ in range(4)]
        stalled += [_stall(base, "/v1/traces", token, media) for media in ("application/x-protobuf",
                                                                          "application/json")]
        line = write_line(rollout("r0", run="run"))
        r = http.post(base + "/api/v1/ingest", content=line, timeout=30,
                       headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"})
        assert r.status_code == 200 and r.json()["accepted"] == 1, r.text  # was 429: four stalled bodies held the slots
        answers = [_answer(s) for s in stalled]
        for status, headers, body in answers[:4]:
            assert status.startswith("HTTP/1.1 408 "), status
            assert headers["connection"] == "close"
            error = json.loads(body)["error"]
            assert "no bytes of the body" in error["message"]
        status, headers, body = answers[4]  # OTLP over protobuf: a google.rpc.Status in protobuf
        assert status.startswith("HTTP/1.1 408 ") and headers["connection"] == "close"
        assert headers["content-type"] == "application/x-protobuf"
        st = status_pb2.Status.FromString(body)
        assert st.code == code_pb2.DEADLINE_EXCEEDED and "no bytes of the body" in st.message
        status, headers, body = answers[5]  # and in JSON
        assert status.startswith("HTTP/1.1 408 ") and headers["content-type"] == "application/json"
        assert json.loads(body)["code"] == code_pb2.DEADLINE_EXCEEDED
        assert app.state.body_budget.held == 0  # the 4 bytes each held are given back


def test_a_slow_but_steady_body_is_taken_and_408_is_declared(tmp_db):
    """A body sent in pieces over one connection is read whole (the timeout is per wait for the
    next bytes); the document declares 408 (with `Connection`) on `POST /api/v1/ingest`."""
    app = _app(tmp_db, body_timeout_seconds=5)
    token, _ = auth.issue(app.state.engine, "write", name="steady")
    line = write_line(rollout("r1", run="run"))
    with serving(app) as base:
        u = urlsplit(base)
        with socket.create_connection((u.hostname, u.port), timeout=30) as s:
            s.sendall(f"POST /api/v1/ingest HTTP/1.1\r\nHost: {u.netloc}\r\nAuthorization: Bearer {token}\r\n"
                      f"Content-Type: application/x-ndjson\r\nContent-Length: {len(line)}\r\n"
                      "Connection: close\r\n\r\n".encode())
            for i in range(0, len(line), len(line) // 4 + 1):
                s.sendall(line[i:i + len(line) // 4 + 1])
            status, _, body = _answer(s)
        assert status.startswith("HTTP/1.1 200 ") and json.loads(body)["accepted"] == 1
        op = app.openapi()["paths"]["/api/v1/ingest"]["post"]
        assert "408" in op["responses"] and "Connection" in op["responses"]["408"]["headers"]
