"""The one reader of request bodies for the endpoints that take traces (`POST /api/v1/ingest`,
`POST /v1/traces`): the bytes as sent, or inflated when they are gzip, in bounded memory.

Gzip is recognised by `Content-Encoding: gzip` (or `x-gzip`), or by gzip's magic number at the
start of the body (no NDJSON, JSON or protobuf body starts with it). `Content-Encoding: deflate`
is taken as RFC 9110 section 8.4.1.2 words it (the zlib format) and as many clients send it (raw
deflate, RFC 1951): its first two bytes tell which (`Counter`); a body that does not inflate is a
400 naming the encoding declared. Several gzip members one after another are one
body (RFC 1952 section 2.2).

Memory stays bounded however the body is built:

- A `Content-Length` over the limit is refused (413) before a byte is read; the body is read as
  a stream (`request.stream()`), and the bytes received are counted against the limit as they
  arrive, so a body sent without a length is refused one chunk past the limit.
- A gzip body is inflated while it arrives, in steps of `STEP` bytes whose output is counted
  and dropped: the moment the count passes the limit it is refused (413), having held only the
  compressed bytes so far and one step. Only a body known to fit is then inflated for keeps, at
  its exact size (`zlib.decompress(..., bufsize=size)`), so a 1 GB bomb of zeros costs about its
  1 MB, not the limit (tests/api/test_body_memory.py measures the server's peak RSS).
- A body that stalls is given up: when no bytes arrive for `timeout` seconds
  (`api.body_timeout_seconds`, 30 s; between chunks, so a slow but steady upload goes on) it is
  answered 408 Request Timeout (RFC 9110 section 15.5.9) with `Connection: close`, and what it
  held is given back.
- Every byte held (compressed as received, and inflated) is taken from the process's
  `BodyBudget` (`api.body_memory_bytes`) until the endpoint is done with the body; a request
  that would go past it is answered 503 with `Retry-After` (it may succeed once others finish),
  so many bodies in flight at once cannot add up past it either.

The gzip files the worker tails are read by `ingest.gzstream` (a stream, member after member,
from an offset).
"""
from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

from fastapi.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request

from ingest.gzstream import is_gzip

COMPRESSED = ("gzip", "x-gzip", "deflate")
IDENTITY = ("", "identity")
STEP = 1 << 20  # bytes of inflated output looked at, then dropped, per step while counting
WBITS = 47  # zlib's automatic header detection: a gzip or a zlib header
RAW_DEFLATE = -15  # no header: raw deflate (RFC 1951), as many clients send `Content-Encoding: deflate`
RETRY_BUSY = 1  # Retry-After seconds when the body budget is spent
TIMEOUT = 30.0  # seconds without a byte of the body before it is given up (408), when no app settings say


