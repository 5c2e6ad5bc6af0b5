"""Trace checks run at ingest. Each check reads one native rollout and returns findings; a
finding never changes the data (nothing is "repaired"). Registry at the bottom: one function and
one line per check.

Kinds (docs/checks.md):
- `logprob_len_mismatch` (error): a per-token array did not have one entry per token in the
  source; it was padded with missing values (a short logprob array shifts every later position).
- `suspected_logprob_padding` (warning): a trailing run of >= 2 exact 0.0 logprobs on sampled
  tokens (0.0 = probability 1; writers pad with it).
- `token_drift` (warning): the next request's prompt is not the previous prompt plus what was
  sampled; the reader kept both sequences as branches.
- `duplicate_tool_call_id` (warning), `unanswered_tool_call` (warning), `ambiguous_tool_result`
  (warning), `unpaired_tool_result` (warning): see ingest/graph.py.
- `empty_response` (warning): an assistant message with no text, no reasoning, no tool call.
- `invalid_logprob` (error): a logprob above 0 or not finite (or beyond float32).
- `non_finite_reward` (error): reward is NaN or infinite; stored as NULL with reward_status.
- `bytes_lost_upstream` (warning): source token bytes are U+FFFD replacement bytes.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ingest.graph import branches, pair
from ingest.schema import Rollout

REPLACEMENT_HEX = "efbfbd"
FLOAT32_MAX = 3.4028234663852886e38  # logprobs are stored as float32
LOGPROB_EPS = 1e-6  # rounding can leave a certain token's logprob a hair above 0


@dataclass
class FindingData:
    kind: str
    message: str
    severity: str = "warning"
    node_idx: int | None = None
    position: int | None = None
    detail: dict = field(default_factory=dict)


def check_lockstep(r: Rollout) -> list[FindingData]:
    out = []
    for i, node in enumerate(r.nodes):
        for name, n_src in (node.extra.get("source_lengths") or {}).items():
            out.append(FindingData(
                "logprob_len_mismatch" if name == "logprobs" else f"{name}_len_mismatch",
                f"node {i}: {name} has {n_src} entries for {len(node.token_ids)} tokens",
                "error", i, min(n_src, len(node.token_ids)),
                {"array": name, "source_length": n_src, "tokens": len(node.token_ids)}))
    return out


def check_padded_logprobs(r: Rollout) -> list[FindingData]:
    """A trailing run (>= 2) of exact 0.0 logprobs on a node's sampled tokens. `position` is
    the token index within the node where the run starts."""
    out = []
    for i, node in enumerate(r.nodes):
        if not node.mask or not node.logprobs:
            continue
        sampled = [k for k, m in enumerate(node.mask) if m]
        run = 0
        for k in reversed(sampled):
            lp = node.logprobs[k]
            if lp is not None and lp == 0.0:
                run += 1
            else:
                break
        if run >= 2:
            start = sampled[len(sampled) - run]
            out.append(FindingData(
                "suspected_logprob_padding",
                f"node {i}: last {run} sampled logprobs are exactly 0.0 (suspected padding)",
                "warning", i, start, {"run": run}))
    return out


def check_logprob_values(r: Rollout) -> list[FindingData]:
    """A log-probability is ≤ 0 and finite; anything else (positive, NaN, ±inf, or beyond the
    float32 range the store keeps) is a writer bug. The values are kept and reported."""
    out = []
    for i, node in enumerate(r.nodes):
        bad = [k for k, lp in enumerate(node.logprobs)
               if lp is not None and not (-FLOAT32_MAX <= lp <= LOGPROB_EPS)]
        if bad:
            out.append(FindingData("invalid_logprob",
                                   f"node {i}: {len(bad)} logprob{'s' if len(bad) != 1 else ''} outside (-inf, 0]",
                                   "error", i, bad[0], {"positions": bad[:50], "values": [str(node.logprobs[k]) for k in bad[:5]]}))
    return out


def check_token_drift(r: Rollout) -> list[FindingData]:
    out = []
    for i, node in enumerate(r.nodes):
        drift = node.extra.get("token_drift")
        if drift:
            out.append(FindingData(
                "token_drift",
                f"node {i}: prompt diverges from previous prompt + completion at index "
                f"{drift.get('index')} (expected {drift.get('expected')}, found {drift.get('found')})",
                "warning", i, drift.get("index"), dict(drift)))
    return out


def check_tool_calls(r: Rollout) -> list[FindingData]:
    out = []
    messages = [n.message.model_dump() for n in r.nodes]
    seen_unanswered: set[tuple[int, int]] = set()
    seen_dupes: set[str] = set()
    seen_results: set[int] = set()
    for path in branches(r.nodes):
        pairing = pair(path, messages)
        calls = pairing.calls
        ids = Counter(c.id for c in calls if c.id)
        for cid, n in ids.items():
            if n > 1 and cid not in seen_dupes:
                seen_dupes.add(cid)
                where = [(c.node, c.position) for c in calls if c.id == cid]
                out.append(FindingData("duplicate_tool_call_id", f"tool-call id {cid!r} used by {n} calls",
                                       "warning", where[0][0], None, {"id": cid, "calls": where}))
        for c in calls:
            if c.result_node is None and not c.ends_rollout and (c.node, c.position) not in seen_unanswered:
                seen_unanswered.add((c.node, c.position))
                out.append(FindingData("unanswered_tool_call", f"call {c.id or c.name!r} has no recorded result",
                                       "warning", c.node, c.position, {"id": c.id, "name": c.name}))
            if c.ambiguous and c.result_node not in seen_results:
                seen_results.add(c.result_node)
                out.append(FindingData(
                    "ambiguous_tool_result",
                    f"node {c.result_node}: the result names no call id and {len(c.ambiguous)} calls could take it; "
                    f"paired with the oldest ({c.name!r} at node {c.node})",
                    "warning", c.result_node, None,
                    {"paired_with": [c.node, c.position], "candidates": [list(x) for x in c.ambiguous]}))
        for i in pairing.unpaired_results:
            if i not in seen_results:
                seen_results.add(i)
                m = messages[i]
                out.append(FindingData("unpaired_tool_result",
                                       f"node {i}: tool result {m.get('tool_call_id') or m.get('name') or ''!r} answers no waiting call",
                                       "warning", i, None, {"id": m.get("tool_call_id"), "name": m.get("name")}))
    return out


def check_empty_response(r: Rollout) -> list[FindingData]:
    out = []
    for i, node in enumerate(r.nodes):
        m = node.message
        if m.content is None and node.token_ids:
            continue  # the source recorded tokens but no text: not an empty response
        if m.role == "assistant" and not m.text().strip() and not m.tool_calls and not (m.reasoning_content or "").strip():
            n = len(node.token_ids)
            out.append(FindingData("empty_response", f"node {i}: empty model response ({n} token{'s' if n != 1 else ''})",
                                   "warning", i, None, {"tokens": len(node.token_ids)}))
    return out


def check_reward(r: Rollout) -> list[FindingData]:
    status = r.reward_status()
    if status in ("nan", "inf"):
        return [FindingData("non_finite_reward", f"reward is {status}; stored as missing", "error", None, None,
                            {"reward_status": status})]
    return []


def check_lost_bytes(r: Rollout) -> list[FindingData]:
    out = []
    for i, node in enumerate(r.nodes):
        pieces = node.extra.get("token_bytes") or []
        lost = [k for k, h in enumerate(pieces) if isinstance(h, str) and REPLACEMENT_HEX in h.replace(" ", "")]
        if lost:
            out.append(FindingData("bytes_lost_upstream",
                                   f"node {i}: {len(lost)} token(s) carry U+FFFD; the true bytes are gone",
                                   "warning", i, lost[0], {"positions": lost}))
    return out


CHECKS: list[Callable[[Rollout], list[FindingData]]] = [
    check_lockstep,
    check_padded_logprobs,
    check_logprob_values,
    check_token_drift,
    check_tool_calls,
    check_empty_response,
    check_reward,
    check_lost_bytes,
]


def run_checks(rollout: Rollout) -> list[FindingData]:
    """All findings for one rollout, in registry order."""
    out: list[FindingData] = []
    for check in CHECKS:
        out.extend(check(rollout))
    return out
