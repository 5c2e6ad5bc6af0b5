"""`ingest.metrics.mismatch` and `ingest.advantages.recorded_advantage` on numpy arrays (issue 25)
give what their loops over tokens gave, kept here as they were, on random rollouts with nulls,
NaN, non-numbers, integers past float64, ratios at the bounds, short trainer arrays."""
from __future__ import annotations

import math
import random

from ingest.advantages import recorded_advantage
from ingest.metrics import RATIO_HIGH, RATIO_LOW, TRAINER_LOGPROB_KEYS, _num, mismatch
from ingest.schema import Rollout


def old_mismatch(r):
    n, total, worst, outside = 0, [], None, 0
    for node in r.nodes:
        key = next((k for k in TRAINER_LOGPROB_KEYS if isinstance(node.extra.get(k), list)), None)
        if key is None or key in (lengths := node.extra.get("source_lengths") or {}) or "logprobs" in lengths:
            continue
        trainer = node.extra[key]
        for i, (b, t) in enumerate(zip(node.logprobs, trainer)):
            if node.mask and (i >= len(node.mask) or not node.mask[i]):
                continue
            b, t = _num(b), _num(t)
            if b is None or t is None:
                continue
            d = t - b
            n += 1
            total.append(abs(d))
            worst = abs(d) if worst is None or abs(d) > worst else worst
            ratio = math.exp(d) if d < 700 else math.inf
            if not RATIO_LOW <= ratio <= RATIO_HIGH:
                outside += 1
    return {"tokens": n, "abs_sum": math.fsum(total), "abs_max": worst, "out_of_range": outside}

def old_adv(rollout):
    values = {round(a, 6) for n in rollout.nodes if n.advantages
              for a, m in zip(n.advantages, n.mask or [True] * len(n.advantages))
              if m and a is not None and math.isfinite(a)}
    if len(values) == 1:
        return float(values.pop())


def _value(rng: random.Random, kind: str):
    x = rng.random()
    if x < 0.1:
        return None
    if kind == "t" and x < 0.13:
        return rng.choice(["a", True, False, 10**400, float("nan"), 5])
    if x < 0.2:
        return rng.choice([0.0, -0.0, math.log(0.8), math.log(1.25), -1e-9, 700.0, -800.0, 1e300])
    return -rng.expovariate(2)


def _rollout(rng: random.Random, short: bool) -> Rollout:
    nodes = []
    for k in range(rng.randint(1, 4)):
        n = rng.randint(0, 12)
        nd = {"parent": k - 1 if k else None, "message": {"role": rng.choice(["assistant", "user"]), "content": "x"},
              "token_ids": list(range(n))}
        if n and rng.random() < 0.7:
            nd["mask"] = [rng.random() < 0.7 for _ in range(n)]
        if n and rng.random() < 0.8:
            nd["logprobs"] = [_value(rng, "b") for _ in range(n)]
        if n and rng.random() < 0.7:
            size = rng.randint(n - 1, n + 1) if short else n
            nd["extra"] = {"trainer_logprobs": [_value(rng, "t") if rng.random() < 0.5 else _near(rng, _value(rng, "b"))
                                                for _ in range(size)]}
        if n and rng.random() < 0.5:
            c = rng.choice([0.5, -0.25, 0.1234567, 0.12345649])
            nd["advantages"] = [rng.choice([c, c, c, None, float("nan"), c + 1e-8, c + rng.random()]) for _ in range(n)]
        nodes.append(nd)
    return Rollout.model_validate({"schema": "rollscope/1", "id": "x", "run": {"id": "r"}, "nodes": nodes})


def _near(rng: random.Random, b):
    return b if b is None else b + rng.choice([0, 0.1, -0.3])


def test_mismatch_and_recorded_advantage_are_what_the_loops_gave():
    rng = random.Random(1)
    fired = recorded = 0
    for trial in range(600):
        r = _rollout(rng, short=trial % 5 == 0)
        got, want = mismatch(r), old_mismatch(r)
        assert repr(got) == repr(want), (trial, got, want)
        fired += got["out_of_range"] > 0
        adv = recorded_advantage(r)
        assert repr(adv) == repr(old_adv(r)), trial
        recorded += adv is not None
    assert fired > 100 and recorded > 50  # the inputs reach both the counts and the recorded value
