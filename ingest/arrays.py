"""A node's per-token arrays as numpy arrays, built once per node and shared by every stage of
ingest that scans tokens (checks, metrics, packing the node row, the content hash): no Python
loop over tokens anywhere on the ingest path (issue 25, item 3).

`node_arrays(node)` returns a `NodeArrays` cached on the node. The cache is keyed by the list
objects the node holds (and their lengths): a stage that replaces `node.token_ids` (a reader
fitting arrays, `Node._fit`) gets fresh arrays on the next call. The lists stay the node's
fields, as the format defines them (ingest/schema.py `Node`); the arrays are a read-only view of
them for computing, never written back.

Shapes: every array has `n = len(node.token_ids)` entries (the lockstep rule; `Node._lockstep`
fits them), except an array the source did not give, which is None.
- `token_ids`: int64 (ids are int32 by the schema; int64 keeps an out-of-range id visible to the
  check that reports it)
- `mask`, `is_content`: bool
- `logprobs`, `advantages`, `reference_logprobs`: float64, NaN where the source wrote `null`
  (`given` tells a null from a NaN the source wrote as a number: NaN cannot be written in strict
  JSON, so in practice NaN means null)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_EMPTY_IDS = np.zeros(0, dtype=np.int64)
FLOAT_ARRAYS = ("logprobs", "advantages", "reference_logprobs")


@dataclass(slots=True, frozen=True)
class NodeArrays:
    """One node's per-token arrays (see the module docstring for dtypes and shapes)."""

    token_ids: np.ndarray
    mask: np.ndarray | None
    is_content: np.ndarray | None
    logprobs: np.ndarray | None
    advantages: np.ndarray | None
    reference_logprobs: np.ndarray | None
    key: tuple  # the lists these were built from, with their lengths, for the cache

    @property
    def n(self) -> int:
        return len(self.token_ids)


def ids_array(values: list) -> np.ndarray:
    """int64 array of token ids (a list of Python ints)."""
    return np.fromiter(values, dtype=np.int64, count=len(values)) if values else _EMPTY_IDS


def bool_array(values: list | None) -> np.ndarray | None:
    """bool array of a mask-like list, None for an absent or empty one ("not given")."""
    if not values:
        return None
    return np.array(values, dtype=bool)


def float_array(values: list | None) -> np.ndarray | None:
    """float64 array of a list of numbers and nulls (null → NaN); None for an absent or empty
    list ("not given"). Values past float64 become ±inf, as JSON readers make them."""
    if not values:
        return None
    try:  # no null: numpy converts the list in C
        return np.array(values, dtype=np.float64)
    except TypeError:  # nulls among the numbers
        return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def _key(node) -> tuple:
    """The node's six lists themselves, then their lengths (0 for an absent one): the cache holds
    the lists, so an id cannot be reused by a new list while the arrays built from the old one are
    cached. Flat, and compared field by field in `node_arrays`: it runs once per node and stage."""
    d = node.__dict__
    t, m, c, lp, a, r = (d["token_ids"], d["mask"], d["is_content"], d["logprobs"], d["advantages"],
                         d["reference_logprobs"])
    return (t, m, c, lp, a, r, len(t), len(m), len(c), len(lp), 0 if a is None else len(a),
            0 if r is None else len(r))


def node_arrays(node) -> NodeArrays:
    """`node`'s per-token arrays (ingest/schema.py `Node`), built on the first call and cached
    on the node while its lists are the same objects of the same lengths."""
    private = node.__pydantic_private__
    cached = private.get("_arrays") if private else None
    if cached is not None:
        k, d = cached.key, node.__dict__
        t, m, c, lp, a, r = (d["token_ids"], d["mask"], d["is_content"], d["logprobs"], d["advantages"],
                             d["reference_logprobs"])
        if t is k[0] and m is k[1] and c is k[2] and lp is k[3] and a is k[4] and r is k[5] and \
                (len(t), len(m), len(c), len(lp), 0 if a is None else len(a), 0 if r is None else len(r)) == k[6:]:
            return cached
    key = _key(node)
    arrays = NodeArrays(ids_array(node.token_ids), bool_array(node.mask), bool_array(node.is_content),
                        float_array(node.logprobs), float_array(node.advantages),
                        float_array(node.reference_logprobs), key)
    set_arrays(node, arrays)
    return arrays


def set_arrays(node, arrays: NodeArrays) -> None:
    """Cache `arrays` on `node` (a decoder that built them while validating hands them over
    here, so no stage builds them twice). `arrays.key` must be `_key(node)`."""
    node.__pydantic_private__["_arrays"] = arrays


def key_of(node) -> tuple:
    """The cache key of `node`'s current lists (for `set_arrays`)."""
    return _key(node)
