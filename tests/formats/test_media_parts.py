"""Every shape a format writes an image in reaches the one normaliser (`_openai.normalize_parts` /
`_media`): the same placeholder `{type: image, media_type, bytes, sha256, source_type,
placeholder}` whatever the format, the part as read kept once in `message.extra.media`, and a
part that only links (a URL, a path) kept typed with nothing fetched. Chat, tau-bench, Tunix,
verifiers, Atropos, Trackio and OTel events read their messages through `message_from_openai`;
Responses through `content_from_openai`; Inspect and OTel GenAI parts call `normalize_parts`."""
from __future__ import annotations

import base64
import hashlib

import pytest

from app.store.media import MARK, restore_media, split_media
from app.views.rollout.messages import media_parts
from ingest.formats import _openai, _responses
from ingest.formats._atif_steps import _content as atif_content
from ingest.formats.inspect import _message as inspect_message
from ingest.otel.semconv import genai_message

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
B64 = base64.b64encode(PNG).decode()
URL = f"data:image/png;base64,{B64}"
SHA = hashlib.sha256(PNG).hexdigest()
ANTHROPIC = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}}

SHAPES = {
    "openai chat image_url": {"type": "image_url", "image_url": {"url": URL, "detail": "high"}},
    "responses input_image": {"type": "input_image", "image_url": URL},
    "anthropic base64 block": ANTHROPIC,
    "inspect ContentImage": {"type": "image", "image": URL},
    "mcp image content": {"type": "image", "data": B64, "mimeType": "image/png"},
    "otel genai blob": {"type": "blob", "modality": "image", "mime_type": "image/png", "content": B64},
}


def _one(message) -> dict:
    parts = [p for p in message.content if p.get("type") == "image"]
    assert len(parts) == 1
    assert B64 not in message.to_json().decode().split('"extra"')[0]  # not in the content
    assert set(message.extra["media"]) == {SHA}
    return parts[0]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_image_shape_is_one_placeholder(shape):
    part = SHAPES[shape]
    p = _one(_openai.message_from_openai({"role": "user", "content": [part]}, "m").message)
    assert {k: p[k] for k in ("type", "media_type", "bytes", "sha256", "placeholder")} == {
        "type": "image", "media_type": "image/png", "bytes": len(PNG), "sha256": SHA, "placeholder": True}


def test_readers_route_image_parts_through_the_normaliser():
    inspect = inspect_message({"role": "user", "content": [{"type": "text", "text": "hi"},
                                                          SHAPES["inspect ContentImage"]]})
    genai, _ = genai_message({"role": "user", "parts": [{"type": "text", "content": "hi"}, SHAPES["otel genai blob"]]})
    responses, notes = _responses.content_from_parts([SHAPES["responses input_image"]], "input[0].content")
    for msg in (inspect, genai):
        assert _one(msg)["sha256"] == SHA
    assert responses[0]["sha256"] == SHA and set(notes["media"]) == {SHA}


def test_tool_results_carry_images():
    mcp = _openai.message_from_openai({"role": "tool", "tool_call_id": "c1", "content": [
        {"type": "text", "text": "screenshot"}, SHAPES["mcp image content"]]}, "m").message
    assert _one(mcp)["sha256"] == SHA
    anthropic = _openai.message_from_openai({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "ok"}, ANTHROPIC]}]},
        "m").message
    inner = anthropic.content[0]["content"][1]
    assert inner["sha256"] == SHA and B64 not in str(anthropic.content)
    assert [m["sha256"] for m in media_parts(anthropic.content)] == [SHA]


def test_files_and_audio_are_placeholders_too():
    pdf = b"%PDF-1.7 fake"
    msg = _openai.message_from_openai({"role": "user", "content": [
        {"type": "file", "file": {"filename": "a.pdf", "file_data": base64.b64encode(pdf).decode()}},
        {"type": "input_audio", "input_audio": {"data": B64, "format": "wav"}}]}, "m").message
    assert [(p["type"], p["bytes"]) for p in msg.content] == [("file", len(pdf)), ("audio", len(PNG))]
    assert len(msg.extra["media"]) == 2


def test_link_only_parts_stay_typed_links():
    atif = atif_content([{"type": "image", "source": {"media_type": "image/png", "path": "images/step1.png"}}])
    chat = _openai.message_from_openai({"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}]}, "m").message
    views = media_parts(atif) + media_parts(chat.content)
    assert [(v["type"], v["media_type"], v["sha256"], v["link"]) for v in views] == [
        ("image", "image/png", None, "images/step1.png"), ("image", None, None, "https://example.com/x.png")]
    assert "media" not in chat.extra


def test_store_takes_the_base64_out_and_load_puts_it_back():
    msg = _openai.message_from_openai({"role": "user", "content": [SHAPES["openai chat image_url"]]}, "m").message
    as_read = msg.to_json_dict()
    stored, data = split_media(as_read)
    assert data == {SHA: PNG} and B64 not in str(stored)
    assert stored["extra"]["media"][SHA]["image_url"] == {"url": "data:image/png;base64," + MARK + SHA,
                                                          "detail": "high"}
    assert restore_media(stored, data) == as_read
    odd = {"role": "user", "extra": {"media": {SHA: {"type": "image", "data": B64[:40] + "\n" + B64[40:]}}}}
    kept, found = split_media(odd)  # not spelt as canonical base64: the row is stored, the text stays
    assert found == {SHA: PNG} and kept == odd
