"""The one reader of request bodies for the endpoints that take traces (`POST /api/v1/ingest`,
`POST /v1/traces`): the bytes as sent, or inflated when they are gzip, never more than a limit.

Gzip is recognised by `Content-Encoding: gzip` (or `x-gzip`), or by gzip's magic number at the
start of the body (no NDJSON, JSON or protobuf body starts with it). Inflation stops one byte past
the limit, so a small compressed body cannot make the server hold gigabytes. The gzip files the
worker tails are read by `ingest.gzstream` (a stream, member after member, from an offset).
"""
from __future__ import annotations

import zlib

from starlette.requests import Request

from ingest.gzstream import is_gzip

GZIP = ("gzip", "x-gzip")
IDENTITY = ("", "identity")


class BodyError(Exception):
    """A body that cannot be read: `status` (400 not valid gzip, 413 too large, 415 an encoding
    other than gzip) and a message for the client."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def decode(body: bytes, encoding: str, *, limit: int) -> bytes:
    """`body` as sent with `Content-Encoding: encoding`, inflated if it is gzip; at most `limit`
    bytes. Raises BodyError."""
    encoding = encoding.strip().lower()
    if encoding not in GZIP + IDENTITY:
        raise BodyError(415, f"Content-Encoding {encoding!r} is not supported (gzip or none)")
    if encoding in GZIP or is_gzip(body):
        try:
            body = zlib.decompressobj(wbits=47).decompress(body, limit + 1)  # 47: gzip or zlib header
        except zlib.error as exc:
            raise BodyError(400, f"body is not valid gzip: {exc}") from None
    if len(body) > limit:
        raise BodyError(413, f"body larger than {limit} bytes uncompressed: send it in parts")
    return body


async def read_body(request: Request, *, limit: int) -> bytes:
    """The request's body, decoded (`decode`). Raises BodyError."""
    return decode(await request.body(), request.headers.get("content-encoding", ""), limit=limit)
