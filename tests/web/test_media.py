"""Media parts in the message view and its JSON twin: a typed placeholder with media type and
size (`[image · image/png · 34 KB]`), never the bytes. No file under tests/fixtures/realdata carries an
image, so the input is a chat transcript written here with a 34 KiB PNG as a `data:` URL."""
from __future__ import annotations

import base64
import hashlib
import json
import os

from tests.helpers import ingest

PNG = b"\x89PNG\r\n\x1a\n" + os.urandom(34 * 1024 - 8)  # 34,816 bytes
LABEL = "[image · image/png · 34 KB]"


def test_image_part_shows_media_type_and_size(client, engine, tmp_path):
    data = base64.b64encode(PNG).decode()
    f = tmp_path / "vision.jsonl"
    f.write_text(json.dumps({"rollout_id": "img1", "reward": 1.0, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "what is in the picture?"},
                                     {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}]},
        {"role": "assistant", "content": "a cat"}]}) + "\n")
    assert ingest(engine, f, run="media").ok
    d = client.get("/runs/media/rollouts/img1.json").json()
    user = d["messages"][0]
    assert user["content"] == f"what is in the picture?\n{LABEL}"
    assert user["media"] == [{"type": "image", "media_type": "image/png", "bytes": len(PNG),
                              "sha256": hashlib.sha256(PNG).hexdigest()}]
    html = client.get("/runs/media/rollouts/img1").text
    assert LABEL in html
    assert data[:200] not in html and data[:200] not in json.dumps(d)  # the bytes are never inlined
