"""The findings of one rollout as page data: stored findings with links to the node, token or call
they point at, the checks that could not decide, and which tokens of a message a finding flags
(drawn on its chips)."""
from __future__ import annotations

from typing import Any

from app.views.common import PageModel
from ingest import checks


class CallRef(PageModel):
    node: Any
    position: Any
    url: str | None


class FindingView(PageModel):
    """A stored finding of the trace checks, with a link to its node (and, for
    `duplicate_tool_call_id`, to every call sharing the id)."""

    kind: str
    label: str
    severity: str
    node: int | None
    position: int | None
    message: str
    detail: dict[str, Any] | None
    url: str | None = None
    anchor: str | None = None  # the token (`t-T`, its branch offset) or call (`node-N-call-P`) it points at
    calls: list[CallRef] | None = None


class CheckSkipped(PageModel):
    """A check that could not decide on this rollout or group, and why (it never passes silently)."""

    kind: str
    label: str
    reason: str


def finding_view(f) -> dict:
    """A stored finding as page data; old stored kinds are read under their registered kind."""
    kind = checks.legacy_kind(f.kind)
    return {"kind": kind, "label": checks.label(kind), "severity": f.severity,
            "node": f.node_idx, "position": f.position, "message": f.message, "detail": f.detail}



def page_findings(stored) -> tuple[list[dict], list[dict], dict[int, list[dict]]]:
    """Stored findings → (findings, checks skipped, node index → that node's findings)."""
    findings = [finding_view(f) for f in stored if f.severity != checks.SKIPPED]
    skipped = [{"kind": f.kind, "label": checks.label(f.kind), "reason": f.message}
               for f in stored if f.severity == checks.SKIPPED]
    by_node: dict[int, list] = {}
    for f in findings:
        if f["node"] is not None:
            by_node.setdefault(f["node"], []).append(f)
    return findings, skipped, by_node


def link_findings(findings: list[dict], link, token_offset) -> None:
    """Give each finding (in place) its `anchor` and `url` (`link`: a NodeLinks), and to a
    `duplicate_tool_call_id` the links of every call sharing the id (`calls`)."""
    for f in findings:
        f["anchor"] = _anchor(f, token_offset)
        f["url"] = link(f["node"])
        if f["url"] and f["anchor"]:  # to the token or call itself, not only its message
            f["url"] = f["url"].rsplit("#", 1)[0] + "#" + f["anchor"]
        calls = (f["detail"] or {}).get("calls") if f["kind"] == "duplicate_tool_call_id" else None
        if isinstance(calls, list):  # every call that shares the id, not only the first
            f["calls"] = [{"node": c[0], "position": c[1], "url": link(c[0])} for c in calls
                          if isinstance(c, list | tuple) and len(c) == 2]


def flagged_tokens(node_findings: list[dict], n: int) -> dict[int, list[str]]:
    """Token index → labels of the findings on a node that point at it (`detail.positions`, else
    `position`), for checks whose position is a token."""
    out: dict[int, list[str]] = {}
    for f in node_findings:
        c = checks.REGISTRY.get(f["kind"])
        if c is None or c.at != "token":
            continue
        positions = (f.get("detail") or {}).get("positions")
        if not isinstance(positions, list):
            positions = [f["position"]] if isinstance(f["position"], int) else []
        for p in positions:
            if isinstance(p, int) and 0 <= p < n:
                out.setdefault(p, []).append(f["label"])
    return out


def _anchor(f: dict, token_offset) -> str | None:
    """The id of the element a finding points at: a token (`t-T`, T its offset in the branch
    shown by the link) or a tool call (`node-N-call-P`); None when it concerns the whole message
    or rollout. `token_offset(node)` is the branch offset of the node's first token (None when
    the node is on no branch)."""
    c = checks.REGISTRY.get(f["kind"])
    if f["node"] is None or not isinstance(f["position"], int) or c is None:
        return None
    if c.at == "call":
        return f"node-{f['node']}-call-{f['position']}"
    t0 = token_offset(f["node"])
    return f"t-{t0 + f['position']}" if t0 is not None and f["position"] >= 0 else None


def suspected_padding(node_findings: list[dict]) -> set[int]:
    """Token indices of a node flagged by `suspected_logprob_padding`: `position` is where the
    trailing run of 0.0 logprobs starts, `detail.run` its length."""
    out: set[int] = set()
    for f in node_findings:
        run = (f.get("detail") or {}).get("run")
        if f["kind"] == "suspected_logprob_padding" and isinstance(f["position"], int) and isinstance(run, int):
            out.update(range(f["position"], f["position"] + run))
    return out



def not_generated(node_findings: list[dict]) -> set[int]:
    """Token indices of a sampled node that `mask_on_padding` names (`detail.positions`): pads
    and tokens after the EOS the policy never generated, so never called "sampled"."""
    out: set[int] = set()
    for f in node_findings:
        positions = (f.get("detail") or {}).get("positions")
        if f["kind"] == "mask_on_padding" and isinstance(positions, list):
            out.update(p for p in positions if isinstance(p, int))
    return out
