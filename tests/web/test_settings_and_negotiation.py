"""Settings in sections and from the environment; page sizes from settings; one content
negotiation for a page and its errors; one message text for the page, the .txt view and the
stored content_len."""
from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.config import Settings
from app.main import create_app
from tests.helpers import ingest, rollout, write_jsonl


def test_nested_env_and_the_database_url_shorthand(monkeypatch, tmp_path):
    monkeypatch.setenv("ROLLSCOPE_WORKER__SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("ROLLSCOPE_WEB__PAGE_SIZE", "7")
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", "postgres://u@db:5432/rs")
    s = Settings()
    assert s.worker.spool_dir == tmp_path / "spool" and s.web.page_size == 7
    assert s.db.url == s.database_url == "postgresql+psycopg://u@db:5432/rs"
    monkeypatch.setenv("ROLLSCOPE_DB__URL", "sqlite:///other.db")
    with pytest.raises(ValidationError, match="disagree"):
        Settings()
    monkeypatch.delenv("ROLLSCOPE_DATABASE_URL")
    assert Settings().db.url == "sqlite:///other.db"
    monkeypatch.setenv("ROLLSCOPE_WEB__PAGE_SIZE", "0")
    with pytest.raises(ValidationError, match="page_size"):
        Settings()
    monkeypatch.delenv("ROLLSCOPE_WEB__PAGE_SIZE")
    with pytest.raises(ValidationError, match="sqlite:// or postgresql://"):
        Settings(database_url="mysql://x")


def _app(db_url: str, **web) -> TestClient:
    return TestClient(create_app(Settings(database_url=db_url, web=web)))


def test_page_sizes_come_from_settings(db_url, engine, tmp_path):
    long = [{"role": "user", "content": "q"}] + [{"role": "assistant" if i % 2 else "user",
                                                   "content": f"m{i} " + "x" * 30}
                                                  for i in range(1, 7)]
    write_jsonl(tmp_path / "a.jsonl", [rollout(f"r{i}") for i in range(5)] + [rollout("long", messages=long)])
    ingest(engine, tmp_path / "a.jsonl")
    with _app(db_url, page_size=2, messages_per_page=3, preview_chars=10, tokens_inline=2) as c:
        page = c.get("/runs/r1/rollouts.json").json()
        assert len(page["rollouts"]) == 2 and page["limit"] == 2 and "limit=" not in page["next_url"]
        d = c.get("/runs/r1/rollouts/long.json").json()
        assert len(d["messages"]) == 3 and d["limit"] == 3 and d["next_offset"] == 3
        assert d["messages"][1]["content"] == "m1 xxxxxxx" and d["messages"][1]["content_truncated"]
        html = c.get("/runs/r1/rollouts/long").text
        assert "load 3 more messages (4 left)" in html
        # 2 token chips drawn in the page (3 tokens per message); the rest load by window on scroll
        assert html.count('" id="t-') == 2 and 'class="tok-window"' in html


def test_a_page_and_its_404_answer_in_the_same_form(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("x")]))
    for accept, html in [("text/html, application/json", True), ("*/*", True), ("", True),
                         ("application/json", False), ("application/json, */*", False),
                         ("text/html;q=0.5, application/json", False)]:
        headers = {"Accept": accept} if accept else {}
        for url in ("/runs/r1", "/runs/nope", "/runs/r1/rollouts/x", "/runs/r1/rollouts/nope",
                    "/runs/r1/rollouts?step=abc"):
            r = client.get(url, headers=headers)
            assert r.headers["content-type"].startswith("text/html" if html else "application/json"), (accept, url)


def test_one_message_text_for_page_txt_and_content_len(client, engine, tmp_path):
    parts = [{"type": "text", "text": "look at"}, {"type": "image_url", "image_url": {"url": "data:x"}},
             {"type": "text", "text": "this"}]
    r = rollout("mm", messages=[{"role": "user", "content": parts}, {"role": "assistant", "content": "ok"}])
    ingest(client.app.state.engine, write_jsonl(tmp_path / "a.jsonl", [r]))
    d = client.get("/runs/r1/rollouts/mm.json").json()
    m = d["messages"][0]
    txt = client.get(m["content_url"]).text
    assert txt == m["content"] == "look at\n[image_url]\nthis"
    assert m["content_len"] == len(txt)


def test_twins_refuse_unknown_values_ignore_unknown_params_and_link_to_twins(client, engine, tmp_path):
    rs = [rollout(f"x{i}", reward=r) for i, r in enumerate([0.1, 0.2, 0.3, 0.7, 0.3065, 0.95])]
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs))
    for url, field in [("/runs/r1/rollouts.json?flag=bogus", "flag"), ("/runs/r1/rollouts.json?ending=done", "ending"),
                       ("/api/v1/runs/r1/rollouts?stepp=3", "stepp")]:
        r = client.get(url)
        assert r.status_code == 422 and r.json()["error"]["field"] == field, url
    # pages, twins and downloads ignore a parameter they do not take (a pasted link's utm_source);
    # the API refuses it (above)
    for url in ("/runs/r1/rollouts?utm_source=x", "/runs/r1/rollouts.json?stepp=3", "/runs.json?x=1",
                "/runs/r1/rollouts/x0.json?tokens=all&bogus=1", "/runs/r1/rollouts.csv?utm_source=x",
                "/runs?utm_source=x", "/runs/r1?utm_source=x&utm_medium=y", "/runs/r1/rollouts/x0?utm_source=x"):
        assert client.get(url).status_code == 200, url
    rows = client.get("/runs/r1/rollouts.json").json()["rollouts"]
    assert rows[0]["url"] == "/runs/r1/rollouts/x0.json" and client.get(rows[0]["url"]).status_code == 200
    assert rows[0]["ingested_at"].endswith("Z") and "+00:00" not in rows[0]["ingested_at"]
    assert client.get("/runs.json").json()["runs"][0]["created_at"].endswith("Z")
    # the exact mean of the stored floats (math.fsum / NUMERIC), not a running float sum
    import math
    mean = client.get("/runs/r1.json").json()["totals"]["mean_reward"]
    assert mean == math.fsum([0.1, 0.2, 0.3, 0.7, 0.3065, 0.95]) / 6
    assert client.get("/runs/r1", headers={"Accept": "*/*"}).headers["content-type"].startswith("text/html")
