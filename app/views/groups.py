"""A group's page: siblings side by side with the advantage under both baseline policies
(ingest/advantages.py)."""
from __future__ import annotations


from sqlmodel import Session

from app import urls
from app.queries import findings as q_findings
from app.queries import groups as q_groups
from app.views.common import PageModel, RolloutSummary, summary_fields
from app.views.rollout import CheckSkipped, FindingView, finding_view
from ingest import advantages, checks


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
    findings: list[FindingView]
    warnings: list[str]
    checks_skipped: list[CheckSkipped]
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


MEMBERSHIP_KINDS = ("group_size_mismatch", "duplicate_group_index", "group_index_out_of_range")


def group_page(session: Session, run_id: str, group_id: str) -> GroupPage | None:
    """Siblings of one group with reward, ending and advantage under both policies; None if the
    group has no rollout in the run.

    A rollout id retried (several attempts) counts once: only its latest attempt in the run is a
    member and enters the baselines and the warnings; earlier attempts of the group are listed
    in `superseded`, each with a link to its own attempt."""
    rows = q_groups.group_members(session=session, run_id=run_id, group_id=group_id)
    if not rows:
        return None
    members, superseded = [], []
    for r in rows:
        (members if r.latest_attempt is None or r.attempt >= r.latest_attempt else superseded).append(summary_fields(r))
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
    stored = q_findings.group_findings(session=session, run_id=run_id, group_id=group_id)
    group_findings = [finding_view(f) for f in stored if f.severity != checks.SKIPPED]
    return GroupPage(
        run=GroupRunLink(id=run_id, url=urls.run(run_id)),
        group=GroupHeader(id=group_id, size=len(members), declared_size=max(declared) if declared else None,
                          steps=sorted({m["step"] for m in members if m["step"] is not None})),
        # Group-scope findings, stored at ingest (ingest/checks/groups.py). `warnings` keeps the
        # membership ones (size, indices) as messages: the shape this twin had before the registry.
        findings=group_findings,
        warnings=[f["message"] for f in group_findings if f["kind"] in MEMBERSHIP_KINDS],
        checks_skipped=[{"kind": f.kind, "label": checks.label(f.kind), "reason": f.message}
                        for f in stored if f.severity == checks.SKIPPED],
        policies=Policies(errors_as_zero=pol(result["errors_as_zero"]), errors_dropped=pol(result["errors_dropped"])),
        excluded=Excluded(count=len(result["excluded"]), of=len(members)),
        members=[GroupMember.model_validate(m) for m in members],
        superseded=[RolloutSummary.model_validate(m) for m in superseded],
    )
