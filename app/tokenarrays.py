"""Per-token arrays as compact binary: int32 ids, float32 values (NaN = missing), packed bits.

Stored little-endian. A bit array needs its length to unpack; the node row keeps `n_tokens`.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def pack_ids(ids: Sequence[int]) -> bytes:
    return np.asarray(ids, dtype="<i4").tobytes()


def unpack_ids(blob: bytes | None) -> np.ndarray:
    return np.frombuffer(blob or b"", dtype="<i4")


def pack_floats(values: Sequence[float | None] | None) -> bytes | None:
    """float32; `None` becomes NaN. Returns None for an absent array."""
    if values is None:
        return None
    return np.asarray([np.nan if v is None else v for v in values], dtype="<f4").tobytes()


def unpack_floats(blob: bytes | None) -> np.ndarray | None:
    if blob is None:
        return None
    return np.frombuffer(blob, dtype="<f4")


def pack_bits(bits: Sequence[bool]) -> bytes:
    return np.packbits(np.asarray(bits, dtype=bool)).tobytes()


def unpack_bits(blob: bytes | None, n: int) -> np.ndarray:
    if not blob:
        return np.zeros(0, dtype=bool) if n == 0 else np.zeros(n, dtype=bool)
    return np.unpackbits(np.frombuffer(blob, dtype=np.uint8), count=n).astype(bool)


def floats_or_none(arr: np.ndarray | None) -> list[float | None] | None:
    """float32 array → JSON-safe list (NaN → None), rounded to float32 precision."""
    if arr is None:
        return None
    return [None if np.isnan(x) else float(x) for x in arr.tolist()]
