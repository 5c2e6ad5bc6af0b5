"""What the group page adds to its members and baselines: the three advantage estimators under
both error policies, the advantages the source recorded beside them, a no-signal warning, the
members aligned on their shared token prefix with the first divergence, and a diff of two
members. Maths in `ingest.advantages`; this module only reads and arranges."""
from __future__ import annotations

import math

import numpy as np
from sqlmodel import Session

from app import urls
from app.db.tokenarrays import unpack_bits, unpack_floats, unpack_ids
from app.errors import ApiError
from app.queries import groups as q_groups
from app.queries import nodes as q_nodes
from app.queries import runs as q_runs
from app.views.common import PageModel
from app.views.rollout.models import MarkedToken
from app.views.rollout.windows import Pieces, _load_vocab, _token_chips
from app.views.tokenpages import PageLink
from ingest import advantages as adv
from ingest.graph import branches

ALIGN_BEFORE, ALIGN_AFTER = 6, 40  # tokens shown around the first divergence


class DiffMessage(PageModel):
    """One message of a member's first branch: role, the first 400 characters of its text, and
    the names of the tools it calls (comma-separated)."""

    idx: int
    role: str
    text: str
    calls: str


class DiffRow(PageModel):
    """The messages of both members at one position (None past a member's last message)."""

    position: int
    a: DiffMessage | None
    b: DiffMessage | None
    same: bool


class DiffTokens(PageModel):
    """One member's tokens from just before the first differing token."""

    rollout_id: str
    n_tokens: int
    tokens: list[MarkedToken]


class DiffPage(PageModel):
    """Two members of a group compared (`?a=ID&b=ID`): messages by position with the first that
    differs, then tokens from the first differing token (None: same messages / same tokens)."""

    run: PageLink
    group: PageLink
    a: str
    b: str
    messages: list[DiffRow]
    first_message: int | None
    first_token: int | None
    tokens: list[DiffTokens]


def _recorded(nodes: list) -> dict | None:
    """The advantage the source recorded for a rollout: the values on its mask-1 tokens (GRPO
    gives every token of a rollout the same one). None when nothing was recorded."""
    vals = []
    for n in nodes:
        a = unpack_floats(n.advantages)
        if a is None:
            continue
        m = unpack_bits(n.mask, n.n_tokens) if n.mask else np.zeros(len(a), dtype=bool)
        a = a[m[:len(a)]] if m.any() else a
        vals.extend(float(x) for x in a if not np.isnan(x))
    if not vals:
        return None
    return {"value": vals[0], "min": min(vals), "max": max(vals), "varies": max(vals) - min(vals) > 1e-6,
            "n_tokens": len(vals)}


def _close(recorded: float | None, expected: float | None) -> bool:
    return recorded is not None and expected is not None and math.isfinite(recorded) and math.isfinite(expected) \
        and adv.close(recorded, expected)


