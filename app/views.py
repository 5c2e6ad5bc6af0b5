"""Page data: each function returns one plain, JSON-safe structure that the HTML template renders
and the JSON twin returns as is. Nothing here formats HTML.
"""
from __future__ import annotations

import math
from urllib.parse import quote, urlencode

from sqlmodel import Session

from app import charts, queries
from ingest import advantages, checks
from app.db.tokenarrays import f32, floats_or_none, unpack_bits, unpack_floats, unpack_ids
from ingest.graph import branches, pair_tool_calls

PREVIEW_CHARS = 2000  # message text shown inline; the rest behind "show full"
MESSAGES_PER_PAGE = 50
TOKENS_INLINE = 4096  # tokens drawn per message; the JSON twin has them all


def q(s: str) -> str:
    return quote(str(s), safe="")


def run_url(run_id: str) -> str:
    return f"/runs/{q(run_id)}"


def rollout_url(run_id: str, rollout_id: str, attempt: int | None = None) -> str:
    """A rollout's page; with `attempt`, that attempt's (without, the latest attempt's)."""
    return f"/runs/{q(run_id)}/rollouts/{q(rollout_id)}" + (f"?attempt={attempt}" if attempt is not None else "")


def _pins_attempt(attempt: int, n_attempts: int | None) -> bool:
    """A link names its attempt when the rollout id has several, or when it is a retry (> 0):
    the bare rollout URL shows only the latest attempt."""
    return attempt > 0 or (n_attempts or 1) > 1


def group_url(run_id: str, group_id: str) -> str:
    return f"/runs/{q(run_id)}/groups/{q(group_id)}"


