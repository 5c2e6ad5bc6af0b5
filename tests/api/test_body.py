"""The one body reader of `POST /api/v1/ingest` and `POST /v1/traces` (app/receivers/body.py):
gzip by header or by its magic number, a limit on the inflated size, the statuses it gives, and
how little it reads and holds before it refuses (the server's own memory under gzip bombs:
tests/api/test_body_memory.py)."""
from __future__ import annotations

import asyncio
import gzip
import zlib

import pytest
from starlette.requests import Request

from app.receivers.body import BodyBudget, BodyError, decode, read_body


def test_gzip_is_inflated_by_header_or_by_its_bytes_and_plain_bodies_pass():
    data = b'{"a": 1}\n'
    assert decode(gzip.compress(data), "gzip", limit=100) == data
    assert decode(gzip.compress(data), "", limit=100) == data  # no header: recognised by its magic number
    assert decode(gzip.compress(data), "X-GZIP ", limit=100) == data
    assert decode(data, "identity", limit=100) == data


@pytest.mark.parametrize("body, encoding, status", [
    (b"\x1f\x8bnot gzip at all", "gzip", 400),
    (b"x" * 101, "", 413),
    (gzip.compress(b"x" * 10_000, mtime=0), "gzip", 413),  # the limit counts inflated bytes
    (b"{}", "br", 415),
])
def test_a_body_that_cannot_be_read_says_why(body, encoding, status):
    with pytest.raises(BodyError) as err:
        decode(body, encoding, limit=100)
    assert err.value.status == status and err.value.message


# --- the streaming reader: what it holds, and when it stops reading --------------------------


class Peak(BodyBudget):
    """A budget that remembers the most it ever held."""

    def __init__(self, total: int = 1 << 30):
        super().__init__(total)
        self.peak = 0

    def take(self, n: int) -> None:
        super().take(n)
        self.peak = max(self.peak, self.held)


def request(chunks: list[bytes], **headers: str) -> tuple[Request, list[int]]:
    """A request whose body arrives in `chunks` (as uvicorn hands it over), and the list of chunks
    it was asked for so far."""
    asked: list[int] = []

    async def receive():
        i = len(asked)
        asked.append(i)
        if i >= len(chunks):
            raise AssertionError("read past the end of the body")
        return {"type": "http.request", "body": chunks[i], "more_body": i + 1 < len(chunks)}

    scope = {"type": "http", "method": "POST", "path": "/", "query_string": b"",
             "headers": [(k.lower().replace("_", "-").encode(), v.encode()) for k, v in headers.items()]}
    return Request(scope, receive), asked


def read(req: Request, *, limit: int, budget: BodyBudget) -> bytes:
    async def go():
        async with read_body(req, limit=limit, budget=budget) as body:
            return body

    return asyncio.run(go())


def test_a_content_length_over_the_limit_is_refused_before_a_byte_is_read():
    req, asked = request([b"x" * 1000], content_length=str(10 << 30))
    with pytest.raises(BodyError) as err:
        read(req, limit=100, budget=Peak())
    assert err.value.status == 413 and asked == []


def test_a_body_without_a_length_is_refused_one_chunk_past_the_limit():
    req, asked = request([b"x" * 64] * 1000)  # 64,000 bytes sent, no Content-Length
    budget = Peak()
    with pytest.raises(BodyError) as err:
        read(req, limit=100, budget=budget)
    assert err.value.status == 413 and len(asked) == 2  # 128 bytes read of 64,000
    assert budget.peak <= 100 and budget.held == 0


def test_a_gzip_bomb_is_refused_while_it_inflates_holding_only_its_compressed_bytes():
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = c.compress(bytes(64 << 20)) + c.flush()  # 64 MiB of zeros in about 64 KB
    chunks = [bomb[i:i + 4096] for i in range(0, len(bomb), 4096)]
    req, asked = request(chunks, content_encoding="gzip")
    budget = Peak()
    with pytest.raises(BodyError) as err:
        read(req, limit=1 << 20, budget=budget)
    assert err.value.status == 413
    assert len(asked) < 3 and budget.peak <= 2 * 4096  # refused at the first MiB inflated, nothing inflated held
    assert budget.held == 0


