"""Checks on how a rollout ended (ingest/endings.py applies the rules; these report them)."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

from ingest.checks.context import CheckContext
from ingest.checks.registry import Hit, Skip, check, memo
from ingest.endings import LENGTH_FINISH_REASONS
from ingest.schema import Rollout


@check("silent_truncation", "warning", label="silent truncation")
def silent_truncation(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """The source says the episode completed (`agent_completed`, `SUCCEEDED`, `submitted`), but
    the last generation stopped for length or reached its token cap, or the environment ended
    the episode at its step limit. The ending was changed to the truthful one (`length_cut` or
    `truncated`, ingest/endings.py `correct_silent_truncation`); the source's claim is kept in
    the detail."""
    fix = r.ending.extra.get("silent_truncation")
    if fix and _corrected_on_length(r) and any(rule == "length_below_cap" and e.call == _last_call(r)
                                               for e, rule in _mismatches(r, ctx)):
        return  # the `length` itself is contradicted: stop_reason_mismatch reports it, once
    if fix:
        yield Hit(f"the source says {r.ending.detail or fix['claimed']} ({fix['claimed']}), but {fix['why']}: "
                  f"ending is {r.ending.type.value}", None, None,
                  {"claimed": fix["claimed"], "source_detail": r.ending.detail, "ending": r.ending.type.value,
                   "why": fix["why"]})


# --- stop_reason_mismatch ---------------------------------------------------------------------

# Where a call records its own output cap (the sampling params, by the names servers use).
CAP_KEYS = ("max_tokens", "max_new_tokens", "max_completion_tokens", "max_output_tokens")
# "Far below the cap": a `length` stop at most this share of the cap. Above it, a context window
# that filled up first is a plausible reading; below it with a stop token last, it is not.
FAR_BELOW_SHARE = 0.9


@dataclass
class CallEvidence:
    """What one model call says and what its tokens show. `output_tokens` from `usage`, else the
    sampled node's token count (`output_from` names which); `cap` from the call's sampling
    params, else (last call) `ending.evidence.last_output_token_cap`; `last_id`/`last_text`: the
    node's last token (None when no ids were recorded); `stop_last`: that token is a special
    token of the run's tokenizer or one of the call's `stop_token_ids` (None: cannot tell)."""

    call: int
    node: int | None
    reason: str
    length: bool
    stop: bool
    output_tokens: int | None
    output_from: str | None
    cap: int | None
    cap_from: str | None
    last_id: int | None
    last_text: str | None
    stop_last: bool | None

    def detail(self, rule: str) -> dict:
        return {"rule": rule, "call": self.call, "node": self.node, "finish_reason": self.reason,
                "output_tokens": self.output_tokens, "output_tokens_from": self.output_from, "cap": self.cap,
                "cap_from": self.cap_from, "last_token_id": self.last_id, "last_token": self.last_text}


def _count(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _last_call(r: Rollout) -> int | None:
    """The index of the last call with a finish reason and no error: the one whose reason is the
    ending's `last_finish_reason` (ingest/endings.py `fill_evidence`)."""
    return next((k for k in range(len(r.calls) - 1, -1, -1)
                 if r.calls[k].finish_reason and r.calls[k].error is None), None)


def call_evidence(r: Rollout, ctx: CheckContext) -> list[CallEvidence]:
    """One CallEvidence per call with a finish reason (errored calls left out), in call order."""
    return memo("call_evidence", lambda: _call_evidence(r, ctx))


def _call_evidence(r: Rollout, ctx: CheckContext) -> list[CallEvidence]:
    special = set(ctx.special_tokens.values())
    last_k = _last_call(r)
    ev = r.ending.evidence
    out = []
    for k, c in enumerate(r.calls):
        raw = c.finish_reason_raw or c.finish_reason
        if not c.finish_reason or c.error is not None:
            continue
        sampling = c.sampling or {}
        cap, cap_from = next(((_count(sampling.get(key)), f"sampling.{key}") for key in CAP_KEYS
                              if _count(sampling.get(key))), (None, None))
        if cap is None and k == last_k and _count(ev.last_output_token_cap):
            cap, cap_from = ev.last_output_token_cap, "ending.evidence.last_output_token_cap"
        node = r.nodes[c.node] if c.node is not None else None
        n, n_from = _count(c.usage.output_tokens) if c.usage else None, "usage.output_tokens"
        if n is None and node is not None and node.message.role == "assistant" and node.token_ids:
            n, n_from = len(node.token_ids), "node tokens"
        if n is None and k == last_k and _count(ev.last_output_tokens) is not None:
            n, n_from = ev.last_output_tokens, "ending.evidence.last_output_tokens"
        last_id = node.token_ids[-1] if node is not None and node.token_ids and node.token_ids[-1] >= 0 else None
        listed = sampling.get("stop_token_ids")
        stops = {t for t in listed if isinstance(t, int)} if isinstance(listed, list | tuple) else set()
        stop_last = None
        if last_id is not None and (special or stops):
            stop_last = last_id in special or last_id in stops
        out.append(CallEvidence(
            k, c.node, str(raw), c.finish_reason == "length" or str(raw).lower() in LENGTH_FINISH_REASONS,
            c.finish_reason == "stop", n, n_from if n is not None else None, cap, cap_from, last_id,
            _token_text(ctx, last_id), stop_last))
    return out


