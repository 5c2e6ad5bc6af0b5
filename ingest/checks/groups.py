"""Group-scope checks: faults visible only across the rollouts of one group, whose baseline
depends on exactly which rollouts are in it.

A group's members are the latest attempt of each rollout id in it (what the trainer used); a
retried rollout counts once. The store recomputes a group's findings whenever a member is
inserted or replaced.
"""
from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ingest import advantages
from ingest.advantages import one_member_group
from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, Skip, check


@dataclass
class GroupMember:
    """What group checks read of one member. `advantage`: the advantage the source recorded for
    the rollout (None when it recorded none)."""

    rollout_id: str
    attempt: int = 0
    index: int | None = None
    size: int | None = None
    reward: float | None = None
    reward_status: str = "ok"
    ending: str = "unknown"
    step: int | None = None
    advantage: float | None = None


@dataclass(frozen=True)
class Sibling:
    """Another one-member group (`ingest.advantages.one_member_group`) of the same run and step, as
    `split_group` reads it: its id, its prompt key (`prompt_key`) and its size (members, latest
    attempts: 1)."""

    group_id: str
    prompt_key: str | None
    size: int


@dataclass
class Group:
    """One group of one run: its members (latest attempts only), in index then ingest order.

    `step`, `prompt_key`: the step and prompt key (`prompt_key`) of its first member. `siblings`:
    the other one-member groups of the run at that step with the same prompt key, filled by whoever
    runs the group pass (the store's `app/store/groups.py`, `groups_from_rollouts`) with
    `link_siblings`; None when not loaded (then `split_group` cannot decide)."""

    run_id: str
    group_id: str
    members: list[GroupMember] = field(default_factory=list)
    estimator: str | None = None  # the advantage estimator the run declares, if any
    step: int | None = None
    prompt_key: str | None = None
    siblings: list[Sibling] | None = None
    task_key: str | None = None  # the first member's task key, as the source names it


def prompt_text(messages: Iterable[tuple[str, str]]) -> str | None:
    """The prompt of a rollout from its messages in node order, (role, text) each: every message
    before the first assistant turn (system, user, tool...), role and text, joined; None when the
    first message is the assistant's. The whole prompt, not the first user message: Sokoban's
    instructions are the same in every task, the board that follows is not."""
    parts = []
    for role, text in messages:
        if role == "assistant":
            break
        parts.append(f"{role}\x1e{text}")
    return "\x1f".join(parts) or None


def prompt_key(task_key: str | None, prompt: str | None) -> str | None:
    """What says two rollouts answer the same prompt: the hash of its prompt (`prompt_text`;
    `prompt:<sha256, 16 hex>`), else the task key the source names (`task:<key>`); None with
    neither. The prompt wins: NeMo Gym numbers each environment's tasks from 0 (one task key,
    several prompts), and a format whose group is its task (NeMo Gym, Inspect, tau-bench) gives a
    split prompt a new task key with each group."""
    if prompt:
        return "prompt:" + hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    if task_key:
        return f"task:{task_key}"
    return None


def link_siblings(groups: Iterable[Group], step_groups: dict[tuple[str, int | None], list[Sibling]]) -> None:
    """Fill each group's `siblings` from `step_groups` ((run id, step) → the groups of that step,
    this one included): the other one-member groups with the same prompt key (none when it has no
    key)."""
    for g in groups:
        peers = step_groups.get((g.run_id, g.step), [])
        g.siblings = [s for s in peers if s.group_id != g.group_id and g.prompt_key is not None
                      and s.prompt_key == g.prompt_key and one_member_group(s.size)]


def groups_from_rollouts(rollouts: Iterable) -> dict[tuple[str, str], Group]:
    """The groups of native rollouts (`ingest.schema.Rollout`, e.g. a notebook's reads) as the
    store's group pass builds them: each rollout given is a member (pass the latest attempt of
    each rollout id, as the store keeps), in group index then input order; the estimator of the
    first member declaring one; the step, task key and prompt key of the first member; and
    `siblings` linked over the groups given (their steps).
    Returns (run id, group id) → Group."""
    members: dict[tuple[str, str], list] = {}
    for r in rollouts:
        if r.group is not None:
            members.setdefault((r.run.id, r.group.id), []).append(r)
    groups: dict[tuple[str, str], Group] = {}
    step_groups: dict[tuple[str, int | None], list[Sibling]] = {}
    for (run, gid), rs in members.items():
        rs.sort(key=lambda r: r.group.index if r.group.index is not None else 1 << 30)
        first = rs[0]
        g = Group(run, gid, [GroupMember(r.id, r.attempt, r.group.index, r.group.size, r.total_reward(),
                                         r.reward_status(), r.ending.type.value, r.step,
                                         advantages.recorded_advantage(r)) for r in rs],
                  next((advantages.estimator_name(r.extra.get("advantage_estimator")) for r in rs
                        if advantages.estimator_name(r.extra.get("advantage_estimator"))), None),
                  first.step, prompt_key(first.task.key if first.task else None,
                                         prompt_text((n.message.role, n.message.text()) for n in first.nodes)))
        g.task_key = first.task.key if first.task else None
        groups[(run, gid)] = g
        step_groups.setdefault((run, g.step), []).append(Sibling(gid, g.prompt_key, len(g.members)))
    link_siblings(groups.values(), step_groups)
    return groups


