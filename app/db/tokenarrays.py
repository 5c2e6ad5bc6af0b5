"""Per-token arrays as compact binary: int32 ids, float32 values (NaN = missing), packed bits.

Stored little-endian. A bit array needs its length to unpack; the node row keeps `n_tokens`.
Packing takes the node's numpy arrays (ingest/arrays.py `node_arrays`: int64 ids, bool masks,
float64 values with NaN for null), built once per node for every stage: no Python loop over
tokens.
"""
from __future__ import annotations

import numpy as np


def pack_ids(ids: np.ndarray) -> bytes:
    """int32 little-endian bytes of an int64 id array. Raises OverflowError(message, position)
    for the first id past int32 (the schema refuses them; a blob never wraps one silently)."""
    packed = ids.astype("<i4")
    if len(ids) and not np.array_equal(packed, ids):
        bad = int(np.flatnonzero(packed != ids)[0])
        raise OverflowError(f"token_ids[{bad}] = {int(ids[bad])}: token ids are int32", bad)
    return packed.tobytes()


def unpack_ids(blob: bytes | None) -> np.ndarray:
    return np.frombuffer(blob or b"", dtype="<i4")


def pack_floats(values: np.ndarray) -> bytes:
    """float32 little-endian bytes of a float64 array (NaN, the null of `node_arrays`, stays NaN);
    beyond float32 becomes ±inf (the invalid_logprob check reports it), as a C cast makes it."""
    with np.errstate(over="ignore"):
        return values.astype("<f4").tobytes()


def unpack_floats(blob: bytes | None) -> np.ndarray | None:
    if blob is None:
        return None
    return np.frombuffer(blob, dtype="<f4")


def pack_bits(bits: np.ndarray) -> bytes:
    """A bool array as bits, first value in the highest bit of the first byte (np.packbits)."""
    return np.packbits(bits).tobytes()


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