def _token_text(ctx: CheckContext, tid: int | None) -> str | None:
    if tid is None:
        return None
    named = next((t for t, i in ctx.special_tokens.items() if i == tid), None)
    if named is not None or ctx.tokenizer is None:
        return named
    try:
        return ctx.decode([tid])
    except Exception:  # noqa: BLE001 - an id the tokenizer does not know has no text; the check still decides
        return None


def length_contradicted(e: CallEvidence) -> bool:
    """`length` far below the cap while the last token is a stop or special token."""
    return bool(e.length and e.cap and e.output_tokens is not None and far_below(e.output_tokens, e.cap)
                and e.stop_last)


def far_below(output_tokens: int, cap: int) -> bool:
    """`output_tokens` at most FAR_BELOW_SHARE of `cap`, exactly for any integer (a cap of 10**400
    would overflow a float)."""
    return output_tokens <= Fraction(str(FAR_BELOW_SHARE)) * cap


def _mismatches(r: Rollout, ctx: CheckContext) -> list[tuple[CallEvidence, str]]:
    return memo("stop_reason_mismatch", lambda: [
        (e, rule) for e in call_evidence(r, ctx)
        for rule in (("length_below_cap" if length_contradicted(e) else None),
                     ("stop_at_cap" if e.stop and e.cap and e.output_tokens == e.cap and not e.stop_last else None))
        if rule])


def _corrected_on_cap(r: Rollout) -> bool:
    """silent_truncation changed the ending because the last generation reached its cap (the
    `why` ingest/endings.py `correct_silent_truncation` records for that rule)."""
    fix = r.ending.extra.get("silent_truncation") or {}
    return "reached its token cap" in str(fix.get("why", ""))


def _corrected_on_length(r: Rollout) -> bool:
    """silent_truncation changed the ending because the last finish reason said `length`."""
    ev = r.ending.evidence
    return bool(r.ending.extra.get("silent_truncation")) and \
        (ev.last_finish_reason or "").strip().lower() in LENGTH_FINISH_REASONS


@check("stop_reason_mismatch", "warning", label="stop reason contradicted")
def stop_reason_mismatch(r: Rollout, ctx: CheckContext) -> Iterator[Hit]:
    """A model call's finish reason contradicts its own tokens: `length` at most 90% of the
    call's cap (`FAR_BELOW_SHARE`) with a special or stop token last (a secondary EOS the
    trainer did not count as one, huggingface/trl#7039), or `stop` with exactly the cap's
    number of output tokens and no stop token last. Cap: the call's `sampling.max_tokens` (or
    `max_new_tokens`, ...), else the ending's `last_output_token_cap`; output tokens: `usage`,
    else the sampled node's tokens. A `stop` at the cap that `silent_truncation` already corrected
    is its finding, not this one."""
    evidence = call_evidence(r, ctx)
    if not evidence:
        raise Skip("no finish reason recorded")
    if not any(e.cap for e in evidence):
        raise Skip("no output token cap recorded (sampling max_tokens)")
    last_k = evidence[-1].call
    hits = [(e, rule) for e, rule in _mismatches(r, ctx)
            if not (rule == "stop_at_cap" and e.call == last_k and _corrected_on_cap(r))]
    undecided = [e for e in evidence if e.length and e.cap and e.output_tokens is not None
                 and far_below(e.output_tokens, e.cap) and e.stop_last is None]
    if not hits and undecided:
        raise Skip(f"call {undecided[0].call} stopped for length below its cap, but its last token cannot be "
                   "read (no token ids, or the run has no tokenizer to name it)")
    for e, rule in hits:
        last = f"{e.last_text!r} (id {e.last_id})" if e.last_text is not None else (
            f"id {e.last_id}" if e.last_id is not None else "not recorded")
        if rule == "length_below_cap":
            why = (f"stopped for length ({e.reason}) after {e.output_tokens} of {e.cap} tokens, and its last token "
                   f"{last} is a stop or special token")
        else:
            why = f"says {e.reason} but generated exactly its cap of {e.cap} tokens; last token {last}"
        if e.call == last_k and rule == "length_below_cap" and _corrected_on_length(r):
            why += f" (the ending {r.ending.type.value} rests on this finish reason)"
        at = len(r.nodes[e.node].token_ids) - 1 if e.node is not None and r.nodes[e.node].token_ids else None
        yield Hit(f"call {e.call}" + (f" (node {e.node})" if e.node is not None else "") + f": {why}",
                  e.node, at, e.detail(rule))