@check("group_size_mismatch", "warning", scope="group", label="group size mismatch")
def group_size_mismatch(g: Group, ctx: CheckContext) -> Iterator[Hit]:
    """The group has more or fewer members than its declared size, or its members declare
    different sizes (retries counted twice, the same episodes ingested from several files, a
    member lost): the baseline is over another set than the trainer's."""
    declared = sorted({m.size for m in g.members if m.size is not None})
    if len(declared) > 1:
        yield Hit("members declare different sizes: " + ", ".join(str(d) for d in declared), None, None,
                  {"declared": declared, "members": len(g.members)})
    if declared and len(g.members) != declared[-1]:
        yield Hit(f"declared size {declared[-1]} but {len(g.members)} members", None, None,
                  {"declared": declared[-1], "members": len(g.members)})


@check("duplicate_group_index", "warning", scope="group", label="duplicate group index")
def duplicate_group_index(g: Group, ctx: CheckContext) -> Iterator[Hit]:
    """Several members (distinct rollout ids) claim the same index in the group: usually the
    same episodes ingested twice under other ids."""
    counts = Counter(m.index for m in g.members if m.index is not None)
    dupes = sorted((i, n) for i, n in counts.items() if n > 1)
    if dupes:
        yield Hit("duplicate indices " + ", ".join(f"#{i} ×{n}" for i, n in dupes), None, None,
                  {"indices": {str(i): [m.rollout_id for m in g.members if m.index == i] for i, _ in dupes}})


@check("group_index_out_of_range", "warning", scope="group", label="group index out of range")
def group_index_out_of_range(g: Group, ctx: CheckContext) -> Iterator[Hit]:
    """A member's index is at or beyond the group size it declares."""
    outside: dict[int, set[int]] = {}
    for m in g.members:
        if m.size is not None and m.index is not None and m.index >= m.size:
            outside.setdefault(m.size, set()).add(m.index)
    for size, idxs in sorted(outside.items()):
        yield Hit(f"{'index' if len(idxs) == 1 else 'indices'} " + ", ".join(f"#{i}" for i in sorted(idxs))
                  + f" outside declared size {size}", None, None, {"size": size, "indices": sorted(idxs)})


# --- rewards and advantages -------------------------------------------------------------------

def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


POLICIES = ("errors_dropped", "errors_as_zero", "errors_with_reward")


def _baseline(g: Group, policy: str) -> dict[str, float]:
    """rollout id → reward, for the members in the baseline under `policy`: errored rollouts
    dropped, scored 0, or entered with the reward they carry; missing rewards never enter."""
    out = {}
    for m in g.members:
        if m.ending == "error":
            if policy == "errors_as_zero":
                out[m.rollout_id] = 0.0
            elif policy == "errors_with_reward" and _finite(m.reward):
                out[m.rollout_id] = m.reward
        elif _finite(m.reward):
            out[m.rollout_id] = m.reward
    return out


def _candidates(g: Group, estimators: tuple[str, ...], policies: tuple[str, ...]):
    """(estimator, variant, policy, expected advantages by rollout id) for each combination."""
    for policy in policies:
        base = _baseline(g, policy)
        ids, rewards = list(base), list(base.values())
        for est in estimators:
            for ddof in ((0, 1) if est == "std_normalised" else (0,)):
                values = advantages.estimate(rewards, est, ddof=ddof) if rewards else []
                yield est, ("unbiased std" if ddof else None), policy, dict(zip(ids, values))


def _matches(g: Group, expected: dict[str, float]) -> bool:
    """Every member with a recorded advantage agrees with `expected`; a member outside the
    baseline must record 0 (no gradient) to agree."""
    for m in g.members:
        if m.advantage is None:
            continue
        if not advantages.close(m.advantage, expected.get(m.rollout_id, 0.0)):
            return False
    return True


def _recorded(g: Group) -> list[GroupMember]:
    rec = [m for m in g.members if m.advantage is not None]
    if not rec:
        raise Skip("no advantages recorded for this group's rollouts")
    return rec


@check("zero_variance_group", "warning", scope="group", label="zero-variance group")
def zero_variance_group(g: Group, ctx: CheckContext) -> Iterator[Hit]:
    """Every member that enters the baseline (errored rollouts dropped) has the same reward, so
    the group has no learning signal under group-relative advantages; also when only one member
    is left after errored rollouts are dropped. The group's std is shown as exactly 0."""
    base = _baseline(g, "errors_dropped")
    if not base:
        raise Skip("no member has a finite reward once errored rollouts are dropped")
    errored = sum(1 for m in g.members if m.ending == "error")
    values = list(base.values())
    if len(values) == 1 and not one_member_group(len(g.members)):
        yield Hit(f"only one member is left after {errored} errored rollout{'s' if errored != 1 else ''} "
                  f"and {len(g.members) - 1 - errored} unscored are dropped: no learning signal", None, None,
                  {"members": len(g.members), "in_baseline": 1, "errored": errored, "std": 0.0})
    elif len(values) > 1 and min(values) == max(values):
        yield Hit(f"all {len(values)} members in the baseline have reward {values[0]:g}: std 0, no learning signal",
                  None, None, {"members": len(g.members), "in_baseline": len(values), "reward": values[0], "std": 0.0})


