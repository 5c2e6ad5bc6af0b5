"""`/media/{sha256}`: the bytes of an image, audio clip or file a message carried, by the sha256
of the bytes (the `media` table, app/store/media.py).

Trace bytes are untrusted, and a trace says what it likes about them, so the response's type is
sniffed from the bytes (`app.store.media.sniff`), never taken from the trace:

- png, jpeg, gif, webp up to `web.media_max_bytes` are served inline as that type (what an
  `<img>` draws);
- anything else (SVG, HTML, a polyglot that is not one of those four, audio, PDF, unknown bytes,
  and an image over the size cap) is served as `application/octet-stream` with
  `Content-Disposition: attachment`: a browser saves it and never renders it.

Every answer carries `X-Content-Type-Options: nosniff` (a browser runs nothing typed as an image,
even a GIF that is also valid JavaScript) and `Content-Security-Policy: default-src 'none';
img-src 'self'; sandbox` (opened on its own, the response can run nothing and reach nothing).
The content never changes for a name, so it is cached for a year (`immutable`). Reading needs
the read token when reads are locked, as every page does (app/auth.py, `ReadTokenGate`).
"""
from __future__ import annotations

import re
from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, Path
from fastapi.responses import Response

from app.deps import RefuseUnknownQuery, SessionDep, SettingsDep
from app.errors import ApiError
from app.store.media import IMAGE_TYPES, MEDIA, OCTET

router = APIRouter(tags=["pages"], dependencies=[RefuseUnknownQuery])

SHA256 = re.compile(r"[0-9a-f]{64}\Z")
CSP = "default-src 'none'; img-src 'self'; sandbox"
CACHE = "max-age=31536000, immutable"
EXTENSION = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}


def media_headers(sha: str, media_type: str, size: int, max_inline: int) -> tuple[str, dict[str, str]]:
    """(Content-Type, other headers) of `/media/{sha}` for stored bytes of sniffed `media_type`
    and `size` bytes: inline only for an image type in IMAGE_TYPES of at most `max_inline` bytes,
    else `application/octet-stream` as an attachment (named `<sha>.bin`)."""
    headers = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": CSP, "Cache-Control": CACHE,
               "ETag": f'"{sha}"'}
    if media_type in IMAGE_TYPES and size <= max_inline:
        headers["Content-Disposition"] = f'inline; filename="{sha}.{EXTENSION[media_type]}"'
        return media_type, headers
    headers["Content-Disposition"] = f'attachment; filename="{sha}.bin"'
    return OCTET, headers


@router.get("/media/{sha256}", include_in_schema=False)
def media(sha256: Annotated[str, Path(max_length=64)], session: SessionDep, settings: SettingsDep) -> Response:
    """The stored bytes named by `sha256` (64 lowercase hex digits), typed as `media_headers`
    says. 404 for a name that is not a sha256 or not stored (media of a rollout stored before
    the `media` table existed, until it is written again)."""
    if not SHA256.match(sha256):
        raise ApiError(404, "no such media: the name is the sha256 of the bytes, 64 lowercase hex digits")
    row = session.execute(sa.select(MEDIA.c.media_type, MEDIA.c.bytes, MEDIA.c.data)
                          .where(MEDIA.c.sha256 == sha256)).first()
    if row is None:
        raise ApiError(404, "no such media")
    content_type, headers = media_headers(sha256, row.media_type, row.bytes, settings.web.media_max_bytes)
    return Response(bytes(row.data), media_type=content_type, headers=headers)