def enrich(session: Session, data: dict, *, sort: str | None = None) -> dict:
    """Add estimators, recorded advantages, no-signal warnings, the task and step links, and the
    alignment to a `views.group_page` structure (in place; returned)."""
    run_id, group_id = data["run"]["id"], data["group"]["id"]
    members = data["members"]
    keys = [f"{m['rollout_id']}#{m['attempt']}" for m in members]
    ms = [adv.Member(k, m["reward"], m["ending"]) for k, m in zip(keys, members)]
    data["estimator_names"] = adv.ESTIMATOR_TEXT
    est = {}
    for policy, drop in (("errors_as_zero", False), ("errors_dropped", True)):
        scored = adv.scored_rewards(ms, drop_errors=drop)
        e = adv.estimators(scored)
        est[policy] = e
        data["policies"][policy]["std_sample"] = e["std_sample"]
        data["policies"][policy]["no_signal"] = adv.no_signal(scored)
    data["signal_warnings"] = []  # apart from `warnings` (the group's membership problems)
    for policy in ("errors_dropped", "errors_as_zero"):
        why = data["policies"][policy]["no_signal"]
        if why:
            label = "errors dropped" if policy == "errors_dropped" else "errors scored 0"
            data["signal_warnings"].append(f"no learning signal with {label}: {why}")
    pks = q_groups.member_pks(session=session, run_id=run_id, group_id=group_id)
    member_pks = [pks.get((m["rollout_id"], m["attempt"])) for m in members]
    nodes_of = q_groups.member_nodes(session=session, pks=[p for p in member_pks if p is not None])
    _components(session, data, member_pks)
    for k, m, pk in zip(keys, members, member_pks):
        m["estimators"] = {p: est[p]["advantages"].get(k) for p in est}
        rec = _recorded(nodes_of.get(pk, [])) if pk is not None else None
        if rec is not None:
            matches = [f"{p}:{name}" for p in ("errors_dropped", "errors_as_zero")
                       for name, v in (m["estimators"][p] or {}).items() if _close(v, rec["value"])]
            rec["matches"] = matches
            rec["mismatch"] = not matches
        m["recorded_advantage"] = rec
    data["has_recorded"] = any(m["recorded_advantage"] for m in members)
    tasks = sorted({m["task_key"] for m in members if m.get("task_key")})
    data["tasks"] = tasks
    data["step_links"] = [{"step": s, "url": urls.rollouts(run_id, step=s)}
                          for s in data["group"]["steps"]]
    _align(session, data, member_pks, nodes_of, run_id)
    data["diff_base"] = urls.group(run_id, group_id)
    if sort in ("reward", "advantage"):
        def key(m):
            v = m["reward"] if sort == "reward" else m["advantage"]["errors_dropped"]
            return (v is None, -(v or 0))
        members.sort(key=key)
    data["sort"] = sort
    return data


def _components(session: Session, data: dict, member_pks: list) -> None:
    """Each member's reward components (`components`: {name: score}, app/queries/reward_components.py)
    and the group's component columns (`components`: [{name, weight}] in first-seen order; weight
    None when members weigh it differently)."""
    from app.queries import reward_components as q_rc

    of = q_rc.of_rollouts(session=session, pks=[p for p in member_pks if p is not None])
    columns: dict[str, set] = {}
    for m, pk in zip(data["members"], member_pks):
        parts = of.get(pk, {}) if pk is not None else {}
        m["components"] = {name: score for name, (score, _) in parts.items()}
        for name, (_, weight) in parts.items():
            columns.setdefault(name, set()).add(weight)
    data["components"] = [{"name": n, "weight": next(iter(w)) if len(w) == 1 else None}
                          for n, w in columns.items()]


def _path_ids(nodes: list) -> tuple[list, np.ndarray, np.ndarray]:
    if not nodes:
        return [], np.zeros(0, dtype="<i4"), np.zeros(1, dtype=int)
    paths = branches(nodes)
    path = [nodes[i] for i in paths[0]] if paths else []
    ids = [unpack_ids(n.token_ids) for n in path]
    starts = np.concatenate([[0], np.cumsum([len(x) for x in ids])]).astype(int)
    return path, (np.concatenate(ids) if ids else np.zeros(0, dtype="<i4")), starts


def _align(session: Session, data: dict, member_pks: list, nodes_of: dict, run_id: str) -> None:
    """Each member's first branch against the others: the token prefix all members share, and
    per member its tokens from just before its first divergence (highlighted)."""
    run = q_runs.get_run(session=session, run_id=run_id)
    pieces = Pieces(_load_vocab(session, run.tokenizer_sha256 if run else None))
    seqs = []
    for pk in member_pks:
        seqs.append(_path_ids(nodes_of.get(pk, [])) if pk is not None
                    else ([], np.zeros(0, dtype="<i4"), np.zeros(1, dtype=int)))
    with_tokens = [s for s in seqs if len(s[1])]
    if len(with_tokens) < 1:
        data["alignment"] = None
        return
    common = min(len(s[1]) for s in with_tokens)
    ref = with_tokens[0][1]
    for _, ids, _ in with_tokens[1:]:
        neq = np.nonzero(ids[:common] != ref[:common])[0]
        if len(neq):
            common = int(neq[0])
    data["alignment"] = {"shared_prefix": common}
    for m, (path, ids, starts) in zip(data["members"], seqs):
        if not len(ids):
            m["aligned"] = None
            continue
        lo, hi = max(0, common - ALIGN_BEFORE), min(len(ids), common + ALIGN_AFTER)
        chips = []
        for k, n in enumerate(path):
            a, b = max(lo, int(starts[k])), min(hi, int(starts[k + 1]))
            if b > a:
                for c in _token_chips(n, pieces, a - int(starts[k]), b - int(starts[k]), int(starts[k])):
                    c["first_diff"] = c["t"] == common and common < len(ids)
                    chips.append(c)
        m["aligned"] = {"from": lo, "tokens": chips, "more": len(ids) - hi}


