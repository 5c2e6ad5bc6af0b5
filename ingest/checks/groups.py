"""Group-scope checks: faults visible only across the rollouts of one group, whose baseline
depends on exactly which rollouts are in it.

A group's members are the latest attempt of each rollout id in it (what the trainer used); a
retried rollout counts once. The store recomputes a group's findings whenever a member is
inserted or replaced.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, check


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


@dataclass
class Group:
    """One group of one run: its members (latest attempts only), in index then ingest order."""

    run_id: str
    group_id: str
    members: list[GroupMember] = field(default_factory=list)
    estimator: str | None = None  # the advantage estimator the run declares, if any


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
