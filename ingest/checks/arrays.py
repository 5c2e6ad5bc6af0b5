"""Checks on a node's per-token arrays (token ids, loss mask, behaviour logprobs, token bytes):
the faults of writers that build these arrays by hand and let them drift apart."""
from __future__ import annotations

from array import array
from collections.abc import Iterator

import numpy as np

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, Skip, check
from ingest.checks.scan import tokens, with_extra
from ingest.schema import TRAINER_LOGPROB_KEYS, Rollout
from ingest.words import plural

REPLACEMENT_HEX = "efbfbd"
FLOAT32_MAX = 3.4028234663852886e38  # logprobs are stored as float32
LOGPROB_EPS = 1e-6  # rounding can leave a certain token's logprob a hair above 0


@check("array_len_mismatch", "error", label="array length mismatch")
def array_len_mismatch(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A per-token array (`detail.array`: logprobs, mask, is_content, advantages,
    reference_logprobs, and the trainer's trainer_logprobs / old_logprobs kept in `extra`) did not
    have one entry per token in the source; it was padded with missing values or cut, and the
    source length is recorded (one rule for all: ingest/schema.py `Node._lockstep`).

    A short logprob array shifts every later position: the trainer pairs each token with the
    next token's logprob (rllm-org/rllm#898)."""
    for i in with_extra(r):
        node = r.nodes[i]
        for name, n_src in (node.extra.get("source_lengths") or {}).items():
            yield Hit(f"node {i}: {name} has {n_src} entries for {len(node.token_ids)} tokens",
                      i, min(n_src, len(node.token_ids)),
                      {"array": name, "source_length": n_src, "tokens": len(node.token_ids)})


def _nulls(values: list, nan: np.ndarray) -> np.ndarray:
    """Which NaN entries of a logprob array (`nan`: its isnan) are nulls in the source list
    `values`, not NaN numbers: all of them, decided at C speed (`list.count`), unless the list
    holds a NaN number; then each NaN position is looked at (rare: strict JSON has no NaN)."""
    if values.count(None) == int(nan.sum()):
        return nan
    out = np.zeros(len(values), dtype=bool)
    out[[k for k in np.flatnonzero(nan).tolist() if values[k] is None]] = True
    return out


def _positions(flags: np.ndarray) -> list[int]:
    """The indices where `flags` is true, as Python ints."""
    return np.flatnonzero(flags).tolist()


@check("suspected_logprob_padding", "warning", label="suspected logprob padding")
def suspected_logprob_padding(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A trailing run (>= 2) of exact 0.0 logprobs on a node's sampled tokens: 0.0 is
    probability 1, which writers use as padding. `position` is the token index within the node
    where the run starts, `detail.run` its length."""
    t = tokens(r)
    if t.logprobs is None or t.mask is None:
        return
    for s in t.slots((t.logprobs == 0.0) & t.mask):  # a node with no sampled 0.0 has no run
        i, a = t.nodes[s], t.arrays[s]
        if a.logprobs is None:
            continue
        sampled = np.flatnonzero(a.mask)  # only the trailing run of sampled tokens matters
        other = np.flatnonzero(a.logprobs[sampled] != 0.0)  # a null (NaN) ends the run too
        run = len(sampled) - (int(other[-1]) + 1 if len(other) else 0)
        if run >= 2:
            yield Hit(f"node {i}: last {run} sampled logprobs are exactly 0.0 (suspected padding)",
                      i, int(sampled[len(sampled) - run]), {"run": run})


@check("invalid_logprob", "error", label="invalid logprob")
def invalid_logprob(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A logprob above 0 (a probability above 1), NaN, ±inf, or beyond the float32 range the
    store keeps: a writer bug. The values are kept and their positions listed. Both per-token
    logprob arrays are checked: the behaviour logprobs (`detail.array` "logprobs") and the
    trainer's (`extra.trainer_logprobs` / `extra.old_logprobs`), where a non-number (a string, a
    boolean) or an integer too large for a float (10**400) is invalid too."""
    bad_at = _invalid_behaviour(r)
    trainer = [i for i in with_extra(r) if any(isinstance(r.nodes[i].extra.get(k), list) for k in TRAINER_LOGPROB_KEYS)]
    for i in sorted(set(bad_at) | set(trainer)):
        node = r.nodes[i]
        if i in bad_at:
            yield _invalid(i, "logprobs", node.logprobs, bad_at[i])
        for key in TRAINER_LOGPROB_KEYS:
            values = node.extra.get(key)
            if isinstance(values, list) and values:
                bad = _invalid_trainer(values)
                if bad:
                    yield _invalid(i, key, values, bad)


def _invalid_behaviour(r: Rollout) -> dict[int, list[int]]:
    """node → positions of its behaviour logprobs that are not null and not within
    [-FLOAT32_MAX, LOGPROB_EPS] (NaN numbers included), for the nodes that have any: decided on the
    flat logprobs, a node looked at alone only when it has one."""
    t = tokens(r)
    if t.logprobs is None:
        return {}
    lp = t.logprobs
    ok = (lp >= -FLOAT32_MAX) & (lp <= LOGPROB_EPS)
    if ok.all():
        return {}
    nan = np.isnan(lp)
    look = t.per_node_any(~ok & ~nan)
    if nan.any():  # a NaN is a null unless the source list holds a NaN number
        nans = np.add.reduceat(nan.view(np.uint8), t.starts[:-1], dtype=np.int64)
        for s in np.flatnonzero(t.has_logprobs & (nans > 0) & ~look).tolist():
            look[s] = r.nodes[t.nodes[s]].logprobs.count(None) != nans[s]
    out = {}
    for s in np.flatnonzero(look).tolist():
        i, a = t.nodes[s], t.arrays[s].logprobs
        values = r.nodes[i].logprobs
        slot_nan = np.isnan(a)
        bad = _positions(~((a >= -FLOAT32_MAX) & (a <= LOGPROB_EPS)) & ~_nulls(values, slot_nan))
        if bad:
            out[i] = bad
    return out


def _invalid_trainer(values: list) -> list[int]:
    """Positions of a trainer logprob array (as the source wrote it: any JSON value) that are
    neither null nor a valid logprob (`_valid_logprob`). At C speed when every value is a float or
    an int that fits one (numpy bounds; the values are exactly floats); else value by value."""
    if set(map(type, values)) <= {float, int}:
        try:
            a = np.frombuffer(array("d", values), dtype=np.float64)
        except OverflowError:  # an integer beyond float64: decided value by value
            pass
        else:
            return _positions(~((a >= -FLOAT32_MAX) & (a <= LOGPROB_EPS)))
    return [k for k, v in enumerate(values) if v is not None and not _valid_logprob(v)]


def _valid_logprob(v) -> bool:
    """A number (not a boolean) within [-FLOAT32_MAX, LOGPROB_EPS]; exact for integers of any size."""
    return not isinstance(v, bool) and isinstance(v, int | float) and -FLOAT32_MAX <= v <= LOGPROB_EPS


def _invalid(i: int, key: str, values: list, bad: list[int]) -> Hit:
    word = "logprob" if key == "logprobs" else f"{key} value"
    return Hit(f"node {i}: {plural(len(bad), word)} outside (-inf, 0]", i, bad[0],
               {"array": key, "positions": bad[:50], "values": [_shown(values[k]) for k in bad[:5]]})


def _shown(v) -> str:
    """A bad value as text for `detail.values`: its repr, cut to 40 characters (10**400 has 401 digits)."""
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


@check("bytes_lost_upstream", "warning", label="bytes lost upstream")
def bytes_lost_upstream(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """The source's token bytes are U+FFFD replacement bytes: the true bytes were lost before
    the trace was written, and text is not rebuilt from them."""
    for i in with_extra(r):
        pieces = r.nodes[i].extra.get("token_bytes") or []
        if _none_lost(pieces):
            continue
        lost = [k for k, h in enumerate(pieces) if isinstance(h, str) and REPLACEMENT_HEX in h.replace(" ", "")]
        if lost:
            yield Hit(f"node {i}: {len(lost)} token(s) carry U+FFFD; the true bytes are gone", i, lost[0],
                      {"positions": lost})


def _none_lost(pieces: list) -> bool:
    """True when no piece can hold REPLACEMENT_HEX: decided on all the pieces joined, at C speed,
    when they are all text (a match across two pieces only sends it to the exact look)."""
    try:
        return REPLACEMENT_HEX not in "".join(pieces).replace(" ", "")
    except TypeError:  # a piece that is not text
        return False


# A sampled token whose behaviour logprob is below this was drawn with probability < 2e-9: with
# temperature <= 1 and top-p/top-k sampling that does not happen in practice, so ids and logprobs
# almost surely belong to different tokens (shifted, or logprobs of another sequence). Positive
# logprobs are `invalid_logprob` (an error).
IMPLAUSIBLE_LOGPROB = -20.0


@check("placeholder_token_id", "error", label="placeholder token id")
def placeholder_token_id(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A negative sentinel (-100, -200: the ignore index or image placeholder of a collator)
    inside `token_ids`. The rollout is kept; the finding names the positions. (-1 is the
    readers' documented "id not recorded" and is not reported.)"""
    t = tokens(r)
    if not t.nodes:
        raise Skip("no token ids recorded")
    if t.ids.min() >= -1:
        return
    for s in t.slots(t.ids < -1):
        i, ids = t.nodes[s], t.arrays[s].token_ids
        at = np.flatnonzero(ids < -1)
        bad = at.tolist()
        values = np.unique(ids[at]).tolist()
        yield Hit(f"node {i}: {plural(len(bad), 'placeholder id')} ({', '.join(map(str, values[:5]))}) "
                  "in token_ids",
                  i, bad[0], {"positions": bad[:200], "count": len(bad), "values": values[:10]})


@check("implausible_logprob", "warning", label="implausible logprob")
def implausible_logprob(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A sampled token (assistant message) whose behaviour logprob is below
    IMPLAUSIBLE_LOGPROB (-20, probability < 2e-9): the sign that ids and logprobs belong to
    different tokens. Positive logprobs are reported as `invalid_logprob`."""
    t = tokens(r)
    sampled = [s for s, i in enumerate(t.nodes) if r.nodes[i].message.role == "assistant"]
    if all(_all_null(r, t, s) for s in sampled):
        raise Skip("no behaviour logprobs recorded on sampled tokens")
    low_any = t.per_node_any(t.logprobs < IMPLAUSIBLE_LOGPROB)  # NaN (null) is not below
    for s in sampled:
        if not low_any[s]:
            continue
        i, a = t.nodes[s], t.arrays[s]
        node = r.nodes[i]
        low_flags = a.logprobs < IMPLAUSIBLE_LOGPROB
        if a.mask is not None:
            low_flags &= a.mask
        if not low_flags.any():
            continue
        low = _positions(low_flags)
        lowest = node.logprobs[low[int(np.argmin(a.logprobs[low]))]]  # the source's value, the first of the lowest
        yield Hit(f"node {i}: {plural(len(low), 'sampled token')} with logprob below {IMPLAUSIBLE_LOGPROB:g}",
                  i, low[0], {"positions": low[:200], "count": len(low), "threshold": IMPLAUSIBLE_LOGPROB,
                              "min": lowest})


def _all_null(r: Rollout, t, s: int) -> bool:
    """Every behaviour logprob of node slot `s` is null (none given counts as all null)."""
    a = t.arrays[s].logprobs
    if a is None:
        return True
    nan = np.isnan(a)
    return bool(nan.all()) and bool(_nulls(r.nodes[t.nodes[s]].logprobs, nan).all())
