"""Unchanged data skips the work: a record's raw bytes are hashed before it is decoded, validated
or checked, and a record whose hash the store already holds is passed on as a `Known` (its
identity only) instead of a rollout.

The raw hash is sha256, cut to 128 bits (32 hex digits), of the record's bytes (a JSONL line without
its line ending) salted with everything besides those bytes that shapes the rollout the reader
makes of them: the reader and its revision, `--run`, the run a record without one falls under,
and `--step`. The same hash therefore means the same rollout (its `source` aside), whose content
hash, stored with it, decides "unchanged" (app/store/write.py `decide`).

This module knows no database: the caller passes `ReadContext.known`, a function from a list of
raw hashes to the identities already stored under them (app/store/known.py asks the database,
one query per batch).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Identity = tuple[str, str, int]  # (run id, rollout id, attempt)
# raw hashes → the identity stored under each and the file its copy was read from, for those
# the store holds
KnownLookup = Callable[[list[str]], dict[str, tuple[Identity, str | None]]]

# Bump when a reader's mapping from bytes to rollout changes: stored raw hashes then no longer
# match, and the next ingest of the same bytes reads them in full (and replaces what changed).
REVISION = "1"


def salt(*parts: object) -> bytes:
    """The bytes mixed into every raw hash of one file: `parts` (reader name, `--run`, default
    run, `--step`, ...), each written with its type so that None and "None" differ."""
    return "\x1f".join(f"{type(p).__name__}:{p}" for p in (REVISION, *parts)).encode("utf-8", "surrogatepass")


def raw_hash(raw: bytes, salted: bytes) -> str:
    """The raw hash of one record (32 hex digits): sha256 of `salted` then `raw` without its
    trailing line ending, its first 128 bits. About 0.6 ms per MB here: with the CPU's SHA
    instructions, sha256 is twice as fast as blake2b (and crc32 would be no faster)."""
    h = hashlib.sha256(salted)
    end = len(raw)
    while end and raw[end - 1] in b"\r\n":
        end -= 1
    h.update(memoryview(raw)[:end])
    return h.hexdigest()[:32]


@dataclass(slots=True)
class Known:
    """A record the store already holds with these very bytes: its stored `identity`, its
    `raw_hash`, `source` (format, file, line) and `full()`, the reader's rollout (or rejection)
    for the record, made only when the caller needs it after all (the same identity met earlier
    in the same ingest, which may have replaced what is stored)."""

    identity: Identity
    raw_hash: str
    source: dict[str, Any]
    full: Callable[[], Any]