def test_gzip_members_deflate_and_the_budget_while_the_body_is_used():
    data = b'{"a": 1}\n' * 1000
    two = gzip.compress(data[:4000]) + gzip.compress(data[4000:])  # RFC 1952: members one after another
    budget = Peak()
    req, _ = request([two[:50], two[50:]], content_encoding="gzip")
    assert read(req, limit=len(data), budget=budget) == data
    assert budget.held == 0 and budget.peak >= len(data)  # the inflated bytes were counted, then given back
    req, _ = request([zlib.compress(data)], content_encoding="deflate")
    assert read(req, limit=len(data), budget=budget) == data
    req, _ = request([gzip.compress(data)[:-20]], content_encoding="gzip")
    with pytest.raises(BodyError) as err:
        read(req, limit=len(data), budget=budget)
    assert err.value.status == 400 and "ends inside" in err.value.message


def test_past_the_process_budget_is_503_with_retry_after_and_it_is_given_back():
    budget = BodyBudget(150)

    async def two_at_once():
        first, _ = request([b"x" * 100])
        async with read_body(first, limit=1000, budget=budget) as body:
            assert body == b"x" * 100 and budget.held == 100
            second, _ = request([b"y" * 100])
            with pytest.raises(BodyError) as err:
                async with read_body(second, limit=1000, budget=budget):
                    pass
            assert err.value.status == 503 and err.value.retry_after == 1
        assert budget.held == 0
        with pytest.raises(KeyError):  # an error while the body is in use gives it back too
            async with read_body(request([b"z" * 100])[0], limit=1000, budget=budget):
                raise KeyError("x")
        assert budget.held == 0

    asyncio.run(two_at_once())


def test_gzip_without_the_header_is_told_by_its_magic_number_even_split_across_chunks():
    data = b'{"a": 1}\n' * 100
    packed = gzip.compress(data)
    for chunks in ([packed], [packed[:1], packed[1:]], [packed[:1], packed[1:2], packed[2:]]):
        req, _ = request(chunks)
        assert read(req, limit=len(data), budget=Peak()) == data
    req, _ = request([b"{", b'"a": 1}\n'])  # not gzip: as sent
    assert read(req, limit=100, budget=Peak()) == b'{"a": 1}\n'


def test_the_limits_are_settings_and_the_budget_must_fit_one_body():
    from pydantic import ValidationError

    from app.config import Settings

    s = Settings(database_url="sqlite://")
    assert (s.api.max_body_bytes, s.api.body_memory_bytes) == (64 << 20, 256 << 20)
    with pytest.raises(ValidationError, match="body_memory_bytes"):
        Settings(database_url="sqlite://", api={"max_body_bytes": 2 << 20, "body_memory_bytes": 1 << 20})


def raw_deflate(data: bytes) -> bytes:
    z = zlib.compressobj(wbits=-15)  # RFC 1951 with no header, as many HTTP clients send `deflate`
    return z.compress(data) + z.flush()


def test_deflate_is_taken_zlib_wrapped_or_raw_in_one_piece_or_byte_by_byte():
    """RFC 9110 section 8.4.1.2: `deflate` is the zlib format; many clients send raw deflate."""
    data = b'{"a": 1}\n' * 1000
    for body in (zlib.compress(data), raw_deflate(data), raw_deflate(b"")):
        want = data if len(body) > 10 else b""
        assert decode(body, "deflate", limit=len(data)) == want
        pieces = [body[i:i + 1] for i in range(min(3, len(body)))] + [body[3:]]  # the header split too
        req, _ = request([p for p in pieces if p], content_encoding="deflate")
        assert read(req, limit=len(data), budget=Peak()) == want


@pytest.mark.parametrize("body, encoding, word", [
    (b"\x00\x01 not deflate at all", "deflate", "deflate"),
    (raw_deflate(b"x" * 1000)[:5], "deflate", "deflate"),
    (b"\x1f\x8bnot gzip at all", "gzip", "gzip"),
    (b"\x1f\x8bnot gzip at all", "", "gzip"),
])
def test_a_body_that_does_not_inflate_is_named_by_its_declared_encoding(body, encoding, word):
    with pytest.raises(BodyError) as err:
        decode(body, encoding, limit=10_000)
    other = {"gzip": "deflate", "deflate": "gzip"}[word]
    assert err.value.status == 400 and f"not valid {word}" in err.value.message and other not in err.value.message
