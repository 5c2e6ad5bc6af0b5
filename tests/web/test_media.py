"""Media carried in messages: stored once by sha256 in the `media` table (not as base64 in the
node's message JSON), shown on the rollout page as a thumbnail by URL (never the bytes), and
served by `/media/{sha256}` typed by what the bytes are, not by what the trace claims.

No file under tests/fixtures/realdata carries an image, so the inputs are chat transcripts
written here: a 34 KiB PNG as a `data:` URL, and hostile "images" (SVG with script, HTML claimed
as image/png, a GIF that is also JavaScript). The hostile ones are fetched over real HTTP (a live
uvicorn server, every middleware in place)."""
from __future__ import annotations

import base64
import hashlib
import json
import os

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from app.auth import issue
from app.config import Settings, WebSettings
from app.db import models
from app.main import create_app
from app.store.load import load
from app.store.prepare import content_hash
from app.store.recheck import recheck_run
from tests.helpers import ANSWER_TIMEOUT, ingest, serving

PNG = b"\x89PNG\r\n\x1a\n" + os.urandom(34 * 1024 - 8)  # 34,816 bytes
SHA = hashlib.sha256(PNG).hexdigest()
LABEL = "[image · image/png · 34 KB]"
SVG = b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script></svg>'
HTML = b"<!doctype html><html><body><script>alert(document.cookie)</script></body></html>"
POLYGLOT = b"GIF89a=1;alert(document.domain);//" + bytes(20)  # a GIF header that is also JavaScript
MEDIA_CSP = "default-src 'none'; img-src 'self'; sandbox"


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def chat(path, rid: str, *images: tuple[str, bytes]) -> None:
    parts = [{"type": "text", "text": "what is in the picture?"}]
    parts += [{"type": "image_url", "image_url": {"url": data_url(t, b)}} for t, b in images]
    path.write_text(json.dumps({"rollout_id": rid, "reward": 1.0, "messages": [
        {"role": "user", "content": parts}, {"role": "assistant", "content": "a cat"}]}) + "\n")


def media_rows(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(models.Media.__table__)).scalar_one()


def test_image_stored_once_shown_by_url(client, engine, tmp_path):
    f = tmp_path / "vision.jsonl"
    chat(f, "img1", ("image/png", PNG), ("image/png", PNG))  # the same image twice: one row
    assert ingest(engine, f, run="media").ok
    data = base64.b64encode(PNG).decode()
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT message FROM node WHERE idx = 0")).scalar_one()
        row = conn.execute(sa.select(models.Media.__table__)).one()
    stored = stored if isinstance(stored, str) else json.dumps(stored)
    assert data[:200] not in stored and len(stored) < 2000  # the base64 left the node's JSON
    assert (row.sha256, row.media_type, row.bytes, bytes(row.data)) == (SHA, "image/png", len(PNG), PNG)

    d = client.get("/runs/media/rollouts/img1.json").json()
    user = d["messages"][0]
    assert user["content"] == f"what is in the picture?\n{LABEL}\n{LABEL}"
    assert user["media"][0] == {"type": "image", "media_type": "image/png", "bytes": len(PNG), "sha256": SHA,
                                "url": f"/media/{SHA}", "inline": True, "link": None,
                                "label": "image · image/png · 34 KB"}
    html = client.get("/runs/media/rollouts/img1").text
    assert f'<img src="/media/{SHA}" loading="lazy" alt="image · image/png · 34 KB"' in html
    assert data[:200] not in html and data[:200] not in json.dumps(d)  # the bytes are never inlined
    r = client.get(f"/media/{SHA}")
    assert r.content == PNG and r.headers["content-type"] == "image/png"
    assert r.headers["cache-control"] == "max-age=31536000, immutable"

    # the same file again adds nothing; reading the rollout back gives the part as it was read
    assert ingest(engine, f, run="media").ok
    assert media_rows(engine) == 1
    with engine.connect() as conn:
        pk, chash = conn.execute(sa.select(models.Rollout.pk, models.Rollout.content_hash)).one()
    with Session(engine) as s:
        back = load(s, pk)
    assert back.nodes[0].message.extra["media"][SHA]["image_url"]["url"] == data_url("image/png", PNG)
    assert content_hash(back) == chash
    recheck_run(engine, "media")  # read back and stored again: the same hash, no new row
    with engine.connect() as conn:
        assert conn.execute(sa.select(models.Rollout.content_hash)).scalar_one() == chash
    assert media_rows(engine) == 1