def diff_page(session: Session, run_id: str, group_id: str, a: str, b: str) -> DiffPage | None:
    """Two members of a group compared: their messages (first branch) aligned by position with
    the first message that differs, then their token sequences from the first differing token.
    `a`/`b` are rollout ids (latest attempt). None when the group does not exist; ApiError 422
    (field `a` or `b`) when either is not one of its members."""
    pks = q_groups.member_pks(session=session, run_id=run_id, group_id=group_id)
    if not pks:
        return None
    def latest(rid):
        got = [(att, pk) for (r, att), pk in pks.items() if r == rid]
        return max(got)[1] if got else None
    pa, pb = latest(a), latest(b)
    for field, rid, pk in (("a", a, pa), ("b", b, pb)):
        if pk is None:
            raise ApiError(422, f"{field}: {rid!r} is not a member of group {group_id!r}", field=field)
    nodes_of = q_groups.member_nodes(session=session, pks=[pa, pb])
    run = q_runs.get_run(session=session, run_id=run_id)
    pieces = Pieces(_load_vocab(session, run.tokenizer_sha256 if run else None))
    sides = []
    for rid, pk in ((a, pa), (b, pb)):
        path, ids, starts = _path_ids(nodes_of[pk])
        full = {n.idx: n for n in q_nodes.get_nodes(session=session, rollout_pk=pk, idxs=[n.idx for n in path])}
        msgs = []
        for n in path:
            body = (full[n.idx].message or {}) if n.idx in full else {}
            content = body.get("content")
            text = content if isinstance(content, str) else ("" if content is None else str(content))
            calls = ", ".join(c.get("name", "") for c in body.get("tool_calls") or [])
            msgs.append({"idx": n.idx, "role": n.role, "text": text[:400], "calls": calls,
                         "key": (n.role, text, calls)})
        sides.append({"rollout_id": rid, "path": path, "ids": ids, "starts": starts, "messages": msgs})
    first_msg = None
    rows = []
    for k in range(max(len(sides[0]["messages"]), len(sides[1]["messages"]))):
        x = sides[0]["messages"][k] if k < len(sides[0]["messages"]) else None
        y = sides[1]["messages"][k] if k < len(sides[1]["messages"]) else None
        same = x is not None and y is not None and x["key"] == y["key"]
        if not same and first_msg is None:
            first_msg = k
        rows.append({"position": k, "a": x and {kk: v for kk, v in x.items() if kk != "key"},
                     "b": y and {kk: v for kk, v in y.items() if kk != "key"}, "same": same})
    ia, ib = sides[0]["ids"], sides[1]["ids"]
    n = min(len(ia), len(ib))
    neq = np.nonzero(ia[:n] != ib[:n])[0]
    first_tok = int(neq[0]) if len(neq) else (n if len(ia) != len(ib) else None)
    token_sides = []
    for s in sides:
        lo = max(0, (first_tok or 0) - ALIGN_BEFORE)
        hi = min(len(s["ids"]), (first_tok or 0) + ALIGN_AFTER * 4)
        chips = []
        for k, nd in enumerate(s["path"]):
            x0, x1 = max(lo, int(s["starts"][k])), min(hi, int(s["starts"][k + 1]))
            if x1 > x0:
                for c in _token_chips(nd, pieces, x0 - int(s["starts"][k]), x1 - int(s["starts"][k]),
                                      int(s["starts"][k])):
                    c["first_diff"] = c["t"] == first_tok
                    chips.append(c)
        token_sides.append({"rollout_id": s["rollout_id"], "n_tokens": int(len(s["ids"])), "tokens": chips})
    return DiffPage.model_validate({
        "run": {"id": run_id, "url": urls.run(run_id)}, "group": {"id": group_id, "url": urls.group(run_id, group_id)},
        "a": a, "b": b, "messages": rows, "first_message": first_msg, "first_token": first_tok, "tokens": token_sides})
