"""Per-token arrays as compact binary: int32 ids, float32 values (NaN = missing), packed bits.

Stored little-endian. A bit array needs its length to unpack; the node row keeps `n_tokens`.
"""
from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence

import numpy as np

# array('i'/'f') packs in C with no per-call numpy overhead (token arrays are many and short);
# stored bytes are little-endian.
_SWAP = sys.byteorder != "little"


def pack_ids(ids: Sequence[int]) -> bytes:
    a = array("i", ids)
    if _SWAP:
        a.byteswap()
    return a.tobytes()


def unpack_ids(blob: bytes | None) -> np.ndarray:
    return np.frombuffer(blob or b"", dtype="<i4")


def pack_floats(values: Sequence[float | None] | None) -> bytes | None:
    """float32; `None` becomes NaN. Returns None for an absent array. Beyond float32 becomes ±inf
    (the invalid_logprob check reports it)."""
    if values is None:
        return None
    try:  # first as if no None were there: `None in values` compares every float with None, slowly
        a = array("f", values)
    except TypeError:
        a = array("f", [_NAN if v is None else v for v in values])
    if _SWAP:
        a.byteswap()
    return a.tobytes()


_NAN = float("nan")


def unpack_floats(blob: bytes | None) -> np.ndarray | None:
    if blob is None:
        return None
    return np.frombuffer(blob, dtype="<f4")


def pack_bits(bits: Sequence[bool]) -> bytes:
    return np.packbits(np.frombuffer(bytes(bits), dtype=np.uint8)).tobytes()


def unpack_bits(blob: bytes | None, n: int) -> np.ndarray:
    if not blob:
        return np.zeros(0, dtype=bool) if n == 0 else np.zeros(n, dtype=bool)
    return np.unpackbits(np.frombuffer(blob, dtype=np.uint8), count=n).astype(bool)


def f32(x) -> float | None:
    """A stored float32 as the shortest float that reads back to it (-0.21, not
    -0.20999999344348907); NaN → None."""
    v = np.float32(x)
    return None if np.isnan(v) else float(str(v))


def floats_or_none(arr: np.ndarray | None) -> list[float | None] | None:
    """float32 array → JSON-safe list (NaN → None), each value as `f32` gives it."""
    if arr is None:
        return None
    return [f32(x) for x in arr]
