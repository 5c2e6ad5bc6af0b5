"""Media bytes (images, audio, files carried inline in messages), stored once by sha256.

A reader turns every media part into a typed placeholder (`ingest.formats._openai._media`:
`{type, media_type, bytes, sha256, source_type, placeholder}`) and keeps the original part in
`message.extra.media[sha256]`, as read: the rollout a reader returns is whole, and its content
hash (app/store/prepare.py) covers the bytes. Storing it, `split_media` takes the base64 out of
each original part (the payload is replaced by `MARK + sha256`) and returns the bytes, which the
batch writer inserts into the `media` table if absent (`insert_media`), in the rollout's
transaction. Reading a rollout back (app/store/load.py) puts the base64 back (`restore_media`),
so an export writes the part as it was read and a recheck computes the same content hash.

The type of the stored bytes is sniffed from them (`sniff`), never taken from the trace: the
type a trace claims is what a hostile trace lies about.
"""
from __future__ import annotations

import base64
import hashlib
from typing import Any

import sqlalchemy as sa

from app.db import models
from app.db.engine import insert_for
from ingest.formats._openai import decode_payload

MEDIA = models.Media.__table__
MARK = "rollscope-media:sha256:"  # stands for the base64 payload of the media row named after it

# The image types a browser may draw from /media: the raster formats with no script in them.
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
OCTET = "application/octet-stream"


def sniff(data: bytes) -> str:
    """The media type of `data` by its magic number: `image/png`, `image/jpeg`, `image/gif`,
    `image/webp`, `application/pdf`, `audio/wav`, `audio/mpeg`, `audio/ogg`, `audio/flac`, or
    `application/octet-stream` for anything else (SVG, HTML and text included: a type that can
    carry script is never named here, so it is never served as something a browser runs)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio/wav"
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    if data.startswith(b"ID3") or data[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "audio/mpeg"
    if data.startswith(b"OggS"):
        return "audio/ogg"
    if data.startswith(b"fLaC"):
        return "audio/flac"
    return OCTET


def _payload_of(value: str) -> tuple[str, str]:
    """(prefix, payload) of a string that may carry media: a `data:` URL's head and its data, or
    ("", the string)."""
    if value.startswith("data:") and "," in value:
        head, payload = value.split(",", 1)
        return head + ",", payload
    return "", value


def _strip(value: Any, sha: str, found: list[bytes]) -> Any:
    if isinstance(value, str):
        if len(value) < 8:
            return value
        prefix, payload = _payload_of(value)
        raw = decode_payload(payload)
        if hashlib.sha256(raw).hexdigest() != sha:
            return value
        found.append(raw)
        # only a payload written as base64 re-encodes to itself; any other spelling stays inline
        return prefix + MARK + sha if base64.b64encode(raw).decode("ascii") == payload else value
    if isinstance(value, dict):
        return {k: _strip(v, sha, found) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip(v, sha, found) for v in value]
    return value


def split_media(message: dict) -> tuple[dict, dict[str, bytes]]:
    """A message's JSON form (`Message.to_json_dict()`) → (the same message with the base64
    payloads in `extra.media` replaced by `MARK + sha256`, {sha256 hex: bytes}). A message without
    `extra.media` comes back as it is (the same object), with {}. The bytes of a payload that
    cannot be found again in its part, or is not spelt as canonical base64, are still returned
    (the row is stored) but that payload stays inline."""
    media = (message.get("extra") or {}).get("media")
    if not isinstance(media, dict) or not media:
        return message, {}
    out: dict[str, bytes] = {}
    kept: dict[str, Any] = {}
    for sha, part in media.items():
        found: list[bytes] = []
        kept[sha] = _strip(part, sha, found)
        if found:
            out[sha] = found[0]
    return {**message, "extra": {**message["extra"], "media": kept}}, out


def _restore(value: Any, payloads: dict[str, str]) -> Any:
    if isinstance(value, str):
        at = value.find(MARK)
        if at >= 0:
            sha = value[at + len(MARK):]
            if sha in payloads:
                return value[:at] + payloads[sha]
        return value
    if isinstance(value, dict):
        return {k: _restore(v, payloads) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v, payloads) for v in value]
    return value


def marked(message: dict | None) -> set[str]:
    """The sha256 of every payload `split_media` took out of a stored message."""
    media = ((message or {}).get("extra") or {}).get("media")
    if not isinstance(media, dict):
        return set()
    return {sha for sha, part in media.items() if MARK + sha in str(part)}


def restore_media(message: dict, data: dict[str, bytes]) -> dict:
    """A stored message with each `MARK + sha256` in `extra.media` replaced by the base64 of
    `data[sha256]` (the part as it was read); a mark whose bytes are not in `data` stays."""
    media = (message.get("extra") or {}).get("media")
    if not isinstance(media, dict) or not data:
        return message
    payloads = {sha: base64.b64encode(b).decode("ascii") for sha, b in data.items()}
    return {**message, "extra": {**message["extra"], "media": _restore(media, payloads)}}


def fetch_media(conn, shas: set[str] | list[str]) -> dict[str, bytes]:
    """{sha256: bytes} of the stored media among `shas` (absent ones are left out).
    `conn`: a Connection or Session."""
    if not shas:
        return {}
    rows = conn.execute(sa.select(MEDIA.c.sha256, MEDIA.c.data).where(MEDIA.c.sha256.in_(sorted(shas))))
    return {r.sha256: bytes(r.data) for r in rows}


def stored_media(conn, shas: set[str] | list[str]) -> dict[str, tuple[str, int]]:
    """{sha256: (sniffed media type, size in bytes)} of the stored media among `shas`, without
    reading the data. `conn`: a Connection or Session."""
    if not shas:
        return {}
    rows = conn.execute(sa.select(MEDIA.c.sha256, MEDIA.c.media_type, MEDIA.c.bytes)
                        .where(MEDIA.c.sha256.in_(sorted(shas))))
    return {r.sha256: (r.media_type, r.bytes) for r in rows}


def insert_media(conn: sa.Connection, media: dict[str, bytes]) -> int:
    """Insert the media rows not yet stored, in the caller's transaction: one lookup of the
    sha256s already present (their bytes are not sent again), then one INSERT ... ON CONFLICT
    (sha256) DO NOTHING for the rest, in sha256 order (two writers inserting the same images lock
    them in one order). Returns how many rows it tried to add (0 on a re-ingest; a row another
writer added meanwhile is skipped by the database and still counted)."""
    if not media:
        return 0
    have = set(stored_media(conn, list(media)))
    rows = [{"sha256": sha, "media_type": sniff(data), "bytes": len(data), "data": data,
             "created_at": models.utcnow()} for sha, data in sorted(media.items()) if sha not in have]
    if not rows:
        return 0
    conn.execute(insert_for(conn, MEDIA).on_conflict_do_nothing(index_elements=["sha256"]), rows)
    return len(rows)
