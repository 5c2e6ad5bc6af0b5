"""The native reader's fast path (issue 25, items 1 and 3): one `rollscope/1` JSONL line validated
in one pass in Rust by a copy of `Rollout`'s own pydantic-core schema whose nodes carry no Python
hooks, then finished by one vectorised pass per rollout (no Python loop over tokens), with each
node's per-token arrays handed to `ingest/arrays.py` so no later stage converts them again.

`rollout(raw)` returns the `Rollout` that `Rollout.model_validate_json(raw)` would return (same
field values, same `extra`, same fields set), or None when the line is anything but plain; the
caller then runs pydantic on it, which accepts, fits or names the line and field of what is wrong.

Why a copy of the schema: pydantic validates a node's fields in Rust, but then calls five Python
functions per node (`Node._timestamp_a_number`, `_lockstep`, `_fold_unknown_into_extra` for the
node, its message and each tool call, and `model_post_init`), which cost more than the parse of
the node's 400 tokens. The copy (`_schema`) leaves them out and keeps what they decide:

- `_timestamp_a_number`: the copy's `timestamp` is a strict float (a JSON number, ints becoming
  floats): a boolean or string timestamp, which the hook would move to `extra.unread_times`,
  fails, and the line goes to pydantic.
- `_non_finite_values`: a node with a `non_finite` marker sends the line to pydantic (rare: a
  NaN logprob exported).
- `_fold_unknown_into_extra`: unknown keys stay in `__pydantic_extra__`; a node, message or tool
  call that has one sends the line to pydantic (no folding here: one way to fold).
- `_lockstep`: `_finish` checks lengths and ids by arrays: an array whose length is neither 0 nor
  `len(token_ids)` (fitted by the hook), a trainer logprob array in `extra` likewise, a placeholder
  id (< -1, recorded by `mark_placeholders`) or an id past int64 or int32 (refused) send the line to
  pydantic.
- `model_post_init`: `_finish` sets each node's private attributes as it would.

The envelope and `calls` keep every hook; `Rollout._graph_is_well_formed` runs as usual.

Measured (CPU time, 2-core machine under load, same run; tests/formats/test_fast_decode.py proves
the results the same): a 20-turn text-only rollout 0.50 → 0.25 ms; a 20-turn, 8k-token rollout
2.2-3.0 → 1.6-2.3 ms (about 0.75) with its numpy arrays built, 0.66-0.86 of pydantic followed by
`node_arrays` on every node. Most of what is left is pydantic-core's own parse of the token arrays
(twice orjson's time; orjson first, then the rest re-validated, was measured slower) and, on a
5,000-turn rollout, the cyclic collector walking the nodes as they are made (app/store/gc_relaxed.py).
"""
from __future__ import annotations

from collections import deque
from functools import lru_cache
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
from pydantic_core import SchemaValidator

from ingest.arrays import FLOAT_ARRAYS, NodeArrays, key_of, set_arrays
from ingest.fields import INT32_MAX
from ingest.schema import TRAINER_LOGPROB_KEYS, Message, Node, Rollout, ToolCall

# the Python hooks of a node that the copy leaves out (see the module docstring)
_HOOKS = frozenset({"_lockstep", "_fold_unknown_into_extra", "_timestamp_a_number", "_non_finite_values"})
_NODE_MODELS = (Node, Message, ToolCall)

_chain = chain.from_iterable
_set = object.__setattr__
_unknown = attrgetter("__pydantic_extra__")
_dict_of = attrgetter("__dict__")
_item = itemgetter
_PRIVATE = {"_arrays": None}  # Node's private attributes as `model_post_init` sets them


class Odd(Exception):
    """The line is not plain: pydantic decides it."""


def rollout(raw: bytes) -> Rollout | None:
    """The rollout of one native line, or None when the line needs pydantic (see the module
    docstring). Never raises for bad input."""
    try:
        r = _validator().validate_json(raw)
    except ValueError:
        return None
    try:
        _finish(r.nodes)
    except Odd:
        return None
    return r


@lru_cache(maxsize=1)
def _validator() -> SchemaValidator:
    return SchemaValidator(_schema(Rollout.__pydantic_core_schema__))