class BodyError(Exception):
    """A body that cannot be read: `status` (400 not valid gzip or cut short, 408 no bytes for
    the timeout, 413 too large, 415 an encoding other than gzip, 503 the process's body budget is
    spent, with `retry_after` seconds) and a message for the client."""

    def __init__(self, status: int, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after

    def headers(self) -> dict[str, str]:
        """The response's headers: `Retry-After` on a 503, `Connection: close` on a 408 (the rest
        of a stalled body is never read, so the connection cannot carry another request)."""
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
        if self.status == 408:
            headers["Connection"] = "close"
        return headers


def too_large(limit: int) -> BodyError:
    return BodyError(413, f"body larger than {limit} bytes (uncompressed): send it in parts")


class BodyBudget:
    """Bytes of request bodies this process holds at once, across requests, at most `total`.

    Used from the event loop only (the body is read there), so a plain counter is enough."""

    def __init__(self, total: int):
        self.total, self.held = total, 0

    def take(self, n: int) -> None:
        """Hold `n` more bytes; BodyError 503 (with Retry-After) if that would pass `total`."""
        if self.held + n > self.total:
            raise BodyError(503, f"the server holds {self.held} bytes of request bodies (its limit is "
                            f"{self.total}); retry later", RETRY_BUSY)
        self.held += n

    def give(self, n: int) -> None:
        self.held -= n


def budget(app) -> BodyBudget:
    """The app's one BodyBudget (`app.state.body_budget`), sized by `api.body_memory_bytes`, made
    on first use."""
    if getattr(app.state, "body_budget", None) is None:
        app.state.body_budget = BodyBudget(app.state.settings.api.body_memory_bytes)
    return app.state.body_budget


def _zlib_header(head: bytes) -> bool:
    """Whether two bytes open a zlib stream (RFC 1950 section 2.2: CM 8, CINFO at most 7, the
    check bits making CMF*256+FLG a multiple of 31)."""
    return len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 and (head[0] << 8 | head[1]) % 31 == 0


class Counter:
    """Inflates a compressed stream fed in pieces, keeping none of the output: the inflated size
    of each gzip (or zlib) member, so that the body can be inflated for keeps only once it is
    known to fit. `encoding`: the `Content-Encoding` declared (`gzip`, `deflate`), or None for a
    body told gzip by its magic number; errors name it. For `deflate` the first two bytes decide:
    RFC 9110 section 8.4.1.2 says the zlib format (RFC 1950), but many clients send raw deflate
    (RFC 1951, zlib's `wbits=-15`), so a body that does not open with a zlib (or gzip) header
    is read as raw deflate. Raises BodyError 413 the moment the total passes `limit`, 400 for
    bytes that do not inflate."""

    def __init__(self, limit: int, encoding: str | None = None):
        self.limit = limit
        self.name = "deflate" if encoding == "deflate" else "gzip"
        self.wbits: int | None = None if encoding == "deflate" else WBITS  # deflate: told by its first bytes
        self.sizes: list[tuple[int, int]] = []  # per finished member: (its compressed length, its inflated size)
        self._head = b""  # a deflate body's first bytes, until there are two
        self._z = zlib.decompressobj(wbits=WBITS)
        self._in = self._out = 0  # the current member's compressed bytes fed, bytes inflated
        self._total = 0  # inflated bytes of the finished members

    def steps(self, data: bytes) -> Iterator[None]:
        """Inflate `data` (the next compressed bytes) a step of `STEP` output bytes at a time,
        yielding after each step (the reader lets other requests run there)."""
        if self.wbits is None:
            self._head += data
            if len(self._head) < 2:
                return
            self.wbits = WBITS if is_gzip(self._head[:2]) or _zlib_header(self._head) else RAW_DEFLATE
            self._z = zlib.decompressobj(wbits=self.wbits)
            data, self._head = self._head, b""
        while data:
            try:
                out = self._z.decompress(data, STEP)
            except zlib.error as exc:
                raise BodyError(400, f"body is not valid {self.name}: {exc}") from None
            self._out += len(out)
            if self._total + self._out > self.limit:
                raise too_large(self.limit)
            if self._z.eof:  # a member ends here; what follows it is the next member
                rest = self._z.unused_data
                self._in += len(data) - len(rest)
                self.sizes.append((self._in, self._out))
                self._total += self._out
                self._z, self._in, self._out = zlib.decompressobj(wbits=self.wbits), 0, 0
                data = rest
            else:
                self._in += len(data) - len(self._z.unconsumed_tail)
                data = self._z.unconsumed_tail
            yield

    def finish(self) -> int:
        """The body's inflated size; BodyError 400 if its last member is cut short."""
        if self._in or self._head or not self.sizes:
            raise BodyError(400, f"body is not valid {self.name}: it ends inside a "
                                 f"{'stream' if self.name == 'deflate' else 'member'}")
        return self._total


def inflate(compressed: bytes, sizes: list[tuple[int, int]], wbits: int | None = WBITS) -> bytes:
    """The members of `compressed`, inflated at the sizes `Counter` found (with its `wbits`): one
    allocation of exactly the inflated size for the usual one member."""
    wbits = WBITS if wbits is None else wbits
    if len(sizes) == 1:
        return zlib.decompress(compressed, wbits, max(1, sizes[0][1]))
    parts, at = [], 0
    for length, size in sizes:
        parts.append(zlib.decompress(compressed[at:at + length], wbits, max(1, size)))
        at += length
    return b"".join(parts)


def decode(body: bytes, encoding: str, *, limit: int) -> bytes:
    """`body` as sent with `Content-Encoding: encoding`, inflated if it is gzip or deflate; at
    most `limit` bytes. Raises BodyError. (The synchronous form of `read_body`, for bytes already held.)"""
    encoding = _encoding(encoding)
    if encoding in COMPRESSED or is_gzip(body):
        if len(body) > limit:
            raise too_large(limit)
        counter = Counter(limit, encoding if encoding in COMPRESSED else None)
        for _ in counter.steps(body):
            pass
        return inflate(body, counter.sizes, counter.wbits) if body and counter.finish() else b""
    if len(body) > limit:
        raise too_large(limit)
    return body


def _encoding(value: str) -> str:
    encoding = value.strip().lower()
    if encoding not in COMPRESSED + IDENTITY:
        raise BodyError(415, f"Content-Encoding {encoding!r} is not supported (gzip, deflate or none)")
    return encoding


async def _arriving(request: Request, timeout: float) -> AsyncIterator[bytes]:
    """The body's chunks as they arrive; BodyError 408 when none comes for `timeout` seconds."""
    stream = request.stream().__aiter__()
    while True:
        try:
            chunk = await asyncio.wait_for(stream.__anext__(), timeout)
        except StopAsyncIteration:
            return
        except asyncio.TimeoutError:
            raise BodyError(408, f"no bytes of the body for {timeout:g} s: send it again") from None
        yield chunk


@asynccontextmanager
async def read_body(request: Request, *, limit: int, budget: BodyBudget,
                    timeout: float | None = None) -> AsyncIterator[bytes]:
    """`async with read_body(request, limit=..., budget=..., timeout=...) as body:` the request's
    body, inflated if it is gzip, at most `limit` bytes, its memory held from `budget` until the
    block ends; `timeout` seconds at most without a byte arriving (default
    `api.body_timeout_seconds`). Raises BodyError (400, 408, 413, 415, 503: see the module's
    docstring)."""
    if timeout is None:
        app = request.scope.get("app")
        timeout = app.state.settings.api.body_timeout_seconds if app is not None else TIMEOUT
    encoding = _encoding(request.headers.get("content-encoding", ""))
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_large(limit)  # before a byte is read: the limit holds for the bytes as sent too
    chunks: list[bytes] = []
    held = received = 0
    counter: Counter | None = Counter(limit, encoding) if encoding in COMPRESSED else None
    sniffed = counter is not None  # without the header, gzip is told by its first two bytes
    try:
        try:
            async for chunk in _arriving(request, timeout):
                if not chunk:
                    continue
                received += len(chunk)
                if received > limit:
                    raise too_large(limit)
                budget.take(len(chunk))
                held += len(chunk)
                chunks.append(chunk)
                feed = [chunk]
                if not sniffed and received >= 2:
                    sniffed = True
                    if is_gzip(b"".join(chunks)[:2]):
                        counter, feed = Counter(limit), chunks[:]
                if counter is not None:
                    for piece in feed:
                        for _ in counter.steps(piece):
                            await asyncio.sleep(0)  # a large body does not hold other requests up
        except ClientDisconnect:
            raise BodyError(400, "the client disconnected before the body ended") from None
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        if counter is not None:
            size = counter.finish() if body else 0
            budget.take(size)
            held += size
            compressed, body = body, b""
            body = await run_in_threadpool(inflate, compressed, counter.sizes, counter.wbits) if size else b""
            del compressed
            budget.give(received)
            held -= received
        yield body
    finally:
        budget.give(held)
