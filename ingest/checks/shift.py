"""`logprob_shift`: a second logprob array on a sampled node (the trainer's recomputed logprobs)
that agrees with the behaviour logprobs far better shifted by one or two positions than in
place: an off-by-one in how one side pairs logits with tokens, not a policy that moved.

From PrimeIntellect-ai/prime-rl#1525 (review of the fused LM head: "position mismatch between
trainer and inference logprobs ... a 1-position offset") and modelscope/ms-swift#8196
(`old_per_token_logps` one position left of `rollout_per_token_logps`). The mismatch chart
shows how large the disagreement is; this names its cause.

Only the trainer's own recomputation of the sampled tokens is compared (`extra.trainer_logprobs`,
`extra.old_logprobs`: ingest/metrics.py TRAINER_LOGPROB_KEYS). `reference_logprobs` come from
another model (the KL reference), which is expected to disagree in place, so agreement or not
says nothing about alignment there.
"""
from __future__ import annotations

import math
from collections.abc import Iterator

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, Skip, check
from ingest.checks.scan import with_extra
from ingest.metrics import TRAINER_LOGPROB_KEYS, finite_number
from ingest.schema import Rollout

OFFSETS = (1, -1, 2, -2)  # tried in this order: the smallest shift wins a tie
MIN_PAIRS = 4  # overlapping (trainer, behaviour) pairs needed at the shift and in place
TOLERANCE = 0.05  # nats: a pair "agrees" within this
MIN_IN_PLACE = 0.1  # nats: mean |Δ| in place below this is agreement enough; nothing to explain
MIN_RATIO = 4.0  # mean |Δ| in place must be at least this many times the mean |Δ| shifted
MIN_AGREE = 0.75  # share of shifted pairs within TOLERANCE


_num = finite_number  # never an OverflowError on 10**400


def agreement(second: list, behaviour: list, offset: int) -> tuple[int, float, float] | None:
    """(pairs, mean |Δ| in nats, share of pairs with |Δ| <= TOLERANCE) of `second[i]` against
    `behaviour[i + offset]`, over the positions where both are finite numbers; None when no pair
    exists."""
    deltas = []
    for i, s in enumerate(second):
        j = i + offset
        if 0 <= j < len(behaviour):
            a, b = _num(s), _num(behaviour[j])
            if a is not None and b is not None:
                deltas.append(abs(a - b))
    if not deltas:
        return None
    return len(deltas), math.fsum(deltas) / len(deltas), sum(d <= TOLERANCE for d in deltas) / len(deltas)


def second_arrays(r: Rollout) -> Iterator[tuple[int, str, list]]:
    """(node index, key, array) for every sampled node carrying a trainer logprob array."""
    for i in with_extra(r):
        node = r.nodes[i]
        if node.message.role != "assistant":
            continue
        for key in TRAINER_LOGPROB_KEYS:
            values = node.extra.get(key)
            if isinstance(values, list) and values:
                yield i, key, values


@check("logprob_shift", "error", label="logprob shift")
def logprob_shift(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """The trainer's logprobs of a sampled node (`extra.trainer_logprobs` or `extra.old_logprobs`)
    agree with the behaviour logprobs far better shifted by one or two positions than in place:
    `second[i]` matches `logprobs[i + offset]`. Fires when both alignments have >= MIN_PAIRS (4)
    pairs, the mean |Δ| in place is >= MIN_IN_PLACE (0.1 nats) and >= MIN_RATIO (4) times the
    shifted one, and >= MIN_AGREE (75%) of the shifted pairs agree within TOLERANCE (0.05 nats).
    `detail` names the array, the offset and the agreement both ways. Skips, saying why, when no
    trainer array has MIN_PAIRS finite values beside finite behaviour logprobs (NaN, ±inf,
    strings: `invalid_logprob` reports them), rather than passing it silently."""
    found = list(second_arrays(r))
    if not found:
        raise Skip("no trainer logprobs (extra.trainer_logprobs / extra.old_logprobs) on a sampled node")
    decided, short = False, []
    for i, key, second in found:
        behaviour = r.nodes[i].logprobs
        here = agreement(second, behaviour, 0)
        if here is None or here[0] < MIN_PAIRS:
            short.append(f"node {i}: {key} has {here[0] if here else 0} finite value(s) beside behaviour logprobs")
            continue
        decided = True
        if here[1] < MIN_IN_PLACE:
            continue
        best = None
        for off in OFFSETS:
            a = agreement(second, behaviour, off)
            if a is not None and a[0] >= MIN_PAIRS and (best is None or a[1] < best[1][1]):
                best = (off, a)
        if best is None:
            continue
        off, shifted = best
        if shifted[1] * MIN_RATIO > here[1] or shifted[2] < MIN_AGREE:
            continue
        detail = {"array": key, "offset": off, "tokens": len(r.nodes[i].token_ids),
                  "pairs_in_place": here[0], "pairs_shifted": shifted[0],
                  "mean_abs_delta_in_place": round(here[1], 4), "mean_abs_delta_shifted": round(shifted[1], 4),
                  "within_tolerance_in_place": round(here[2], 4), "within_tolerance_shifted": round(shifted[2], 4),
                  "tolerance": TOLERANCE}
        yield Hit(f"node {i}: {key} are offset by {off:+d} position{'s' if abs(off) > 1 else ''}: "
                  f"{key}[i] matches logprobs[i{off:+d}] (mean |Δ| {shifted[1]:.3f} shifted, "
                  f"{here[1]:.3f} in place)", i, None, detail)
    if not decided:
        raise Skip(f"too few finite trainer logprobs to compare (fewer than {MIN_PAIRS} pairs): "
                   + "; ".join(short[:3]))
