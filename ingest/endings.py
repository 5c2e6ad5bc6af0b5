"""Normalizing how a rollout ended. Rules are documented in docs/trace-format.md
(derivation) and docs/formats-<name>.md (per format).

`Ending` values: submitted, task_detected, truncated, length_cut, error, unknown
(../shared/domain.md). The source's own reason is kept as `ending.detail`.
"""
from __future__ import annotations

from ingest.schema import Ending, EndingInfo, Rollout

# verifiers `stop_condition` → ending. verifiers' own `is_truncated` set: max_turns,
# max_input_tokens, max_output_tokens, max_total_tokens, context_length; `record_error` sets "error".
STOP_CONDITIONS: dict[str, Ending] = {
    "max_turns": Ending.truncated,
    "max_input_tokens": Ending.truncated,
    "max_total_tokens": Ending.truncated,
    "context_length": Ending.truncated,
    "max_output_tokens": Ending.length_cut,
    "timeout": Ending.truncated,
    "error": Ending.error,
    "has_error": Ending.error,
    "submitted": Ending.submitted,
    "final_answer": Ending.submitted,
    "no_tool_calls": Ending.submitted,
    "completed": Ending.submitted,
    "env_done": Ending.task_detected,
    "done": Ending.task_detected,
}

# Free-text reasons seen in chat-shaped inputs (`ending: {"reason": ...}`), lower-cased.
REASONS: dict[str, Ending] = {
    **{e.value: e for e in Ending},
    "stop": Ending.submitted,
    "length": Ending.length_cut,
    "max_output_tokens": Ending.length_cut,
    "max_tokens": Ending.length_cut,
    "max_turns": Ending.truncated,
    "max_steps": Ending.truncated,
    "timeout": Ending.truncated,
    "truncated": Ending.truncated,
    "user_stop": Ending.submitted,
    "agent_stop": Ending.submitted,
    "env_done": Ending.task_detected,
    "error": Ending.error,
    "crash": Ending.error,
}


def from_reason(reason: str | None) -> Ending:
    """Map a free-text reason to an ending; `unknown` when no documented rule decides."""
    if not reason:
        return Ending.unknown
    return REASONS.get(reason.strip().lower(), Ending.unknown)


def fill_evidence(rollout: Rollout) -> None:
    """Fill `ending.evidence` from the trace itself where the reader left it empty:
    last finish reason, output tokens sampled (mask = 1) and turns (assistant messages)."""
    ev = rollout.ending.evidence
    if ev.last_finish_reason is None:
        last = next((c for c in reversed(rollout.calls) if c.error is None and c.finish_reason), None)
        if last is not None:
            ev.last_finish_reason = last.finish_reason_raw or last.finish_reason
    if ev.turns is None:
        ev.turns = sum(1 for n in rollout.nodes if n.message.role == "assistant")
    if ev.output_tokens is None and any(n.token_ids for n in rollout.nodes):
        ev.output_tokens = sum(sum(1 for m in n.mask if m) for n in rollout.nodes)


def derive(rollout: Rollout) -> EndingInfo:
    """The ending for a rollout whose reader did not set one: from `stop_condition`, then from
    errors, then from the last call's finish reason (`length` → length_cut). Otherwise unknown."""
    info = rollout.ending
    if info.type != Ending.unknown:
        return info
    if rollout.stop_condition:
        info.detail = info.detail or rollout.stop_condition
        info.type = STOP_CONDITIONS.get(rollout.stop_condition, Ending.unknown)
        return info
    if rollout.errors:
        info.type = Ending.error
        info.detail = info.detail or rollout.errors[-1].type
        info.message = info.message or rollout.errors[-1].message
        return info
    last = next((c for c in reversed(rollout.calls) if c.finish_reason), None)
    if last is not None and last.finish_reason == "length":
        info.type = Ending.length_cut
        info.detail = info.detail or "finish_reason=length"
    return info


# The last generation stopped for its token limit (finish reasons as readers record them).
LENGTH_FINISH_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "max_completion_tokens"})


def correct_silent_truncation(rollout: Rollout) -> EndingInfo:
    """A source that claims the episode completed (`submitted`/`task_detected`: verifiers
    `agent_completed`, Tunix `SUCCEEDED`, SWE-agent `submitted`) while its own evidence says it
    was cut off gets the truthful ending, in place (idempotent):

    - the last generation stopped for length (`last_finish_reason` in LENGTH_FINISH_REASONS) or
      reached its cap (`last_output_tokens >= last_output_token_cap`) → `length_cut`;
    - the rollout's sampled tokens reached their budget (`output_tokens >= output_token_cap`) →
      `truncated`;
    - the environment ended the episode at its step limit (`turns >= max_turns`) right after a
      tool call, not an answer → `truncated`.

    The source's claim is kept: `ending.detail` stays the source's own reason and
    `ending.extra["silent_truncation"]` records the claimed type and why it was corrected; the
    `silent_truncation` check reports it (../shared/domain.md, "Endings")."""
    info = rollout.ending
    if info.type not in (Ending.submitted, Ending.task_detected) or "silent_truncation" in info.extra:
        return info
    ev = info.evidence
    why = truthful = None
    last = (ev.last_finish_reason or "").strip().lower()
    if last in LENGTH_FINISH_REASONS:
        truthful, why = Ending.length_cut, f"the last generation stopped for length (finish reason {ev.last_finish_reason!r})"
    elif ev.last_output_tokens is not None and ev.last_output_token_cap and ev.last_output_tokens >= ev.last_output_token_cap:
        truthful, why = Ending.length_cut, (f"the last generation reached its token cap ({ev.last_output_tokens} of "
                                            f"{ev.last_output_token_cap} tokens)")
    elif ev.output_tokens is not None and ev.output_token_cap and ev.output_tokens >= ev.output_token_cap:
        truthful, why = Ending.truncated, (f"the rollout's sampled tokens reached their budget ({ev.output_tokens} of "
                                           f"{ev.output_token_cap})")
    elif ev.max_turns and ev.turns is not None and ev.turns >= ev.max_turns and _ends_on_tool_call(rollout):
        truthful, why = Ending.truncated, (f"the environment ended the episode at its step limit ({ev.turns} of "
                                           f"{ev.max_turns} turns) after a tool call, not an answer")
    if truthful is None:
        return info
    info.extra["silent_truncation"] = {"claimed": info.type.value, "claimed_message": info.message, "why": why}
    info.type = truthful
    info.message = f"the source says {info.detail or info.extra['silent_truncation']['claimed']}, but {why}"
    return info


def _ends_on_tool_call(rollout: Rollout) -> bool:
    """The last model turn called a tool (or the trace ends on a tool result)."""
    for node in reversed(rollout.nodes):
        if node.message.role == "tool":
            return True
        if node.message.role == "assistant":
            return bool(node.message.tool_calls)
    return False
