"""app/store/prepare.py: token arrays packed from the nodes' numpy arrays into the very bytes the
list-based packing made (int32 ids, packed bits, float32 with NaN for null, ±inf beyond float32),
and the content hash taken from the stored parts: canonical (key order, source, reader) and
changed by any change of content (issue 25)."""
from __future__ import annotations

import copy
import math
import sys
from array import array

import numpy as np
import pytest

from app.store.prepare import HASH_VERSION, NODE_COLUMNS, content_hash, prepare
from ingest.schema import Rollout

COL = {name: i for i, name in enumerate(NODE_COLUMNS)}


# --- the packing before issue 25, from the lists: the oracle for the bytes -------------------

def _le(a: array) -> bytes:
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def old_ids(ids: list[int]) -> bytes:
    return _le(array("i", ids))


def old_floats(values: list | None) -> bytes | None:
    if values is None:
        return None
    return _le(array("f", [math.nan if v is None else v for v in values]))


def old_bits(bits: list[bool]) -> bytes:
    return np.packbits(np.frombuffer(bytes(bits), dtype=np.uint8)).tobytes()


def old_row_arrays(node: dict) -> tuple:
    """The six array columns as prepare wrote them from a node's lists before issue 25."""
    ids = node.get("token_ids", [])
    return (old_ids(ids), old_bits(node["mask"]) if node.get("mask") else None,
            old_bits(node["is_content"]) if node.get("is_content") else None,
            old_floats(node["logprobs"]) if node.get("logprobs") else None,
            old_floats(node.get("advantages")), old_floats(node.get("reference_logprobs")))


HOSTILE = [-0.5, None, 1e39, -1e39, 3.4028235e38, 3.4028236e38, 1e-46, -0.0, 5e-324, 0, -1, 1.0000000001]


def body(nodes: list[dict], **kw) -> dict:
    return {"schema": "rollscope/1", "id": "x", "run": {"id": "r"}, "step": 0, "nodes": nodes, **kw}


def test_packed_arrays_are_the_bytes_the_lists_made():
    n = len(HOSTILE)
    nodes = [
        {"message": {"role": "user", "content": "q"}},  # no tokens at all
        {"parent": 0, "message": {"role": "assistant", "content": "a"}, "sampled": True,
         "token_ids": [0, -1, -100, 2 ** 31 - 1, -(2 ** 31), *range(5, 5 + n - 5)],
         "mask": [True, False, True, True, False, True, False, False, True, True, True, False],
         "is_content": [False] * n, "logprobs": HOSTILE, "advantages": [None] * n,
         "reference_logprobs": [1.5] * n},
        {"parent": 1, "message": {"role": "user", "content": "again"}, "token_ids": [7, 8, 9],
         "advantages": [], "reference_logprobs": None},  # given but empty: an empty blob, not NULL
        {"parent": 2, "message": {"role": "assistant", "content": "b"}, "token_ids": [1, 2],
         "mask": [], "logprobs": [], "advantages": [0.25, None]},
        {"parent": 3, "message": {"role": "tool", "content": "c", "tool_call_id": "t"}, "advantages": []},
    ]
    r = Rollout.model_validate(body(copy.deepcopy(nodes)))
    rows = prepare(r).nodes
    for node, row in zip(nodes, rows):
        got = tuple(row[COL[c]] for c in ("token_ids", "mask", "is_content", "logprobs", "advantages",
                                          "reference_logprobs"))
        assert got == old_row_arrays(node)
        assert row[COL["n_tokens"]] == len(node.get("token_ids", []))
    assert np.isinf(np.frombuffer(rows[1][COL["logprobs"]], "<f4")[2:4]).all()  # beyond float32: ±inf
    assert np.isnan(np.frombuffer(rows[1][COL["logprobs"]], "<f4")[1])  # null: NaN
    s = prepare(r).summary
    assert (s["n_tokens"], s["n_trained_tokens"]) == (n + 5, 7)


def test_a_token_id_past_int32_is_refused_naming_where():
    r = Rollout.model_validate(body([{"message": {"role": "user", "content": "q"}, "token_ids": [1, 2]},
                                     {"parent": 0, "message": {"role": "assistant", "content": "a"},
                                      "token_ids": [3, 4, 5]}]))
    r.nodes[1].token_ids = [3, 2 ** 31, 5]  # past the schema's check, as a reader might leave it
    with pytest.raises(OverflowError, match=r"token id 2147483648 past int32 \(a node's token_ids\[1\]"):
        prepare(r)


