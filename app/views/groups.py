"""A group's page: siblings side by side with the advantage under both baseline policies
(ingest/advantages.py)."""
from __future__ import annotations

from collections import Counter

from sqlmodel import Session

from app import urls
from app.queries import groups as q_groups
from app.views.common import PageModel, RolloutSummary, summary_fields
from ingest import advantages


class ByPolicy(PageModel):
    """One value per baseline policy: errors scored 0, and errored rollouts dropped (default)."""

    errors_as_zero: float | None
    errors_dropped: float | None


class NoAdvantage(PageModel):
    """Why a member has no advantage under each policy: `error_dropped` (no gradient),
    `reward_excluded` (missing or non-finite reward), or None (it has one)."""

    errors_as_zero: str | None
    errors_dropped: str | None


class GroupMember(RolloutSummary):
    advantage: ByPolicy
    no_advantage: NoAdvantage
    excluded: bool


class Policy(PageModel):
    """A baseline: mean and (population) std of the rewards in it, and how many."""

    mean: float | None
    std: float | None
    n: int


class Policies(PageModel):
    errors_as_zero: Policy
    errors_dropped: Policy


class GroupRunLink(PageModel):
    id: str
    url: str


class GroupHeader(PageModel):
    id: str
    size: int
    declared_size: int | None
    steps: list[int]


class Excluded(PageModel):
    count: int
    of: int


class GroupPage(PageModel):
    run: GroupRunLink
    group: GroupHeader
    warnings: list[str]
    policies: Policies
    excluded: Excluded
    members: list[GroupMember]
    superseded: list[RolloutSummary]


def _no_advantage_reason(member: dict, advantage: float | None, *, drop_errors: bool) -> str | None:
    """Why a member has no advantage under a policy, as a code the page spells out (None when
    it has one): `error_dropped` (no gradient) or `reward_excluded` (missing or non-finite)."""
    if advantage is not None:
        return None
    if member["ending"] == "error":
        return "error_dropped" if drop_errors else None
    return "reward_excluded"


def _group_warnings(members: list[dict]) -> list[str]:
    """A group that holds more members than it declares, repeats an index (the same episodes
    ingested from several files) or has a member whose index is outside its declared size has a
    baseline over the wrong set: say so."""
    out = []
    declared = sorted({m["group_size"] for m in members if m.get("group_size") is not None})
    if len(declared) > 1:
        out.append("members declare different sizes: " + ", ".join(str(d) for d in declared))
    if declared and len(members) > declared[-1]:
        out.append(f"declared size {declared[-1]} but {len(members)} members")
    counts = Counter(m["group_index"] for m in members if m.get("group_index") is not None)
    dupes = sorted((i, n) for i, n in counts.items() if n > 1)
    if dupes:
        out.append("duplicate indices " + ", ".join(f"#{i} ×{n}" for i, n in dupes))
    outside: dict[int, set[int]] = {}  # declared size → indices at or beyond it
    for m in members:
        size, index = m.get("group_size"), m.get("group_index")
        if size is not None and index is not None and index >= size:
            outside.setdefault(size, set()).add(index)
    for size, idxs in sorted(outside.items()):
        out.append(f"{'index' if len(idxs) == 1 else 'indices'} " + ", ".join(f"#{i}" for i in sorted(idxs))
                   + f" outside declared size {size}")
    return out


def group_page(session: Session, run_id: str, group_id: str, *, json: bool = False) -> GroupPage | None:
    """Siblings of one group with reward, ending and advantage under both policies; None if the
    group has no rollout in the run.

    A rollout id retried (several attempts) counts once: only its latest attempt in the run is a
    member and enters the baselines and the warnings; earlier attempts of the group are listed
    in `superseded`, each with a link to its own attempt. Links go to the JSON twins when `json`."""
    rows = q_groups.group_members(session=session, run_id=run_id, group_id=group_id)
    if not rows:
        return None
    members, superseded = [], []
    for r in rows:
        (members if r.latest_attempt is None or r.attempt >= r.latest_attempt else superseded).append(summary_fields(r, json=json))
    keys = [f"{m['rollout_id']}#{m['attempt']}" for m in members]
    result = advantages.group_advantages([
        advantages.Member(k, m["reward"], m["ending"]) for k, m in zip(keys, members)])
    for k, m in zip(keys, members):
        m["advantage"] = {"errors_as_zero": result["errors_as_zero"].advantages[k],
                          "errors_dropped": result["errors_dropped"].advantages[k]}
        m["no_advantage"] = {
            "errors_as_zero": _no_advantage_reason(m, m["advantage"]["errors_as_zero"], drop_errors=False),
            "errors_dropped": _no_advantage_reason(m, m["advantage"]["errors_dropped"], drop_errors=True)}
        m["excluded"] = k in result["excluded"]

    def pol(p: advantages.PolicyResult) -> Policy:
        return Policy(mean=p.mean, std=p.std, n=p.n)

    declared = {m["group_size"] for m in members if m.get("group_size") is not None}
    return GroupPage(
        run=GroupRunLink(id=run_id, url=urls.run(run_id, json=json)),
        group=GroupHeader(id=group_id, size=len(members), declared_size=max(declared) if declared else None,
                          steps=sorted({m["step"] for m in members if m["step"] is not None})),
        warnings=_group_warnings(members),
        policies=Policies(errors_as_zero=pol(result["errors_as_zero"]), errors_dropped=pol(result["errors_dropped"])),
        excluded=Excluded(count=len(result["excluded"]), of=len(members)),
        members=[GroupMember.model_validate(m) for m in members],
        superseded=[RolloutSummary.model_validate(m) for m in superseded],
    )
