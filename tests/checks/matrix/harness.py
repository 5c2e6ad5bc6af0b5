"""Write episodes in a format, read them back through the real pipeline, run the checks.

The path is the one every file takes into the dashboard: `detect` (the format is recognised, not
forced), `ingest.files.read_records` (the reader, then the ending normalised), then
`ingest.checks.run_rollout_checks` per rollout and `run_group_checks` per group, with the check
context of the episodes' tokenizer (the run's `--tokenizer`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ingest.checks import CheckContext, FindingData, Group, groups_from_rollouts, run_group_checks, run_rollout_checks
from ingest.errors import RecordError
from ingest.schema import Rollout
from tests.checks.matrix.episode import Episode
from tests.helpers import read_folder


@dataclass
class Outcome:
    """What the checks made of one written group: each episode's rollout and findings (rollout
    scope, then its group's), and the records the reader refused."""

    rollouts: dict[str, Rollout] = field(default_factory=dict)
    findings: dict[str, list[FindingData]] = field(default_factory=dict)
    skipped: dict[str, list[FindingData]] = field(default_factory=dict)
    errors: list[RecordError] = field(default_factory=list)
    formats: set[str] = field(default_factory=set)

    def of(self, ep: str, kind: str) -> list[FindingData]:
        return [f for f in self.findings.get(ep, []) if f.kind == kind]

    def skip_reason(self, ep: str, kind: str) -> str | None:
        return next((s.message for s in self.skipped.get(ep, []) if s.kind == kind), None)


def read_back(path: Path) -> tuple[list[Rollout], list[RecordError], set[str]]:
    """Every rollout under `path` (a file or a folder) as the dashboard would read it."""
    errors: list[RecordError] = []
    found = list(read_folder(path, errors))
    return [r for _, _, r in found], errors, {name for _, name, _ in found}


def _match(episodes: list[Episode], rollouts: list[Rollout]) -> dict[str, Rollout]:
    """Each episode's rollout: the one whose id is (or contains) the episode id, else by order."""
    out: dict[str, Rollout] = {}
    for k, ep in enumerate(episodes):
        r = next((r for r in rollouts if r.id == ep.id), None) or \
            next((r for r in rollouts if ep.id in r.id), None)
        if r is None and len(rollouts) == len(episodes):
            r = rollouts[k]
        if r is not None:
            out[ep.id] = r
    return out


def _groups(rollouts: dict[str, Rollout]) -> dict[str, Group]:
    """Episode id → its group, built as the store's group pass builds it (siblings included):
    `ingest.checks.groups_from_rollouts`."""
    groups = groups_from_rollouts(rollouts.values())
    return {ep: groups[(r.run.id, r.group.id)] for ep, r in rollouts.items() if r.group is not None}


def run(module, episodes: list[Episode], folder: Path, ctx: CheckContext) -> Outcome:
    """Write `episodes` with the format writer `module` into `folder`, read them back, check them."""
    folder.mkdir(parents=True, exist_ok=True)
    path = module.write(episodes, folder)
    rollouts, errors, formats = read_back(path)
    out = Outcome(_match(episodes, rollouts), errors=errors, formats=formats)
    groups = _groups(out.rollouts)
    group_results = {}
    for ep, r in out.rollouts.items():
        res = run_rollout_checks(r, ctx)
        g = groups.get(ep)
        if g is not None:
            key = id(g)
            if key not in group_results:
                group_results[key] = run_group_checks(g, ctx)
            gres = group_results[key]
            res.findings += gres.findings
            res.skipped += gres.skipped
        out.findings[ep] = res.findings
        out.skipped[ep] = res.skipped
    return out


def node_of(r: Rollout, ep: Episode, turn: int) -> int | None:
    """The node of `r` that holds the episode's message `turn`: the k-th node with the same role
    and text, where the message is the k-th of its role and text; else the k-th of its role."""
    want = ep.turns[turn].message
    role, text = want["role"], want.get("content") or ""
    same = [i for i, t in enumerate(ep.turns[:turn]) if t.role == role and (t.message.get("content") or "") == text]
    nodes = [i for i, n in enumerate(r.nodes) if n.message.role == role and n.message.text() == text]
    if len(nodes) > len(same):
        return nodes[len(same)]
    k = sum(1 for t in ep.turns[:turn] if t.role == role)
    by_role = [i for i, n in enumerate(r.nodes) if n.message.role == role and not n.extra.get("segment")]
    return by_role[k] if k < len(by_role) else None
