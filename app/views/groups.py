"""A group's page: siblings side by side with the advantage under both baseline policies
(ingest/advantages.py), the three estimators, recorded advantages and the members aligned on
their shared prefix (app/views/group_extras.py)."""
from __future__ import annotations

from typing import Any

from sqlmodel import Session

from app import urls
from app.queries import findings as q_findings
from app.queries import groups as q_groups
from app.views.common import PageModel, RolloutSummary, summary_fields
from app.views.rollout.findings import CheckSkipped, FindingView, finding_view
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
    # per policy: {dr_grpo, grpo, rloo} (None: not in that policy's baseline)
    estimators: dict[str, dict[str, float | None] | None]
    recorded_advantage: dict[str, Any] | None  # what the source recorded, with the estimators it matches
    aligned: dict[str, Any] | None = None  # its tokens around the first divergence from the shared prefix
    components: dict[str, float | None] = {}  # reward component name → score (None: not scored)


class Policy(PageModel):
    """A baseline: mean and (population) std of the rewards in it, and how many."""

    mean: float | None
    std: float | None
    n: int
    std_sample: float | None = None  # n − 1, what GRPO divides by
    no_signal: str | None = None  # all rewards equal, or one member left


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
    estimator_names: dict[str, str]
    signal_warnings: list[str]
    tasks: list[str]
    step_links: list[dict[str, Any]]
    alignment: dict[str, Any] | None
    diff_base: str
    sort: str | None
    has_recorded: bool
    components: list[dict[str, Any]] = []  # the members' reward components: [{name, weight}] (None: weights differ)
    # the errors-dropped baseline rests on fewer than half the members (errors and excluded
    # rewards left out): `n`, `members`, `note`; None otherwise (`thin_baseline`)
    thin_baseline: dict[str, Any] | None = None


def thin_baseline(n: int, members: int) -> dict[str, Any] | None:
    """A note when the errors-dropped baseline rests on fewer than half of the group's `members`
    (`n` rewards entered it): its mean, and so every advantage under it, stands on few rollouts."""
    if members == 0 or 2 * n >= members:
        return None
    return {"n": n, "members": members,
            "note": f"the errors-dropped baseline rests on {n} of {members} members (fewer than half): "
                    "errored and unscored rollouts are left out, so these advantages stand on few rewards"}


def _no_advantage_reason(member: dict, advantage: float | None, *, drop_errors: bool) -> str | None:
    """Why a member has no advantage under a policy, as a code the page spells out (None when
    it has one): `error_dropped` (no gradient) or `reward_excluded` (missing or non-finite)."""
    if advantage is not None:
        return None
    if member["ending"] == "error":
        return "error_dropped" if drop_errors else None
    return "reward_excluded"


MEMBERSHIP_KINDS = ("group_size_mismatch", "duplicate_group_index", "group_index_out_of_range")


def group_page(session: Session, run_id: str, group_id: str, *, sort: str | None = None,
               json: bool = False) -> GroupPage | None:
    """Siblings of one group with reward, ending and advantage under both policies; None if the
    group has no rollout in the run.

    A rollout id retried (several attempts) counts once: only its latest attempt in the run is a
    member and enters the baselines and the warnings; earlier attempts of the group are listed
    in `superseded`, each with a link to its own attempt. Each member also carries the three
    estimators, the advantage its source recorded, and its tokens aligned on the group's shared
    prefix (group_extras.enrich); `sort` is `reward`, `advantage` or None (group index). Links go to
    the JSON twins when `json`."""
    from app.views import group_extras

    rows = q_groups.group_members(session=session, run_id=run_id, group_id=group_id)
    if not rows:
        return None
    members, superseded = [], []
    for r in rows:
        (members if r.latest_attempt is None or r.attempt >= r.latest_attempt else superseded).append(
            summary_fields(r, json=json))
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

    def pol(p: advantages.PolicyResult) -> dict:
        return {"mean": p.mean, "std": p.std, "n": p.n}

    declared = {m["group_size"] for m in members if m.get("group_size") is not None}
    stored = q_findings.group_findings(session=session, run_id=run_id, group_id=group_id)
    group_findings = [finding_view(f) for f in stored if f.severity != checks.SKIPPED]
    data = {
        "run": {"id": run_id, "url": urls.run(run_id, json=json)},
        "group": {"id": group_id, "size": len(members), "declared_size": max(declared) if declared else None,
                  "steps": sorted({m["step"] for m in members if m["step"] is not None})},
        # Group-scope findings, stored at ingest (ingest/checks/groups.py). `warnings` keeps the
        # membership ones (size, indices) as messages: the shape this twin had before the registry.
        "findings": group_findings,
        "warnings": [f["message"] for f in group_findings if f["kind"] in MEMBERSHIP_KINDS],
        "checks_skipped": [{"kind": f.kind, "label": checks.label(f.kind), "reason": f.message}
                           for f in stored if f.severity == checks.SKIPPED],
        "policies": {"errors_as_zero": pol(result["errors_as_zero"]), "errors_dropped": pol(result["errors_dropped"])},
        "excluded": {"count": len(result["excluded"]), "of": len(members)},
        "members": members,
        "superseded": superseded,
        "thin_baseline": thin_baseline(result["errors_dropped"].n, len(members)),
    }
    group_extras.enrich(session, data, sort=sort)
    return GroupPage.model_validate(data)