def _schema(schema: Any, in_nodes: bool = False) -> Any:
    """A copy of `schema` (a pydantic-core schema) whose node subtree (the `nodes` field) has no
    Python hooks, no `model_post_init`, and a strict `timestamp`. Raises ValueError when the
    schema is not shaped as this module expects (a pydantic upgrade): the test suite catches it."""
    if isinstance(schema, list):
        return [_schema(s, in_nodes) for s in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if in_nodes and kind in ("function-after", "function-before", "function-wrap", "function-plain"):
        if getattr(schema["function"]["function"], "__name__", None) not in _HOOKS:
            raise ValueError(f"unexpected validator in the node schema: {schema['function']}")
        return _schema(schema["schema"], in_nodes)
    out = {}
    for key, value in schema.items():
        if in_nodes and key == "ref":
            continue  # the copy is a different schema: its parts are not the originals
        if key == "fields" and kind == "model-fields" and "nodes" in value and not in_nodes:
            out[key] = {name: _schema(f, name == "nodes") for name, f in value.items()}
        else:
            out[key] = _schema(value, in_nodes)
    if in_nodes and kind == "model":
        if schema["cls"] not in _NODE_MODELS:
            raise ValueError(f"unexpected model in the node schema: {schema['cls']}")
        out.pop("post_init", None)
        if schema["cls"] is Node:
            _strict_float(out["schema"]["fields"]["timestamp"])
    return out


def _strict_float(field: dict) -> None:
    """The float inside a `float | None = None` model field, made strict."""
    inner = field["schema"]
    while inner.get("type") in ("default", "nullable"):
        inner = inner["schema"]
    if inner.get("type") != "float":
        raise ValueError(f"unexpected timestamp schema: {field}")
    inner["strict"] = True


def _finish(nodes: list[Node]) -> None:
    """What the left-out hooks would do to `nodes`, or Odd where they would change or refuse
    something (module docstring). Vectorised: C-level maps over nodes, numpy over tokens."""
    if not nodes:
        return
    # fields read through each model's __dict__ (itemgetter), not as attributes: a third of the
    # time on a 5,000-turn rollout
    ds = list(map(_dict_of, nodes))
    messages = list(map(_item("message"), ds))
    if any(map(_unknown, nodes)) or any(map(_unknown, messages)) or any(map(_item("non_finite"), ds)):
        raise Odd  # unknown keys (folded into `extra`), non-finite values (put back): Node's hooks
    calls = list(filter(None, map(_item("tool_calls"), map(_dict_of, messages))))
    if calls and any(map(_unknown, _chain(calls))):
        raise Odd
    deque(map(_set, nodes, repeat("__pydantic_private__"), map(dict.copy, repeat(_PRIVATE, len(nodes)))),
          maxlen=0)
    ids = list(map(_item("token_ids"), ds))
    sizes = list(map(len, ids))
    per_field = {name: list(map(_item(name), ds)) for name in ("mask", "is_content", *FLOAT_ARRAYS)}
    for name, lists in per_field.items():
        if not any(lists):
            continue
        lens = [len(v) if v else 0 for v in lists] if None in lists else list(map(len, lists))
        if lens != sizes and any(k and k != n for k, n in zip(lens, sizes)):
            raise Odd  # fitted by Node._lockstep
    if any(map(_item("extra"), ds)):
        for d, n in zip(ds, sizes):
            for key in TRAINER_LOGPROB_KEYS if d["extra"] else ():
                v = d["extra"].get(key)
                if isinstance(v, list) and v and len(v) != n:
                    raise Odd  # fitted by Node._lockstep
    total = sum(sizes)
    if not total:
        return
    try:
        all_ids = np.fromiter(_chain(ids), np.int64, total)
    except OverflowError:
        raise Odd from None
    if all_ids.min() < -1 or all_ids.max() > INT32_MAX:
        raise Odd  # a placeholder (Node.mark_placeholders) or an id past int32 (refused)
    mask, is_content, logprobs, advantages, reference = (
        _split(_values(name, lists, sizes), lists, sizes) for name, lists in per_field.items())
    start = 0
    for k, node in enumerate(nodes):
        n = sizes[k]
        if n:
            set_arrays(node, NodeArrays(all_ids[start:start + n], mask[k], is_content[k], logprobs[k], advantages[k],
                                        reference[k], key_of(node)))
            start += n


def _values(name: str, lists: list[list | None], sizes: list[int]) -> np.ndarray | None:
    """The non-empty lists of field `name` end to end as one array (bool for masks, float64 with
    NaN for null otherwise), as ingest/arrays.py builds them node by node; None when no node with
    tokens gives the field."""
    given = [v for v, n in zip(lists, sizes) if v and n]
    if not given:
        return None
    total = sum(map(len, given))
    if name in ("mask", "is_content"):
        return np.fromiter(_chain(given), bool, total)
    try:
        return np.fromiter(_chain(given), np.float64, total)
    except TypeError:  # nulls among the numbers
        a = np.array(list(_chain(given)), dtype=object)
        a[np.equal(a, None)] = np.nan
        return a.astype(np.float64)


def _split(whole: np.ndarray | None, lists: list[list | None], sizes: list[int]) -> list:
    """Per node, its slice of `whole` (`_values`), None where it gives no value."""
    if whole is None:
        return [None] * len(lists)
    out, start = [], 0
    for v, n in zip(lists, sizes):
        if v and n:
            out.append(whole[start:start + n])
            start += n
        else:
            out.append(None)
    return out