def _num(x):
    """JSON-safe number: NaN/inf → None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def summary_row(row, n_attempts: int | None = None) -> dict:
    """A rollout summary row as page data. Its `url` carries `?attempt=N` when the rollout id
    has several attempts (`n_attempts`, else the row's own column) or this one is a retry."""
    d = dict(row._mapping)
    d.pop("pk", None)
    d.pop("latest_attempt", None)
    d["reward"] = _num(d.get("reward"))
    if d.get("ingested_at") is not None:
        d["ingested_at"] = d["ingested_at"].isoformat()
    if n_attempts is not None:
        d["n_attempts"] = n_attempts
    attempt = d.get("attempt") or 0
    pinned = _pins_attempt(attempt, d.get("n_attempts"))
    d["url"] = rollout_url(d["run_id"], d["rollout_id"], attempt if pinned else None)
    d["group_url"] = group_url(d["run_id"], d["group_id"]) if d.get("group_id") is not None else None
    return d


# --- runs -----------------------------------------------------------------------------------

def runs_page(session: Session) -> dict:
    runs = queries.list_runs(session=session)
    for r in runs:
        r["url"] = run_url(r["id"])
    return {"runs": runs, "endings": queries.ENDINGS}


def run_page(session: Session, run_id: str) -> dict | None:
    run = queries.get_run(session=session, run_id=run_id)
    if run is None:
        return None
    steps = queries.run_steps(session=session, run_id=run_id)
    step_rows = []
    for s in steps:
        d = s.as_dict()
        d["url"] = f"{run_url(run_id)}/rollouts" + (f"?step={s.step}" if s.step is not None else "")
        step_rows.append(d)
    means = queries.reward_means(session=session, run_ids=[run_id]).get(run_id, {})
    # Without a training step (Tunix files, tau-bench) a per-step chart has no axis to draw on.
    steps_recorded = any(s.step is not None for s in steps)
    return {
        "run": {"id": run.id, "name": run.name, "type": run.type, "tokenizer": run.tokenizer_sha256,
                "url": run_url(run.id), "rollouts_url": f"{run_url(run.id)}/rollouts"},
        "endings": queries.ENDINGS,
        "steps": step_rows,
        "steps_recorded": steps_recorded,
        "totals": {"rollouts": sum(s.rollouts for s in steps),
                   "endings": {e: sum(s.endings.get(e, 0) for s in steps) for e in queries.ENDINGS},
                   "mean_reward": means.get("mean_reward"),
                   "mean_reward_no_errors": means.get("mean_reward_no_errors"),
                   "excluded": means.get("excluded", 0),
                   "retries": queries.count_retries(session=session, run_id=run_id)},
        "charts": {"ending_rates": charts.ending_rates(run_id, steps), "reward": charts.reward_trend(run_id, steps)}
                  if steps_recorded else None,
    }


def rollouts_page(session: Session, run_id: str, filters: queries.RolloutFilters, after: str | None,
                  limit: int, *, keep_limit: int | None = None, twin: bool = False) -> dict | None:
    """One page of a run's rollouts. The next link stays on the same face (HTML or JSON twin) and
    keeps an explicit `limit`."""
    run = queries.get_run(session=session, run_id=run_id)
    if run is None:
        return None
    rows, nxt = queries.list_rollouts(session=session, run_id=run_id, filters=filters, after=after, limit=limit)
    base = f"{run_url(run_id)}/rollouts" + (".json" if twin else "")
    params = {**filters.as_query(), **({"limit": keep_limit} if keep_limit else {}), "after": nxt}
    present = queries.run_finding_kinds(session=session, run_id=run_id)
    return {
        "run": {"id": run.id, "name": run.name, "url": run_url(run.id)},
        "filters": filters.as_query(),
        "endings": queries.ENDINGS,
        "finding_kinds": sorted(set(present) | set(queries.FINDING_KINDS)),
        "rollouts": [summary_row(r) for r in rows],
        "next": nxt,
        "next_url": f"{base}?{urlencode(params)}" if nxt else None,
        "limit": limit,
    }


# --- quarantine -----------------------------------------------------------------------------

def quarantine_page(session: Session, *, file: str | None, before: int | None, limit: int,
                    keep_limit: int | None = None, twin: bool = False) -> dict:
    rows, nxt = queries.list_quarantine(session=session, file=file, before=before, limit=limit)
    base = "/quarantine" + (".json" if twin else "")
    params = {**({"file": file} if file is not None else {}), **({"limit": keep_limit} if keep_limit else {})}
    return {
        "total": queries.count_quarantine(session=session),
        "matching": queries.count_quarantine(session=session, file=file) if file is not None else None,
        "file": file,
        "records": [{"id": q.pk, "file": q.source_file, "line": q.line, "field": q.field, "error": q.error,
                     "raw": q.raw, "at": q.created_at.isoformat(),
                     "file_url": f"/quarantine?{urlencode({'file': q.source_file})}"} for q in rows],
        "next": nxt,
        "next_url": f"{base}?{urlencode({**params, 'before': nxt})}" if nxt is not None else None,
        "clear_url": "/quarantine",
    }


# --- one rollout ----------------------------------------------------------------------------

class Pieces:
    """Token id → display piece, from the run's stored vocabulary (None = show ids)."""

    def __init__(self, vocab):
        self.vocab = vocab

    def tokens(self, ids, source_hex: list | None) -> list[dict]:
        """The source's own bytes win when it recorded them (they are what the server
        returned); else the run's vocabulary; else None (show the id)."""
        from ingest.tokenizer import decode_pieces, piece_from_bytes

        if source_hex and len(source_hex) == len(ids):
            return [_piece_dict(piece_from_bytes(int(i), bytes.fromhex(h.replace(" ", "")) if isinstance(h, str) else b""))
                    for i, h in zip(ids, source_hex)]
        if self.vocab is not None:
            return [_piece_dict(p) for p in decode_pieces(self.vocab, [int(i) for i in ids])]
        return [None] * len(ids)


def _piece_dict(p) -> dict:
    """A TokenPiece for the page; `lost` marks U+FFFD, bytes the source had already lost."""
    return {"text": p.text, "hex": p.hex, "partial": p.partial, "special": p.special, "unknown": p.unknown,
            "lost": "\ufffd" in p.text}


def _load_vocab(session: Session, sha256: str | None):
    if not sha256:
        return None
    from ingest.tokenizer import cached_from_blob, from_blob

    def loader():
        t = queries.get_tokenizer(session=session, sha256=sha256)
        if t is None:
            raise LookupError(sha256)
        return from_blob(t.vocab, t.name, t.kind, t.sha256)

    try:
        return cached_from_blob(sha256, loader)
    except LookupError:
        return None


def _node_view(node, pieces: Pieces, calls_by_node: dict, answer_of: dict, findings_by_node: dict,
               run_id: str, rollout_pk: int, all_tokens: bool) -> dict:
    msg = node.message or {}
    content = msg.get("content")
    if isinstance(content, list):
        text = "\n".join(str(p.get("text", "")) if p.get("type") == "text" else f"[{p.get('type', 'part')}]"
                         for p in content)
    else:
        text = content or ""
    ids = unpack_ids(node.token_ids)
    n = len(ids)
    mask = unpack_bits(node.mask, n) if node.mask else None
    logprobs = unpack_floats(node.logprobs)
    advantages = unpack_floats(node.advantages)
    extra = node.extra or {}
    shown = n if all_tokens else min(n, TOKENS_INLINE)
    piece_list = pieces.tokens(ids[:shown], (extra.get("token_bytes") or [])[:shown] if extra.get("token_bytes") else None)
    drift = extra.get("token_drift") or {}
    drift_at = drift.get("index") if isinstance(drift.get("index"), int) else None
    node_findings = findings_by_node.get(node.idx, [])
    suspect = _suspected_padding(node_findings)
    tokens = []
    for i in range(shown):
        tokens.append({"i": i, "id": int(ids[i]), "trained": bool(mask[i]) if mask is not None else False,
                       "logprob": _at(logprobs, i), "advantage": _at(advantages, i),
                       "piece": piece_list[i], "drift": i == drift_at, "suspect": i in suspect})
    n_trained = int(mask.sum()) if mask is not None else 0
    bytes_lost = any(p and p.get("lost") for p in piece_list)
    view = {
        "idx": node.idx, "parent": node.parent, "role": node.role, "sampled": node.sampled,
        "timestamp": node.timestamp, "policy_version": node.policy_version,
        "reward": node.reward, "mc_return": node.mc_return,
        "content": text[:PREVIEW_CHARS], "content_len": node.content_len,
        "content_truncated": node.content_len > PREVIEW_CHARS,
        "content_url": f"{run_url(run_id)}/nodes/{rollout_pk}/{node.idx}.txt",
        "reasoning": msg.get("reasoning_content"),
        "tool_calls": calls_by_node.get(node.idx, []),
        "answers": answer_of.get(node.idx),
        "name": msg.get("name"),
        # a role the source used that the native model has no word for (kept by the reader)
        "source_role": (msg.get("extra") or {}).get("source_role"),
        "n_tokens": n, "n_trained": n_trained, "tokens": tokens, "tokens_shown": shown,
        "token_ids": [int(x) for x in ids] if all_tokens else None,
        "mask": [bool(x) for x in mask] if (all_tokens and mask is not None) else None,
        "logprobs": floats_or_none(logprobs) if all_tokens else None,
        "advantages": floats_or_none(advantages) if all_tokens else None,
        "bytes_lost": bytes_lost,
        # The bytes_lost_upstream finding already names this on the node: one badge, not two.
        "bytes_lost_badge": bytes_lost and not any(f["kind"] == "bytes_lost_upstream" for f in node_findings),
        # Shown only where the stored check fired (it deliberately skips a turn whose source
        # recorded tokens but no text): pages never recompute a check.
        "empty_response": any(f["kind"] == "empty_response" for f in node_findings),
        "findings": node_findings,
        "extra": {k: v for k, v in extra.items() if k not in ("token_bytes",)},
    }
    return view


def _at(values, i: int) -> float | None:
    """values[i] (float32) as the float it was written as, None when absent or NaN."""
    if values is None or i >= len(values):
        return None
    return f32(values[i])


def _suspected_padding(node_findings: list[dict]) -> set[int]:
    """Token indices of a node flagged by `suspected_logprob_padding`: `position` is where the
    trailing run of 0.0 logprobs starts, `detail.run` its length."""
    out: set[int] = set()
    for f in node_findings:
        run = (f.get("detail") or {}).get("run")
        if f["kind"] == "suspected_logprob_padding" and isinstance(f["position"], int) and isinstance(run, int):
            out.update(range(f["position"], f["position"] + run))
    return out


def _finding(f) -> dict:
    """A stored finding as page data; old stored kinds are read under their registered kind."""
    kind = checks.legacy_kind(f.kind)
    return {"kind": kind, "label": checks.label(kind), "severity": f.severity,
            "node": f.node_idx, "position": f.position, "message": f.message, "detail": f.detail}


class NodeLinks:
    """Where a link to node N must go: `#node-N` when N is on the page being viewed, else
    `?branch=B&offset=O#node-N` with B the current branch if it holds N (else the first branch
    that does) and O the start of the page holding N. A node's position is its depth, the same
    on every branch that holds it."""

    def __init__(self, base: str, paths: list[list[int]], branch: int, offset: int, limit: int,
                 attempt: int | None):
        self.base, self.paths, self.branch, self.offset, self.limit = base, paths, branch, offset, limit
        self.attempt = attempt
        self.current = {idx: p for p, idx in enumerate(paths[branch])} if paths else {}
        self._first: dict[int, tuple[int, int]] | None = None

    def _locate(self, idx: int) -> tuple[int, int] | None:
        if idx in self.current:
            return self.branch, self.current[idx]
        if self._first is None:  # built once, only when a link leaves the current branch
            self._first = {}
            for b, path in enumerate(self.paths):
                for p, i in enumerate(path):
                    self._first.setdefault(i, (b, p))
        return self._first.get(idx)

    def page_url(self, branch: int, offset: int) -> str:
        params = {"branch": branch, "offset": offset, **({"attempt": self.attempt} if self.attempt is not None else {})}
        return f"{self.base}?{urlencode(params)}"

    def __call__(self, idx) -> str | None:
        if not isinstance(idx, int):
            return None
        where = self._locate(idx)
        if where is None:
            return None
        b, p = where
        if b == self.branch and self.offset <= p < self.offset + self.limit:
            return f"#node-{idx}"
        return f"{self.page_url(b, p // self.limit * self.limit)}#node-{idx}"


def rollout_page(session: Session, run_id: str, rollout_id: str, *, branch: int = 0, offset: int = 0,
                 attempt: int | None = None, all_tokens: bool = False, limit: int = MESSAGES_PER_PAGE) -> dict | None:
    """The rollout page: header, findings, branches, one page of messages of one branch.

    `attempt=None` shows the latest attempt. Every attempt of the rollout id is listed with its
    link (the one shown marked `current`); when there are several, the page's own links (branches,
    pages, nodes) name the attempt shown."""
    row = queries.get_rollout(session=session, run_id=run_id, rollout_id=rollout_id, attempt=attempt)
    if row is None:
        return None
    pk = row.pk
    tries = queries.rollout_attempts(session=session, run_id=run_id, rollout_id=rollout_id)
    attempts = [{"attempt": a.attempt, "step": a.step, "ending": a.ending, "ending_detail": a.ending_detail,
                 "reward": _num(a.reward), "reward_status": a.reward_status,
                 "url": rollout_url(run_id, rollout_id, a.attempt if _pins_attempt(a.attempt, len(tries)) else None),
                 "current": a.attempt == row.attempt, "latest": i == len(tries) - 1}
                for i, a in enumerate(tries)]
    run = queries.get_run(session=session, run_id=run_id)
    envelope = queries.get_envelope(session=session, rollout_pk=pk)
    stored = queries.get_findings(session=session, rollout_pk=pk)
    findings = [_finding(f) for f in stored if f.severity != checks.SKIPPED]
    skipped = [{"kind": f.kind, "label": checks.label(f.kind), "reason": f.message}
               for f in stored if f.severity == checks.SKIPPED]
    findings_by_node: dict[int, list] = {}
    for f in findings:
        if f["node"] is not None:
            findings_by_node.setdefault(f["node"], []).append(f)

    class _N:  # parent-only view for ingest.graph.branches
        __slots__ = ("parent",)

        def __init__(self, parent):
            self.parent = parent

    graph = queries.node_graph(session=session, rollout_pk=pk)
    paths = branches([_N(p) for _, p in graph]) if graph else []
    branch = max(0, min(branch, len(paths) - 1)) if paths else 0
    path = paths[branch] if paths else []
    base = rollout_url(run_id, rollout_id)
    link = NodeLinks(base, paths, branch, offset, limit,
                     row.attempt if attempt is not None or len(attempts) > 1 else None)
    for f in findings:
        f["url"] = link(f["node"])
        calls = (f["detail"] or {}).get("calls") if f["kind"] == "duplicate_tool_call_id" else None
        if isinstance(calls, list):  # every call that shares the id, not only the first
            f["calls"] = [{"node": c[0], "position": c[1], "url": link(c[0])} for c in calls
                          if isinstance(c, list | tuple) and len(c) == 2]
    headers = queries.node_headers(session=session, rollout_pk=pk, idxs=path)
    messages = [headers.get(i, {"role": "user"}) for i in range(len(graph))] if graph else []
    for i, h in headers.items():
        messages[i] = h
    pairs = pair_tool_calls(path, messages)
    calls_by_node: dict[int, list] = {}
    answer_of: dict[int, dict] = {}
    for c in pairs:
        calls_by_node.setdefault(c.node, []).append(
            {"id": c.id, "name": c.name, "position": c.position, "result_node": c.result_node,
             "result_url": link(c.result_node)})
        if c.result_node is not None:
            answer_of[c.result_node] = {"node": c.node, "id": c.id, "name": c.name, "url": link(c.node)}
    page = path[offset:offset + limit]
    nodes = queries.get_nodes(session=session, rollout_pk=pk, idxs=page)
    vocab = _load_vocab(session, run.tokenizer_sha256 if run else None)
    pieces = Pieces(vocab)
    node_views = []
    for node in nodes:
        v = _node_view(node, pieces, calls_by_node, answer_of, findings_by_node, run_id, pk, all_tokens)
        raw_calls = (node.message or {}).get("tool_calls") or []  # the raw arguments, as sampled
        for c in v["tool_calls"]:
            if c["position"] < len(raw_calls):
                c["arguments"] = raw_calls[c["position"]].get("arguments", "")
        node_views.append(v)
    model_calls = [dict(c, node_url=link(c.get("node"))) if isinstance(c, dict) else c
                   for c in envelope.get("calls", [])]
    summary = summary_row(row, n_attempts=len(attempts))
    nxt = offset + limit if offset + limit < len(path) else None
    return {
        "run": {"id": run_id, "name": run.name if run else None, "url": run_url(run_id),
                "tokenizer": bool(vocab)},
        "rollout": summary,
        "attempts": attempts,
        "ending": envelope.get("ending", {"type": summary["ending"]}),
        "rewards": envelope.get("rewards", {}),
        "reward": _num(summary["reward"]),
        "reward_status": summary["reward_status"],
        "task": envelope.get("task"),
        "calls": model_calls,
        "errors": envelope.get("errors", []),
        "timing": envelope.get("timing", {}),
        "metrics": envelope.get("metrics", {}),
        "extra": envelope.get("extra", {}),
        "findings": findings,
        "checks_skipped": skipped,
        # Tokens were recorded but none carries loss: a filter (Tunix overlong_filter) zeroed the
        # mask. Shown, but it trains on nothing.
        "trains_on_nothing": summary["n_tokens"] > 0 and summary["n_trained_tokens"] == 0 and summary["n_turns"] > 0,
        # The token legend explains what is drawn: only when there are tokens, and the tokenizer
        # note only when some token on this page is drawn as a bare id.
        "has_tokens": summary["n_tokens"] > 0,
        "bare_ids": any(t["piece"] is None for m in node_views for t in m["tokens"]),
        "branches": [{"index": b, "nodes": len(p), "leaf": p[-1] if p else None,
                      "url": link.page_url(b, 0)} for b, p in enumerate(paths)],
        "branch": branch,
        "offset": offset,
        "messages": node_views,
        "messages_total": len(path),
        "next_offset": nxt,
        "next_url": link.page_url(branch, nxt) if nxt is not None else None,
        "all_tokens_url": link.page_url(branch, offset) + "&tokens=all",
    }


# --- group ----------------------------------------------------------------------------------

def _no_advantage_reason(member: dict, advantage: float | None, *, drop_errors: bool) -> str | None:
    """Why a member has no advantage under a policy, as a code the page spells out (None when
    it has one): `error_dropped` (no gradient) or `reward_excluded` (missing or non-finite)."""
    if advantage is not None:
        return None
    if member["ending"] == "error":
        return "error_dropped" if drop_errors else None
    return "reward_excluded"


def group_page(session: Session, run_id: str, group_id: str) -> dict | None:
    """Siblings of one group with reward, ending and advantage under both policies.

    A rollout id retried (several attempts) counts once: only its latest attempt in the run is a
    member and enters the baselines and the warnings; earlier attempts of the group are listed
    in `superseded`, each with a link to its own attempt."""
    rows = queries.group_members(session=session, run_id=run_id, group_id=group_id)
    if not rows:
        return None
    members, superseded = [], []
    for r in rows:
        (members if r.latest_attempt is None or r.attempt >= r.latest_attempt else superseded).append(summary_row(r))
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
    stored = queries.group_findings(session=session, run_id=run_id, group_id=group_id)
    group_findings = [_finding(f) for f in stored if f.severity != checks.SKIPPED]
    return {
        "run": {"id": run_id, "url": run_url(run_id)},
        "group": {"id": group_id, "size": len(members), "declared_size": max(declared) if declared else None,
                  "steps": sorted({m["step"] for m in members if m["step"] is not None})},
        # Group-scope findings, stored at ingest (ingest/checks/groups.py); `warnings` keeps
        # their messages, the shape this twin had before the checks registry.
        "findings": group_findings,
        "warnings": [f["message"] for f in group_findings],
        "checks_skipped": [{"kind": f.kind, "label": checks.label(f.kind), "reason": f.message}
                           for f in stored if f.severity == checks.SKIPPED],
        "policies": {"errors_as_zero": pol(result["errors_as_zero"]), "errors_dropped": pol(result["errors_dropped"])},
        "excluded": {"count": len(result["excluded"]), "of": len(members)},
        "members": members,
        "superseded": superseded,
    }