@check("errored_reward_in_baseline", "error", scope="group", label="errored reward in baseline")
def errored_reward_in_baseline(g: Group, ctx: CheckContext) -> Iterator[Hit]:
    """An errored rollout carries a numeric reward, and the group's recorded advantages show
    that it entered the baseline: they match a baseline with the errored rollouts in it and
    none without them. An aborted generation was scored as if the policy had answered
    (rllm-org/rllm#542, case 32)."""
    errored = [m for m in g.members if m.ending == "error" and _finite(m.reward)]
    if not errored:
        return
    _recorded(g)
    ests = (g.estimator,) if g.estimator else advantages.ESTIMATORS
    without = any(_matches(g, exp) for *_, exp in _candidates(g, ests, ("errors_dropped",)))
    if without:
        return
    for est, variant, policy, exp in _candidates(g, ests, ("errors_with_reward", "errors_as_zero")):
        if _matches(g, exp):
            ids = [m.rollout_id for m in errored]
            yield Hit(f"{len(ids)} errored rollout{'s' if len(ids) != 1 else ''} ({', '.join(ids[:5])}) entered the "
                      f"baseline: recorded advantages match {est.replace('_', '-')} with errors "
                      f"{'at their reward' if policy == 'errors_with_reward' else 'scored 0'}", None, None,
                      {"rollouts": ids, "rewards": [m.reward for m in errored], "estimator": est, "variant": variant,
                       "policy": policy})
            return


@check("advantage_mismatch", "error", scope="group", label="advantage mismatch")
def advantage_mismatch(g: Group, ctx: CheckContext) -> Iterator[Hit]:
    """The advantages the source recorded differ from the ones recomputed from the group's
    rewards under the estimator the run declares (mean-centred, std-normalised, leave-one-out;
    ingest/advantages.py), or under every one of them when none is declared, with errored
    rollouts dropped, scored 0 or at their reward. Either the group is not what the trainer
    saw, or the rewards changed after the fact."""
    rec = _recorded(g)
    ests = (g.estimator,) if g.estimator else advantages.ESTIMATORS
    for *_, exp in _candidates(g, ests, POLICIES):
        if _matches(g, exp):
            return
    est = g.estimator or "mean_centred"
    exp = next(e for es, v, p, e in _candidates(g, (est,), ("errors_dropped",)))
    diffs = sorted(rec, key=lambda m: -abs(m.advantage - exp.get(m.rollout_id, 0.0)))
    worst = diffs[0]
    yield Hit(f"recorded advantages do not match the group's rewards under "
              f"{'the declared ' + est if g.estimator else 'any estimator'}: {worst.rollout_id} recorded "
              f"{worst.advantage:+.4g}, recomputed {exp.get(worst.rollout_id, 0.0):+.4g} ({est}, errors dropped)",
              None, None,
              {"estimator": g.estimator, "declared": bool(g.estimator),
               "members": [{"rollout_id": m.rollout_id, "reward": m.reward, "ending": m.ending,
                            "recorded": m.advantage, "recomputed": exp.get(m.rollout_id)} for m in g.members][:64]})


SIBLINGS_SHOWN = 20  # sibling group ids kept in a split_group finding's detail


@check("split_group", "warning", scope="group", label="split group")
def split_group(g: Group, ctx: CheckContext) -> Iterator[Hit]:
    """A one-member group (`ingest.advantages.one_member_group`) whose prompt (`prompt_key`: the
    hash of the messages before its first assistant turn, else the task key) is shared at its step by another one-member
    group: the samples of one prompt were split into groups of one under different group ids
    (rllm-org/rllm#776), so none of them has a baseline and all get advantage 0. `detail`:
    `step`, `prompt_key`, `task_key` (the group's own, None when not recorded), `siblings` (the other one-member
    groups' ids, at most SIBLINGS_SHOWN), `count` (one-member groups of that prompt at the step,
    this one included). Skipped when the siblings were not loaded or the group has no prompt key."""
    if not one_member_group(len(g.members)):
        return
    if g.siblings is None:
        raise Skip("the step's other groups were not loaded with this group")
    if g.prompt_key is None:
        raise Skip("no task key or prompt text to tell which prompt the group answers")
    split = sorted(s.group_id for s in g.siblings if s.prompt_key == g.prompt_key and one_member_group(s.size))
    if not split:
        return
    task = g.task_key
    at = f"at step {g.step}" if g.step is not None else "with no step recorded"
    yield Hit(f"one of {len(split) + 1} one-member groups with the same prompt {at}"
              + (f" (this one: task {task!r})" if task else "")
              + ": the prompt's samples were split into groups of one, no baseline", None, None,
              {"step": g.step, "prompt_key": g.prompt_key, "task_key": task, "siblings": split[:SIBLINGS_SHOWN],
               "count": len(split) + 1})
