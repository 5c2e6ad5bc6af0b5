"""What the read modules share: table handles, the int32 bounds of query values, the ending list,
the summary columns of a rollout row, and exact reward sums."""
from __future__ import annotations

import math

import sqlalchemy as sa
from sqlmodel import Session

from app.db.models import Node, Rollout
from ingest.schema import Ending

# The endings in their display order, from the native schema (ingest/schema.py `Ending`).
ENDINGS: list[str] = [e.value for e in Ending]
# INTEGER columns are int32 on Postgres: a query value outside this range is refused (422), not sent.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
R = Rollout.__table__
N = Node.__table__

# Columns a list row needs: nothing that grows with the trace.
SUMMARY_COLUMNS = [c for c in R.c if c.name not in ("content_hash",)]


def attempt_columns() -> list:
    """Per row: how many attempts its rollout id has in its run, and the latest attempt number
    (correlated lookups on the (run_id, rollout_id, attempt) unique index)."""
    A = R.alias("other_attempt")
    same = (A.c.run_id == R.c.run_id, A.c.rollout_id == R.c.rollout_id)
    return [sa.select(sa.func.count()).select_from(A).where(*same).scalar_subquery().label("n_attempts"),
            sa.select(sa.func.max(A.c.attempt)).where(*same).scalar_subquery().label("latest_attempt")]


def exact_mean(values: list[float]) -> float | None:
    """The mean of finite floats, exactly rounded (`math.fsum`): 0.560625, not the
    0.5606250000000066 of a running sum. A sum beyond the float range is taken scaled by 2**-64
    (exact for normal floats); a mean beyond it is ±inf (null in JSON). None when empty."""
    if not values:
        return None
    try:
        return math.fsum(values) / len(values)
    except OverflowError:
        scale = 2.0 ** -64
        return math.fsum(v * scale for v in values) / len(values) / scale


def _decimal_mean(total, count: int) -> float | None:
    if not count:
        return None
    try:
        return float(total / count)
    except OverflowError:
        return math.copysign(math.inf, total)


def _empty_slot() -> dict:
    return {"n": 0, "endings": {e: 0 for e in ENDINGS}, "s0": [], "c0": 0, "s1": [], "c1": 0}


def reward_rollups(session: Session, keys: list, *where, total: bool = False) -> dict[tuple, dict]:
    """Per value of `keys` (columns of `rollout`), over the rows matching `where`: `n` rollouts,
    `endings` (count per ending), `mean_reward` (errored rollouts scored 0, their stored reward
    ignored), `mean_reward_no_errors` (errored rollouts dropped), `scored` (rollouts in the first
    mean) and `excluded` (missing or non-finite reward, in neither mean). With `total`, the same
    over all those rows under the key `()`, from the same single pass over the rows.

    Means are exact: Postgres sums in NUMERIC; on SQLite, whose SUM is a running float sum, the
    rewards are summed here with `math.fsum`. The total sums the same terms (exact Decimal
    partial sums; every reward for fsum), so it equals a separate query's answer."""
    out: dict[tuple, dict] = {}

    def slot(key: tuple) -> dict:
        d = out.get(key)
        if d is None:
            d = out[key] = _empty_slot()
        return d

    def add_total() -> None:
        if not total:
            return
        t = _empty_slot()
        for d in list(out.values()):
            t["n"] += d["n"]
            for e, n in d["endings"].items():
                t["endings"][e] = t["endings"].get(e, 0) + n
            t["s0"] += d["s0"]
            t["s1"] += d["s1"]
            t["c0"] += d["c0"]
            t["c1"] += d["c1"]
        out[()] = t

    is_err = R.c.ending == "error"
    if session.get_bind().dialect.name == "postgresql":
        reward = sa.cast(R.c.reward, sa.Numeric)
        q = sa.select(*keys, R.c.ending, sa.func.count(),
                      sa.func.sum(sa.case((is_err, 0), else_=reward)),
                      sa.func.count(sa.case((is_err, 0.0), else_=R.c.reward)),
                      sa.func.sum(sa.case((is_err, None), else_=reward)),
                      sa.func.count(sa.case((is_err, None), else_=R.c.reward))).where(*where).group_by(*keys, R.c.ending)
        for row in session.execute(q):
            *key, ending, n, s0, c0, s1, c1 = row
            d = slot(tuple(key))
            d["n"] += n
            d["endings"][ending] = d["endings"].get(ending, 0) + n
            d["s0"].append(s0 or 0)
            d["c0"] += c0
            d["s1"].append(s1 or 0)
            d["c1"] += c1
        add_total()
        for d in out.values():
            s0, s1 = sum(d.pop("s0")), sum(d.pop("s1"))  # Decimal: exact
            d["mean_reward"], d["mean_reward_no_errors"] = _decimal_mean(s0, d["c0"]), _decimal_mean(s1, d["c1"])
    else:
        # count per (key, ending) and collect the rewards
        k = len(keys)
        for row in session.execute(sa.select(*keys, R.c.ending, R.c.reward).where(*where)):
            d = slot(row[:k])
            ending, reward = row[k], row[k + 1]
            d["n"] += 1
            endings = d["endings"]
            endings[ending] = endings.get(ending, 0) + 1
            if ending == "error":
                d["s0"].append(0.0)
            elif reward is not None:
                d["s0"].append(reward)
                d["s1"].append(reward)
        add_total()
        for d in out.values():
            s0, s1 = d.pop("s0"), d.pop("s1")
            d["c0"], d["c1"] = len(s0), len(s1)
            d["mean_reward"], d["mean_reward_no_errors"] = exact_mean(s0), exact_mean(s1)
    for d in out.values():
        d["scored"] = d.pop("c0")
        d.pop("c1")
        d["excluded"] = d["n"] - d["scored"]
    return out
