"""The one body reader of `POST /api/v1/ingest` and `POST /v1/traces` (app/receivers/body.py):
gzip by header or by its magic number, a limit on the inflated size, and the statuses it gives."""
from __future__ import annotations

import gzip

import pytest

from app.receivers.body import BodyError, decode


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
