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