BASE = body([
    {"message": {"role": "user", "content": "hi", "k": {"b": 1, "a": 2}}},
    {"parent": 0, "message": {"role": "assistant", "content": "yo",
                              "tool_calls": [{"id": "c", "name": "f", "arguments": "{}", "z": {"q": 1, "p": 2}}]},
     "token_ids": [1, 2, 3], "mask": [True, False, True], "logprobs": [-0.5, None, -0.25],
     "advantages": [0.1, 0.2, 0.3], "loss_weights": {"b": [1.0], "a": [2.0]}, "custom": {"y": 1, "x": 2}},
], reward=1.0, tools=[{"b": 1, "a": 2}], metrics={"m2": 1.0, "m1": 2.0})


def chash(d: dict) -> str:
    return content_hash(Rollout.model_validate(d))


def reversed_keys(o):
    if isinstance(o, dict):
        return {k: reversed_keys(v) for k, v in reversed(list(o.items()))}
    if isinstance(o, list):
        return [reversed_keys(v) for v in o]
    return o


def test_the_hash_is_canonical_and_marked():
    h = chash(BASE)
    assert h.startswith(HASH_VERSION) and len(h) == 64 and int(h[3:], 16) >= 0
    assert prepare(Rollout.model_validate(BASE)).summary["content_hash"] == h
    assert chash(reversed_keys(BASE)) == h  # key order of the source, extras included
    assert chash({**BASE, "source": {"format": "verl", "file": "other.jsonl", "line": 9}}) == h


def _set(path, value):
    def edit(d):
        *head, last = path
        for k in head:
            d = d[k]
        d[last] = value
    return edit


@pytest.mark.parametrize("edit", [
    _set(("nodes", 1, "token_ids", 1), 7),
    _set(("nodes", 1, "logprobs", 0), -0.5 + 2 ** -20),  # within float32's precision
    _set(("nodes", 1, "logprobs", 1), -0.0),  # a value where there was null
    _set(("nodes", 1, "mask", 1), True),
    _set(("nodes", 1, "advantages"), None),
    _set(("nodes", 1, "reference_logprobs"), []),  # given but empty
    _set(("nodes", 1, "extra_field"), 1),
    _set(("nodes", 1, "custom", "x"), 3),
    _set(("nodes", 1, "parent"), None),
    _set(("nodes", 1, "timestamp"), 5.0),
    _set(("nodes", 0, "message", "content"), "hi!"),
    _set(("nodes", 0, "message", "k", "a"), 3),
    _set(("nodes", 1, "message", "tool_calls", 0, "arguments"), "{ }"),
    _set(("metrics", "m1"), 2.5),
    _set(("new_field",), 1),
    lambda d: d["nodes"].append({"message": {"role": "user", "content": ""}}),
    lambda d: (_set(("nodes", 0, "message", "content"), "hiyo")(d),
               _set(("nodes", 1, "message", "content"), "")(d)),  # text moved between messages
], ids=lambda f: "edit")
def test_any_change_of_content_changes_the_hash(edit):
    d = copy.deepcopy(BASE)
    edit(d)
    assert chash(d) != chash(BASE)


@pytest.mark.parametrize(("a", "b"), [
    # a change below float32's precision: the stored float32 bytes are the same
    (_set(("nodes", 1, "logprobs", 0), -0.123456789012345), _set(("nodes", 1, "logprobs", 0), -0.12345679)),
    # NUL is stored as U+FFFD: in a message, a node's extra, the envelope
    (_set(("nodes", 0, "message", "content"), "a\x00b"), _set(("nodes", 0, "message", "content"), "a\ufffdb")),
    (_set(("nodes", 1, "custom", "x"), "\x00"), _set(("nodes", 1, "custom", "x"), "\ufffd")),
    (_set(("task",), {"key": "k\x00"}), _set(("task",), {"key": "k\ufffd"})),
    # trainer logprobs keep NaN as "NaN" in the stored extra (app/store/prepare.py `_second_logprobs_kept`)
    (_set(("nodes", 1, "trainer_logprobs"), [-1.0, float("nan"), -2.0]),
     _set(("nodes", 1, "trainer_logprobs"), [-1.0, "NaN", -2.0])),
], ids=["below float32", "NUL in a message", "NUL in extra", "NUL in the envelope", "trainer NaN"])
def test_the_hash_is_of_what_is_stored(a, b):
    """Two rollouts the store keeps as the same rows hash the same: a rollout read back from the
    store (`rollscope recheck`, an export ingested again) is found unchanged, not replaced."""
    da, db = copy.deepcopy(BASE), copy.deepcopy(BASE)
    a(da)
    b(db)
    assert chash(da) == chash(db)
    assert chash(da) != chash(BASE)
