"""Images in messages as a person sees them, in Debian's chromium against a live server: a PNG in
a user message is drawn as a thumbnail from /media (decoded: `naturalWidth` > 0), and an SVG
carrying script is a download link, never drawn and never run, even when a page points an <img>
at it."""
from __future__ import annotations

import base64
import hashlib
import json
import struct
import zlib

import pytest

from app.db.engine import make_engine
from app.db.migrate import upgrade
from tests.browser import live_server, open_page
from tests.helpers import ingest

pytestmark = pytest.mark.browser

SVG = (b'<svg xmlns="http://www.w3.org/2000/svg" onload="window.parent.pwned=1">'
       b"<script>window.parent.pwned=2</script></svg>")


def png(width: int, height: int) -> bytes:
    """A valid RGB PNG of one colour."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + b"\xc0\x40\x20" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_png_drawn_svg_never_run(tmp_path, browser):
    image = png(40, 30)
    parts = [{"type": "text", "text": "what is this?"}]
    for media_type, data in (("image/png", image), ("image/svg+xml", SVG)):
        url = f"data:{media_type};base64,{base64.b64encode(data).decode()}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    f = tmp_path / "vision.jsonl"
    f.write_text(json.dumps({"rollout_id": "v1", "reward": 1.0, "messages": [
        {"role": "user", "content": parts}, {"role": "assistant", "content": "a square"}]}) + "\n")
    url = f"sqlite:///{tmp_path / 'rollscope.db'}"
    engine = make_engine(url, writer=True)
    upgrade(engine)
    assert ingest(engine, f, run="vision").ok
    engine.dispose()
    svg_url = f"/media/{hashlib.sha256(SVG).hexdigest()}"
    with live_server(url) as base:
        page, problems = open_page(browser, f"{base}/runs/vision/rollouts/v1")
        thumbs = page.locator(".media img")
        assert thumbs.count() == 1
        thumbs.first.scroll_into_view_if_needed()
        page.wait_for_function("document.querySelector('.media img').complete")
        assert thumbs.first.evaluate("i => [i.naturalWidth, i.naturalHeight]") == [40, 30]
        assert thumbs.first.bounding_box()["height"] <= 160
        assert page.locator(f'.media a[href="{svg_url}"][download]').count() == 1
        # an <img> pointed at the SVG draws nothing and runs nothing (octet-stream, nosniff)
        width = page.evaluate("""u => new Promise(done => { const i = new Image();
            i.onload = () => done(i.naturalWidth); i.onerror = () => done(-1); i.src = u; })""", svg_url)
        assert width == -1
        assert page.evaluate("window.pwned === undefined")
        assert problems == [] or all(svg_url in p or "Failed to load resource" in p for p in problems)
        page.close()
