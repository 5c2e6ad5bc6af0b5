"""The statistics of one training step's rollouts, with no database: what the per-step and
per-task rollups hold (app/store/rollups.py reads the rows and writes the results).

Input rows are mappings with the `rollout` summary columns a step is computed from (`pk`,
`rollout_id`, `attempt`, `group_id`, `task_key`, `agent`, `ending`, `ending_detail`, `reward`,
`n_turns`, `n_tokens`, `n_trained_tokens`, `n_response_tokens`, the latencies, staleness and
mismatch counters, `trainer_filtered`, `flags`, `source_file`, `source_format`, `ingested_at`);
rewards are floats or None, latencies seconds. Means are exactly rounded (fsum), quantiles
numpy's linear interpolation, so a rollup equals a fresh recomputation in any row order.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

import numpy as np

from ingest.advantages import Member, group_advantages, one_member_group
from ingest.schema import Ending

ENDINGS = [e.value for e in Ending]  # submitted, task_detected, truncated, length_cut, error, unknown
# Why a rollout carried no gradient, in the order they are checked (the first that applies).
NO_GRADIENT_REASONS = ["trainer_filtered", "error_dropped", "mask_zeroed", "too_stale", "zero_variance_group",
                       "one_member_group"]


def _mean(values: list[float]) -> float | None:
    """Exactly rounded mean (fsum), so it does not depend on row order; huge finite values
    (1e308) that overflow the sum are averaged scaled down by the largest magnitude."""
    if not values:
        return None
    try:
        m = math.fsum(values) / len(values)
    except OverflowError:
        m = math.inf
    if not math.isfinite(m):
        scale = max(abs(v) for v in values)
        m = math.fsum(v / scale for v in values) / len(values) * scale
    return m if math.isfinite(m) else None


def exact_partials(values: list[float]) -> list[float] | None:
    """Non-overlapping floats whose exact sum is the exact sum of `values` (Shewchuk's partials,
    the algorithm behind `math.fsum`; Python recipe 393090). A step keeps them so that a run's
    total over its steps is exactly rounded too: `fsum` of every step's partials. None when an
    intermediate sum overflows (huge finite values); callers then weight the step means."""
    partials: list[float] = []
    for x in values:
        i = 0
        for y in partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                partials[i] = lo
                i += 1
            x = hi
        partials[i:] = [x]
    return partials if all(math.isfinite(p) for p in partials) else None


def quantiles(values: list[float]) -> dict:
    """mean, p10, median, p90 (numpy's linear interpolation) of finite values; None when empty."""
    if not values:
        return {"mean": None, "p10": None, "median": None, "p90": None, "n": 0}
    p10, med, p90 = np.percentile(np.asarray(values, dtype=float), [10, 50, 90])
    fin = lambda x: float(x) if math.isfinite(x) else None  # noqa: E731
    return {"mean": _mean(values), "p10": fin(p10), "median": fin(med), "p90": fin(p90), "n": len(values)}


def mask_zeroed(row: Mapping) -> bool:
    """Tokens were recorded but none carries loss: a filter zeroed the loss mask (Tunix's
    overlong_filter); the same rule as the rollout page's "trains on nothing"."""
    return row["n_tokens"] > 0 and row["n_trained_tokens"] == 0 and row["n_turns"] > 0


def _get(row, key: str):
    return row[key] if isinstance(row, Mapping) else getattr(row, key, None)


def own_no_gradient(row) -> str | None:
    """Why a rollout carries no gradient by itself, whatever its step and group (None when it
    may carry one): `trainer_filtered`, `error_dropped` (an errored rollout under the default
    errors-dropped policy), `mask_zeroed`. The first reasons of `no_gradient_reason`, which adds
    those that need the step (staleness) or the group (zero variance, one member). `row`: a
    mapping or an object with the summary's fields."""
    if _get(row, "trainer_filtered"):
        return "trainer_filtered"
    if _get(row, "ending") == "error":
        return "error_dropped"
    n_tokens, n_trained, n_turns = (_get(row, k) or 0 for k in ("n_tokens", "n_trained_tokens", "n_turns"))
    if n_tokens > 0 and n_trained == 0 and n_turns > 0:  # mask_zeroed's rule
        return "mask_zeroed"
    return None


def gradient_tokens(row) -> int:
    """The trained-token count a page shows, one definition for the rollouts list and the
    rollout page: the mask-1 tokens (`n_trained_tokens`), or 0 for a rollout that carries no
    gradient by itself (`own_no_gradient`: filtered by the trainer, errored, mask zeroed)."""
    return 0 if own_no_gradient(row) else int(_get(row, "n_trained_tokens") or 0)


def latest_attempts(rows: Iterable[Mapping]) -> list[Mapping]:
    latest: dict[str, Mapping] = {}
    for r in rows:
        cur = latest.get(r["rollout_id"])
        if cur is None or r["attempt"] > cur["attempt"]:
            latest[r["rollout_id"]] = r
    return list(latest.values())


def group_stats(rows: list[Mapping]) -> tuple[dict, dict[int, dict]]:
    """Per step: group counts, zero-variance shares and sign flips under both error policies,
    and per rollout pk its two advantages ({"errors_as_zero", "errors_dropped"}). A one-member
    group (`ingest.advantages.one_member_group`, as the group checks define it) is counted under
    `one_member`, never as zero-variance: it has no baseline at all (`split_group`)."""
    groups: dict[str, list[Mapping]] = defaultdict(list)
    for r in latest_attempts(rows):
        if r["group_id"] is not None:
            groups[r["group_id"]].append(r)
    out = {"groups": len(groups), "zero_variance": {"errors_as_zero": 0, "errors_dropped": 0},
           "one_member": 0, "sign_flip_groups": 0, "zero_variance_ids": [], "one_member_ids": []}
    adv_by_pk: dict[int, dict] = {}
    for gid in sorted(groups):
        members = groups[gid]
        res = group_advantages([Member(str(m["pk"]), m["reward"], m["ending"]) for m in members])
        if one_member_group(len(members)):
            out["one_member"] += 1
            out["one_member_ids"].append(gid)
        else:
            for policy in ("errors_as_zero", "errors_dropped"):
                p = res[policy]
                if p.n and p.std == 0:
                    out["zero_variance"][policy] += 1
            if res["errors_dropped"].n and res["errors_dropped"].std == 0:
                out["zero_variance_ids"].append(gid)
        flipped = False
        for m in members:
            a0 = res["errors_as_zero"].advantages[str(m["pk"])]
            a1 = res["errors_dropped"].advantages[str(m["pk"])]
            adv_by_pk[m["pk"]] = {"errors_as_zero": a0, "errors_dropped": a1}
            if a0 is not None and a1 is not None and a0 * a1 < 0:
                flipped = True
        out["sign_flip_groups"] += flipped
    out["zero_variance_ids"] = out["zero_variance_ids"][:50]
    return out, adv_by_pk


def no_gradient_reason(row: Mapping, *, zero_variance_groups: set[str], latest: bool,
                       max_staleness: int | None, one_member_groups: set[str] = frozenset()) -> str | None:
    """Why a rollout contributed nothing to the step's gradient (None when it did, as far as
    the trace shows). Superseded attempts are not listed: their retry replaced them."""
    if not latest:
        return None
    own = own_no_gradient(row)
    if own is not None:
        return own
    if max_staleness is not None and row["staleness"] is not None and row["staleness"] > max_staleness:
        return "too_stale"
    if row["group_id"] is not None and row["group_id"] in zero_variance_groups:
        return "zero_variance_group"
    if row["group_id"] is not None and row["group_id"] in one_member_groups:
        return "one_member_group"
    return None


def empty_checks() -> dict:
    """The checks part of a step's stats when nothing was found or skipped (see
    app/store/rollups.py `finding_counts` for what each part counts)."""
    return {"found": {}, "skipped": {}, "skip_reasons": {}, "group_skip_reasons": {}, "ran": {}}


def scored_with_errors(rows: list[Mapping]) -> list[float]:
    """The rewards under "errors scored 0": each errored rollout 0.0 (its stored reward ignored),
    every other rollout's recorded reward; nothing at all when no rollout of `rows` recorded a
    reward, so a scope without rewards has no mean (None, "no rewards recorded"), never 0.0."""
    if not any(r["reward"] is not None for r in rows):
        return []
    return [0.0 if r["ending"] == "error" else r["reward"] for r in rows
            if r["ending"] == "error" or r["reward"] is not None]


def compute_step(rows: list[Mapping], *, max_staleness: int | None = None,
                 checks: dict | None = None) -> tuple[dict, list[dict]]:
    """The step_rollup row (without run_id/step) and the task_rollup rows of one step's rollouts.

    Reward: errors scored 0 (their stored reward ignored) and errors dropped; missing or
    non-finite rewards excluded from both and counted in `excluded`. Scoring errors 0 needs
    rewards to compare with: where no rollout of the step (or of a task in it) recorded a reward,
    nothing is scored and both means are None, "no rewards recorded" (issue 19: an Inspect run
    without scores read mean reward 0.0, its one error scored 0; `scored_with_errors`). `checks`: the step's
    finding counts (app/store/rollups.py `check_counts`), kept as `stats["checks"]`. `stats` is
    plain Python (the store makes it storable: NUL and non-finite floats, app/store/prepare.py).
    """
    n = len(rows)
    endings = Counter(r["ending"] for r in rows)
    details: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        details[r["ending"]][r["ending_detail"] or ""] += 1
    with_err = scored_with_errors(rows)
    no_err = [r["reward"] for r in rows if r["ending"] != "error" and r["reward"] is not None]
    groups, adv = group_stats(rows)
    zv = set(groups.pop("zero_variance_ids"))
    one = set(groups.pop("one_member_ids"))
    latest_pks = {r["pk"] for r in latest_attempts(rows)}
    no_grad = Counter()
    for r in rows:
        reason = no_gradient_reason(r, zero_variance_groups=zv, latest=r["pk"] in latest_pks,
                                    max_staleness=max_staleness, one_member_groups=one)
        if reason:
            no_grad[reason] += 1
    advantages = {p: quantiles([a[p] for a in adv.values() if a[p] is not None])
                  for p in ("errors_as_zero", "errors_dropped")}
    for p in advantages:
        vals = [abs(a[p]) for a in adv.values() if a[p] is not None]
        advantages[p]["mean_abs"] = _mean(vals)
    mm_tokens = sum(r["mismatch_tokens"] for r in rows)
    mm_max = [r["mismatch_abs_max"] for r in rows if r["mismatch_abs_max"] is not None]
    stale = [r["staleness"] for r in rows if r["staleness"] is not None]
    model_lat = [r["model_latency"] for r in rows if r["model_latency"] is not None]
    tool_lat = [r["tool_latency"] for r in rows if r["tool_latency"] is not None]
    flags = Counter(k for r in rows for k in (r["flags"] or []))
    stats = {
        "endings": {e: endings.get(e, 0) for e in ENDINGS},
        "ending_details": {e: dict(c.most_common(20)) for e, c in sorted(details.items())},
        "reward": {"errors_as_zero": quantiles(with_err) | {"partials": exact_partials(with_err)},
                   "errors_dropped": quantiles(no_err) | {"partials": exact_partials(no_err)}},
        "lengths": {
            "response_tokens": quantiles([float(r["n_response_tokens"]) for r in rows]),
            "empty_responses": sum(1 for r in rows if r["n_response_tokens"] == 0),
            "turns": _mean([float(r["n_turns"]) for r in rows]),
            "tool_calls": _mean([float(r["n_tool_calls"]) for r in rows]),
            "tool_errors": sum(r["n_tool_errors"] for r in rows),
            "rollouts_with_tool_errors": sum(1 for r in rows if r["n_tool_errors"]),
            "model_latency": _mean(model_lat), "model_latency_timed": len(model_lat),
            "tool_latency": _mean(tool_lat), "tool_latency_timed": len(tool_lat),
            "mask_zeroed": sum(1 for r in rows if mask_zeroed(r)),
        },
        "groups": groups,
        "advantages": advantages,
        "findings": dict(sorted(flags.items())),
        "mismatch": {"tokens": mm_tokens,
                     "mean_abs": ((math.fsum(r["mismatch_abs_sum"] or 0.0 for r in rows) / mm_tokens)
                                  if mm_tokens else None),
                     "max_abs": max(mm_max) if mm_max else None,
                     "out_of_range": sum(r["mismatch_out_of_range"] for r in rows)},
        "staleness": {"histogram": {str(k): v for k, v in sorted(Counter(stale).items())},
                      "mean": _mean([float(s) for s in stale]), "max": max(stale) if stale else None,
                      "recorded": len(stale)},
        "no_gradient": {k: no_grad.get(k, 0) for k in NO_GRADIENT_REASONS},
        "agents": dict(sorted(Counter(r["agent"] or "" for r in rows).items())),
        "by_ending": by_ending(rows),
        "retries": sum(1 for r in rows if r["attempt"] > 0),
        # where the step's rollouts came from and when (the run page's metadata)
        "sources": dict(Counter(f"{r['source_format'] or '?'}:{r['source_file'] or '?'}" for r in rows)
                        .most_common(20)),
        "ingested": {"first": min(_iso(r["ingested_at"]) for r in rows) if rows else None,
                     "last": max(_iso(r["ingested_at"]) for r in rows) if rows else None},
        "checks": checks or empty_checks(),
    }
    step_row = {"rollouts": n, "mean_reward": _mean(with_err), "mean_reward_no_errors": _mean(no_err),
                "scored": len(with_err), "excluded": n - len(with_err), "stats": stats}
    by_task: dict[str, list[Mapping]] = defaultdict(list)
    for r in rows:
        if r["task_key"] is not None:
            by_task[r["task_key"]].append(r)
    task_rows = []
    for key in sorted(by_task):
        t = by_task[key]
        e = Counter(r["ending"] for r in t)
        t0 = scored_with_errors(t)
        t1 = [r["reward"] for r in t if r["ending"] != "error" and r["reward"] is not None]
        task_rows.append({
            "task_key": key, "rollouts": len(t), "mean_reward": _mean(t0), "mean_reward_no_errors": _mean(t1),
            "scored": len(t0), "scored_no_errors": len(t1), "errors": e.get("error", 0),
            "endings": {k: e[k] for k in ENDINGS if e.get(k)}, "by_ending": by_ending(t),
            "reward_sum_sq": power_sum(t0, 2), "reward_sum_cube": power_sum(t0, 3),
        })
    return step_row, task_rows


POWER_SUM_MAX = 1e290  # a database's float sum of a billion such step sums stays finite (1e299)


def power_sum(values: list[float], k: int) -> float | None:
    """Σ xᵏ of `values`, exactly rounded (fsum of the rounded powers), or None when there are no
    values or a power or the sum passes `POWER_SUM_MAX` (|x| past ~1e145 for squares, ~1e96 for
    cubes). A task's rollups keep Σx² and Σx³ of its rewards (errors scored 0) so that compare's
    paired section can read a task's spread and skew without reading its rewards
    (app/paired_stats.py `moments_interval`)."""
    if k not in (2, 3):
        raise ValueError(f"power_sum: k is 2 or 3, got {k}")
    if not values:
        return None
    powers = [x * x for x in values] if k == 2 else [x * x * x for x in values]  # inf past the floats, no error
    try:
        total = math.fsum(powers)
    except (OverflowError, ValueError):  # inf - inf, or an overflowing partial sum
        return None
    return total if math.isfinite(total) and abs(total) <= POWER_SUM_MAX else None


def by_ending(rows: list[Mapping]) -> dict:
    """Per ending of `rows`: rollouts per agent and per finding kind (flags), {ending: {"agents":
    {agent or "": n}, "findings": {kind: n}}}: the list's agent and finding facets under an ending
    or a task filter, from the rollups."""
    out: dict[str, dict] = {}
    for r in rows:
        d = out.setdefault(r["ending"], {"agents": Counter(), "findings": Counter()})
        d["agents"][r["agent"] or ""] += 1
        d["findings"].update(r["flags"] or [])
    return {e: {k: dict(sorted(c.items())) for k, c in out[e].items()} for e in sorted(out)}


def _iso(t) -> str:
    """UTC ISO-8601 of a stored timestamp (SQLite gives back naive datetimes in UTC)."""
    if t is None:
        return ""
    if isinstance(t, str):
        return t
    if t.tzinfo is None:
        return t.isoformat() + "+00:00"
    from datetime import UTC

    return t.astimezone(UTC).isoformat()
