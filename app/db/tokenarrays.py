"""Per-token arrays as compact binary: int32 ids, float32 values (NaN = missing), packed bits.

Stored little-endian. A bit array needs its length to unpack; the node row keeps `n_tokens`.
Two NaNs are told apart in a float array: numpy's NaN (0x7FC00000) is a null (no value), and
`NAN_MARK` (0x7FC00001, also a quiet NaN) a NaN the source wrote as a number (non-strict JSON),
which `invalid_logprob` reports: so a re-check of the stored rollout reports it too. Anything
reading values sees a NaN either way (missing); `floats_kept` (reading a rollout back whole)
tells them apart.
Packing takes the node's numpy arrays (ingest/arrays.py `node_arrays`: int64 ids, bool masks,
float64 values with NaN for null), built once per node for every stage: no Python loop over
tokens.
"""
from __future__ import annotations

import math

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


NAN_MARK = 0x7FC00001  # float32 bits of a NaN the source wrote as a number (not a null)


def pack_floats(values: np.ndarray, nan_numbers: np.ndarray | None = None) -> bytes:
    """float32 little-endian bytes of a float64 array (NaN, the null of `node_arrays`, stays NaN);
    beyond float32 becomes ±inf (the invalid_logprob check reports it), as a C cast makes it.
    `nan_numbers`: positions of NaNs the source wrote as numbers, stored as `NAN_MARK`."""
    with np.errstate(over="ignore"):
        packed = values.astype("<f4")
    if nan_numbers is not None and len(nan_numbers):
        packed.view("<u4")[nan_numbers] = NAN_MARK
    return packed.tobytes()


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


def floats_kept(arr: np.ndarray | None) -> list[float | None] | None:
    """float32 array → the list it was packed from (`pack_floats`): each value as `f32` gives it,
    None for a null, float NaN where `NAN_MARK` says the source wrote NaN as a number."""
    out = floats_or_none(arr)
    if out:
        for k in np.flatnonzero(arr.view("<u4") == NAN_MARK).tolist():
            out[k] = math.nan
    return out
