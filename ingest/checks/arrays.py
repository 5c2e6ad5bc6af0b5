"""Checks on a node's per-token arrays (token ids, loss mask, behaviour logprobs, token bytes):
the faults of writers that build these arrays by hand and let them drift apart."""
from __future__ import annotations

import math
from array import array
from collections.abc import Iterator

import numpy as np

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, Skip, check, memo, plural
from ingest.schema import TRAINER_LOGPROB_KEYS, Rollout

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
    for i, node in enumerate(r.nodes):
        for name, n_src in (node.extra.get("source_lengths") or {}).items():
            yield Hit(f"node {i}: {name} has {n_src} entries for {len(node.token_ids)} tokens",
                      i, min(n_src, len(node.token_ids)),
                      {"array": name, "source_length": n_src, "tokens": len(node.token_ids)})


def _bounds(values: list) -> tuple[float, float] | None:
    """(min, max) of a list of logprobs when all are None ((inf, -inf): nothing to check) or all
    finite numbers, decided at C speed (one conversion to float64, numpy's min and max); None
    when it has to be looked at value by value (a mix with None, NaN, ±inf)."""
    if not values:
        return math.inf, -math.inf
    try:  # `None in values` first would compare every float with None, slowly
        a = np.frombuffer(array("d", values), dtype=np.float64)
    except TypeError:  # a None among them
        return (math.inf, -math.inf) if values[0] is None and values.count(None) == len(values) else None
    except OverflowError:  # a number beyond float64
        return None
    low, high = float(a.min()), float(a.max())  # NaN propagates into both
    return (low, high) if math.isfinite(low) and math.isfinite(high) else None


def _all_within(r: Rollout, i: int, low: float, high: float) -> bool:
    """True when every logprob of node `i` is None or within [low, high] (bounds derived once per
    check run, for the two logprob checks); False means look closer."""
    b = memo("logprob_bounds", lambda: [_bounds(n.logprobs) for n in r.nodes])[i]
    return b is not None and (b[0] > b[1] or (low <= b[0] and b[1] <= high))


@check("suspected_logprob_padding", "warning", label="suspected logprob padding")
def suspected_logprob_padding(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A trailing run (>= 2) of exact 0.0 logprobs on a node's sampled tokens: 0.0 is
    probability 1, which writers use as padding. `position` is the token index within the node
    where the run starts, `detail.run` its length."""
    for i, node in enumerate(r.nodes):
        if not node.mask or not node.logprobs:
            continue
        run, start = 0, None
        for k in range(len(node.mask) - 1, -1, -1):  # from the end: only the trailing run matters
            if not node.mask[k]:
                continue
            lp = node.logprobs[k]
            if lp is not None and lp == 0.0:
                run, start = run + 1, k
            else:
                break
        if run >= 2:
            yield Hit(f"node {i}: last {run} sampled logprobs are exactly 0.0 (suspected padding)",
                      i, start, {"run": run})


@check("invalid_logprob", "error", label="invalid logprob")
def invalid_logprob(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A logprob above 0 (a probability above 1), NaN, ±inf, or beyond the float32 range the
    store keeps: a writer bug. The values are kept and their positions listed. Both per-token
    logprob arrays are checked: the behaviour logprobs (`detail.array` "logprobs") and the
    trainer's (`extra.trainer_logprobs` / `extra.old_logprobs`), where a non-number (a string, a
    boolean) or an integer too large for a float (10**400) is invalid too."""
    for i, node in enumerate(r.nodes):
        if not _all_within(r, i, -FLOAT32_MAX, LOGPROB_EPS):
            bad = [k for k, lp in enumerate(node.logprobs)
                   if lp is not None and not (-FLOAT32_MAX <= lp <= LOGPROB_EPS)]
            if bad:
                yield _invalid(i, "logprobs", node.logprobs, bad)
        for key in TRAINER_LOGPROB_KEYS:
            values = node.extra.get(key)
            if isinstance(values, list) and values:
                bad = [k for k, v in enumerate(values) if v is not None and not _valid_logprob(v)]
                if bad:
                    yield _invalid(i, key, values, bad)


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
    for i, node in enumerate(r.nodes):
        pieces = node.extra.get("token_bytes") or []
        lost = [k for k, h in enumerate(pieces) if isinstance(h, str) and REPLACEMENT_HEX in h.replace(" ", "")]
        if lost:
            yield Hit(f"node {i}: {len(lost)} token(s) carry U+FFFD; the true bytes are gone", i, lost[0],
                      {"positions": lost})


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
    if not any(n.token_ids for n in r.nodes):
        raise Skip("no token ids recorded")
    for i, node in enumerate(r.nodes):
        if not node.token_ids or min(node.token_ids) >= -1:
            continue
        bad = [k for k, t in enumerate(node.token_ids) if t < -1]
        if bad:
            values = sorted({node.token_ids[k] for k in bad})
            yield Hit(f"node {i}: {plural(len(bad), 'placeholder id')} ({', '.join(map(str, values[:5]))}) "
                      "in token_ids",
                      i, bad[0], {"positions": bad[:200], "count": len(bad), "values": values[:10]})


@check("implausible_logprob", "warning", label="implausible logprob")
def implausible_logprob(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A sampled token (assistant message) whose behaviour logprob is below
    IMPLAUSIBLE_LOGPROB (-20, probability < 2e-9): the sign that ids and logprobs belong to
    different tokens. Positive logprobs are reported as `invalid_logprob`."""
    sampled = [(i, n) for i, n in enumerate(r.nodes) if n.message.role == "assistant" and n.token_ids]
    if all(n.logprobs.count(None) == len(n.logprobs) for _, n in sampled):
        raise Skip("no behaviour logprobs recorded on sampled tokens")
    for i, node in sampled:
        if _all_within(r, i, IMPLAUSIBLE_LOGPROB, math.inf):
            continue
        low = [k for k, lp in enumerate(node.logprobs) if lp is not None and lp < IMPLAUSIBLE_LOGPROB
               and (not node.mask or node.mask[k])]
        if low:
            yield Hit(f"node {i}: {plural(len(low), 'sampled token')} with logprob below {IMPLAUSIBLE_LOGPROB:g}",
                      i, low[0], {"positions": low[:200], "count": len(low), "threshold": IMPLAUSIBLE_LOGPROB,
                                  "min": min(node.logprobs[k] for k in low)})
