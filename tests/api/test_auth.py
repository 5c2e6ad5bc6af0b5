"""API tokens (app/auth.py): issued once and stored hashed, scopes read < write < admin, revoked
tokens never verify, `rollscope token create|list|revoke`, and ROLLSCOPE_REQUIRE_READ_TOKEN."""
from __future__ import annotations

import sqlalchemy as sa
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app import auth
from app.cli import app as cli
from app.config import Settings
from app.db import models
from app.main import create_app
from tests.helpers import ANSWER_TIMEOUT, http


def test_tokens_are_stored_hashed_and_verify_until_revoked(engine):
    token, info = auth.issue(engine, "write", "collector")
    assert token.startswith("rs_") and len(token) > 40 and info.scope == "write" and info.active
    with engine.connect() as conn:
        stored = conn.execute(sa.select(models.ApiToken.__table__)).one()
    assert token not in (stored.token_sha256, stored.prefix) and stored.token_sha256 == auth.hash_token(token)
    assert auth.verify(engine, token).pk == info.pk
    assert auth.verify(engine, token + "x") is None and auth.verify(engine, "nope") is None
    assert auth.verify(engine, None) is None
    (revoked,) = auth.revoke(engine, str(info.pk))
    assert revoked.revoked_at is not None and auth.verify(engine, token) is None
    assert [t.active for t in auth.list_tokens(engine)] == [False]


def test_scopes_nest():
    assert auth.allows("admin", "write") and auth.allows("write", "read") and auth.allows("read", "read")
    assert not auth.allows("read", "write") and not auth.allows("write", "admin")


def test_cli_create_list_revoke(db_url, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    runner = CliRunner()
    made = runner.invoke(cli, ["token", "create", "--scope", "read", "--name", "dash"])
    assert made.exit_code == 0, made.output
    token = made.stdout.strip().splitlines()[-1]
    assert token.startswith("rs_")
    listed = runner.invoke(cli, ["token", "list"])
    assert listed.exit_code == 0 and "dash" in listed.stdout and "read" in listed.stdout
    assert token not in listed.stdout and token[:10] in listed.stdout
    bad = runner.invoke(cli, ["token", "create", "--scope", "root"])
    assert bad.exit_code == 2 and "one of read, write, admin" in bad.output
    gone = runner.invoke(cli, ["token", "revoke", token[:10]])
    assert gone.exit_code == 0 and "revoked token 1" in gone.stdout
    assert runner.invoke(cli, ["token", "revoke", "999"]).exit_code == 1


def test_reading_is_open_unless_locked(db_url, engine):
    token, _ = auth.issue(engine, "read")
    with TestClient(create_app(Settings(database_url=db_url))) as c:
        assert c.get("/runs").status_code == 200
    locked = create_app(Settings(database_url=db_url, require_read_token=True))
    with TestClient(locked) as c:
        r = c.get("/runs")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert "text/html" in r.headers["content-type"] and "reading needs a token" in r.text  # a page for people
        err = c.get("/api/v1/runs").json()["error"]  # the one error shape for programs
        assert err["code"] == "unauthorized" and "ROLLSCOPE_REQUIRE_READ_TOKEN" in err["message"]
        assert c.get("/runs.json").json()["error"]["code"] == "unauthorized"
        assert c.get("/runs", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert c.get(f"/runs?token={token}").status_code == 200  # links in training logs
        assert c.cookies.get("rollscope_read") == token  # ... and the pages they link to read too
        assert c.get("/runs").status_code == 200 and c.get("/api/openapi.json").status_code == 200
        assert c.post("/api/v1/ingest", content=b"").status_code == 401  # a cookie never writes
        c.cookies.clear()
        assert c.get("/runs.json", headers={"Authorization": "Bearer rs_wrong"}).json()["error"]["message"] == \
            "unknown or revoked token"
        assert c.get("/runs", headers={"Authorization": "Bearer rs_wrong"}).status_code == 401
        assert c.get("/healthz").status_code == 200
        assert "ROLLSCOPE_REQUIRE_READ_TOKEN=1" in c.get("/api/openapi.json", headers={
            "Authorization": f"Bearer {token}"}).json()["info"]["description"]  # the setting that exists
    locked.state.engine.dispose()


def test_a_token_in_a_write_url_is_refused_and_no_token_reaches_the_access_log(db_url, engine, tmp_path):
    """`rollscope serve` as a user runs it: a write with `?token=` is 401 (the header is the only
    way), a read's `?token=` still opens pages, and uvicorn's access log shows no token."""
    import os
    import subprocess
    import sys
    import time

    import httpx

    from tests.conftest import ROOT
    from tests.helpers import _free_port, rollout, write_jsonl

    write, _ = auth.issue(engine, "write")
    read, _ = auth.issue(engine, "read")
    body = write_jsonl(tmp_path / "f.jsonl", [rollout("a")]).read_bytes()
    port = _free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": db_url, "ROLLSCOPE_REQUIRE_READ_TOKEN": "1"}
    with log.open("wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], cwd=ROOT, env=env,
                                stdout=sink, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if http.get(f"{base}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        with httpx.Client(base_url=base, timeout=ANSWER_TIMEOUT) as c:
            r = c.post(f"/api/v1/ingest?run=r&token={write}", content=body)
            assert r.status_code == 401 and "Authorization: Bearer" in r.json()["error"]["message"]
            # with the header as well: the URL has logged the token already, so still refused
            r = c.post(f"/api/v1/ingest?run=r&token={write}", content=body,
                       headers={"Authorization": f"Bearer {write}"})
            assert r.status_code == 401
            assert c.delete(f"/api/v1/runs/r?token={write}").status_code == 401
            assert c.post("/api/v1/ingest?run=r", content=body,
                          headers={"Authorization": f"Bearer {write}"}).json()["accepted"] == 1
            r = c.get(f"/runs?token={read}")  # a read's link still works and sets the read cookie
            assert r.status_code == 200 and c.cookies.get(auth.READ_COOKIE) == read
            assert c.post("/api/v1/ingest?run=r", content=body).status_code == 401  # the cookie never writes
            c.get(f"/api/v1/runs?%74oken={write}")  # a percent-encoded name is masked too
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    text = log.read_text()
    assert "/api/v1/ingest?run=r&token=*** HTTP/1.1" in text and "/runs?token=*** " in text  # uvicorn's access log
    assert write not in text and read not in text and write[3:] not in text
