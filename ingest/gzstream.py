"""Reading a gzip file as a stream: member after member, as `gzip -d` does, from where the last
read stopped, and noticing corrupt data or a cut-short stream instead of raising. The worker keeps
one `GzState` per file it tails (app/worker/stretches.py; offsets count uncompressed bytes);
`ingest/source.py` reads a gzip file's head with it (`head`)."""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass


@dataclass
class GzState:
    """Where a gzip file's stream stands: its inflater, the compressed bytes read, the
    uncompressed bytes produced and those not yet handed out."""

    zobj: object
    compressed_pos: int
    out_pos: int  # uncompressed bytes produced so far
    buffer: bytes = b""  # produced, not yet handed out (starts at out_pos - len(buffer))
    eof: bool = False
    broken: str | None = None  # why the stream cannot be read past `compressed_pos` (corrupt data)


def is_gzip(head: bytes) -> bool:
    """Whether a file's first bytes are gzip's magic number."""
    return head[:2] == b"\x1f\x8b"


def new_state() -> GzState:
    """The state of a stream read from its first byte (wbits 47: a gzip or zlib header)."""
    return GzState(zlib.decompressobj(wbits=47), 0, 0)


def head(f, limit: int) -> bytes:
    """Up to `limit` uncompressed bytes from the start of gzip file `f` (binary, at 0), across
    members. A stream cut short gives what it holds; raises zlib.error when the file's first
    bytes do not inflate at all (not gzip, or corrupt from the start)."""
    state, out, size = new_state(), bytearray(), os.fstat(f.fileno()).st_size
    while len(out) < limit and not state.eof and (raw := f.read(GZ_PIECE)):
        at = state.compressed_pos
        state.compressed_pos += len(raw)
        out += inflate(state, raw, at, size)
        if state.broken and not out:
            raise zlib.error(state.broken)
    return bytes(out[:limit])


GZ_PIECE = 1 << 16  # compressed bytes inflated at a time: what corrupt data can take with it


def inflate(state: GzState, raw: bytes, at: int, size: int) -> bytes:
    """The uncompressed bytes of `raw` (the compressed bytes from `at` of a file of `size`
    bytes), member after member, as `gzip -d` reads them (NUL padding after a member is not
    another one). Corrupt data ends the stream: what was inflated before it (up to `GZ_PIECE`
    compressed bytes earlier) is returned, and `state.broken` says where and why."""
    view, pos, parts = memoryview(raw), 0, []
    data_end = len(raw.rstrip(b"\x00"))  # past it, only NUL padding
    try:
        while pos < len(raw):
            piece = view[pos:pos + GZ_PIECE]
            parts.append(state.zobj.decompress(piece))  # type: ignore[attr-defined]
            if not state.zobj.eof:  # type: ignore[attr-defined]
                pos += len(piece)
                continue
            pos += len(piece) - len(state.zobj.unused_data)  # type: ignore[attr-defined]
            if pos < data_end:  # the next member starts here
                state.zobj = zlib.decompressobj(wbits=47)
                continue
            state.eof = state.compressed_pos >= size
            if not state.eof:  # more may be appended after the padding
                state.zobj = zlib.decompressobj(wbits=47)
            break
    except zlib.error as exc:
        out = b"".join(parts)
        state.broken = (f"corrupt gzip data near compressed byte {at + pos} (uncompressed byte "
                        f"{state.out_pos + len(out)}): {exc}")
        state.eof = True
        return out
    return b"".join(parts)