def test_link_only_media_is_escaped_text_not_fetched(client, engine, tmp_path):
    f = tmp_path / "link.jsonl"
    url = 'https://example.com/a.png?"><script>alert(1)</script>'
    f.write_text(json.dumps({"rollout_id": "l1", "reward": 0.0, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]},
        {"role": "assistant", "content": "?"}]}) + "\n")
    assert ingest(engine, f, run="media").ok
    html = client.get("/runs/media/rollouts/l1").text
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img" not in html.split('class="media"', 1)[1].split("</ul>", 1)[0]
    m = client.get("/runs/media/rollouts/l1.json").json()["messages"][0]["media"][0]
    assert (m["url"], m["sha256"], m["link"]) == (None, None, url)
    assert media_rows(engine) == 0


def test_hostile_media_over_http(db_url, engine, tmp_path):
    """SVG with script, HTML claimed as image/png, a GIF/JS polyglot, and a PNG over the size
    cap: each served so that a browser executes nothing (checked over real HTTP)."""
    big = b"\x89PNG\r\n\x1a\n" + bytes(3000)
    f = tmp_path / "hostile.jsonl"
    chat(f, "h1", ("image/svg+xml", SVG), ("image/png", HTML), ("image/gif", POLYGLOT), ("image/png", big))
    assert ingest(engine, f, run="evil").ok
    sha = {name: hashlib.sha256(b).hexdigest() for name, b in
           (("svg", SVG), ("html", HTML), ("gif", POLYGLOT), ("big", big))}
    app = create_app(Settings(database_url=db_url, web=WebSettings(media_max_bytes=2048)))
    with serving(app) as base, httpx.Client(base_url=base, timeout=ANSWER_TIMEOUT) as http:
        for name in ("svg", "html", "big"):
            r = http.get(f"/media/{sha[name]}")
            assert r.status_code == 200, name
            assert r.headers["content-type"] == "application/octet-stream", name
            assert r.headers["content-disposition"].startswith("attachment"), name
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["content-security-policy"] == MEDIA_CSP
        r = http.get(f"/media/{sha['gif']}")  # a real GIF header: an image, never a script (nosniff)
        assert r.headers["content-type"] == "image/gif" and r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["content-security-policy"] == MEDIA_CSP
        assert http.get("/media/" + "0" * 64).status_code == 404
        assert http.get("/media/not-a-sha").status_code == 404
        page = http.get("/runs/evil/rollouts/h1.json").json()["messages"][0]["media"]
        assert [(m["media_type"], m["inline"]) for m in page] == [
            ("application/octet-stream", False), ("application/octet-stream", False), ("image/gif", True),
            ("image/png", False)]
        assert page[1]["claimed_media_type"] == "image/png"
        html = http.get("/runs/evil/rollouts/h1").text
        assert html.count("<img ") == 1 and f'download href="/media/{sha["svg"]}"' not in html
        assert f'href="/media/{sha["svg"]}" download' in html


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_media_needs_the_read_token_when_reads_are_locked(db_url, engine, tmp_path):
    f = tmp_path / "vision.jsonl"
    chat(f, "img1", ("image/png", PNG))
    assert ingest(engine, f, run="media").ok
    token = issue(engine, "read", name="t")[0]
    app = create_app(Settings(database_url=db_url, require_read_token=True))
    with serving(app) as base, httpx.Client(base_url=base, timeout=ANSWER_TIMEOUT) as http:
        assert http.get(f"/media/{SHA}").status_code == 401
        assert http.get(f"/media/{SHA}", headers={"Authorization": f"Bearer {token}"}).content == PNG
