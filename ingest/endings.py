"""Normalizing how a rollout ended. Rules are documented in docs/trace-format.md
(derivation) and docs/formats-<name>.md (per format).

`Ending` values: submitted, task_detected, truncated, length_cut, error, unknown
(docs/trace-format.md, "Endings"). The source's own reason is kept as `ending.detail`.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ingest.schema import Ending, EndingInfo, Rollout
from ingest.tool_markup import unparsed_call, uses_structured_calls

# THE endings table (docs/formats.md "Endings"): every reader maps the words its source writes in
# `finish_reason` / `stop_reason`, `stop_condition`, `termination_reason`, `status`,
# `incomplete_details.reason`, `exit_status` and the like through this one dict (lower-cased).
# The source's words always stay in `ending.detail`. The groups follow the domain's list of how
# the common source reasons read (docs/formats.md "Endings"): who or what ended the episode decides.
WORDS: dict[str, Ending] = {
    **{e.value: e for e in Ending},
    # the agent ended it with an answer
    "stop": Ending.submitted, "end_turn": Ending.submitted, "eos": Ending.submitted,
    "stop_sequence": Ending.submitted, "completed": Ending.submitted, "agent_completed": Ending.submitted,
    "final_answer": Ending.submitted, "no_tool_calls": Ending.submitted, "agent_stop": Ending.submitted,
    "finish": Ending.submitted, "success": Ending.submitted, "resolved": Ending.submitted,
    # the environment or a simulated user ended it (tau2 `user_stop`: the user simulator stopped the
    # conversation; gym `terminated`; rLLM `env_done`; an env's goal check)
    "user_stop": Ending.task_detected, "env_done": Ending.task_detected, "done": Ending.task_detected,
    "terminated": Ending.task_detected, "goal_reached": Ending.task_detected,
    # a budget ran out (turns, steps, context, time)
    "max_turns": Ending.truncated, "max_turns_exceeded": Ending.truncated, "max_steps": Ending.truncated,
    "max_steps_reached": Ending.truncated, "max_input_tokens": Ending.truncated,
    "max_total_tokens": Ending.truncated, "context_length": Ending.truncated,
    "max_prompt_length_exceeded": Ending.truncated, "context_length_exceeded": Ending.truncated,
    "context_length_exceeded_error": Ending.truncated, "max_context_limit_reached": Ending.truncated,
    "timeout": Ending.truncated, "time_limit": Ending.truncated, "message_limit": Ending.truncated,
    "token_limit": Ending.truncated, "agent_timed_out": Ending.truncated, "truncated": Ending.truncated,
    "incomplete": Ending.truncated,
    # one generation hit its token limit
    "length": Ending.length_cut, "max_tokens": Ending.length_cut, "max_output_tokens": Ending.length_cut,
    "max_response_length_exceeded": Ending.length_cut, "model_length": Ending.length_cut,
    # infrastructure failed: says nothing about the policy
    "error": Ending.error, "has_error": Ending.error, "crash": Ending.error, "abort": Ending.error,
    "aborted": Ending.error, "failed": Ending.error, "cancelled": Ending.error, "canceled": Ending.error,
    "too_many_errors": Ending.error, "agent_error": Ending.error, "user_error": Ending.error,
    "container_timed_out": Ending.error, "provider_error": Ending.error, "env_timeout": Ending.error,
    # agent harnesses' `exit_status`: SWE-agent `exit_<why>` (an auto-submission `submitted (exit_<why>)`
    # is read by its why), mini-swe-agent the name of the exception that ended the loop
    "exit_forfeit": Ending.submitted,
    "exit_cost": Ending.truncated, "exit_context": Ending.truncated, "exit_format": Ending.truncated,
    "exit_total_execution_time": Ending.truncated, "exit_step_limit": Ending.truncated,
    "exit_steps": Ending.truncated, "exit_max_steps": Ending.truncated,
    "limitsexceeded": Ending.truncated, "formaterror": Ending.truncated, "timeouterror": Ending.truncated,
    "executiontimeouterror": Ending.truncated,
    "exit_api": Ending.error, "exit_error": Ending.error, "exit_err": Ending.error,
    "exit_environment_error": Ending.error, "exit_environment": Ending.error, "exit_command_timeout": Ending.error,
}
# Kept names: the verifiers `stop_condition` map and the free-text reasons are the same table.
STOP_CONDITIONS = WORDS
REASONS = WORDS


def from_reason(reason: str | None, *, unlisted: Ending = Ending.unknown) -> Ending:
    """Map a source's word (any ending field) to an ending through `WORDS`. A missing word is
    `unknown`; a word not in the table is `unlisted`: `unknown` unless the format documents what
    any other word means (mini-swe-agent's `exit_status` is otherwise an exception → `error`)."""
    if not isinstance(reason, str) or not reason.strip():
        return Ending.unknown
    return WORDS.get(reason.strip().lower(), unlisted)


def first_known(words: Iterable[tuple[str | None, Any]]) -> tuple[Ending, str | None]:
    """The rule for a source with several ending fields: `words` are (detail, word) pairs in the
    order the format documents; the first word the table knows decides, and its detail is
    returned. A word the table does not know never hides a later one it knows; when none is
    known the ending is `unknown`, with the first word's detail (never guessed). Words that are
    not strings (absent fields) are skipped."""
    first: str | None = None
    for detail, word in words:
        if not isinstance(word, str) or not word.strip():
            continue
        kind = from_reason(word)
        if kind != Ending.unknown:
            return kind, detail if detail is not None else word
        first = first if first is not None else (detail if detail is not None else word)
    return Ending.unknown, first


def normalise(rollout: Rollout) -> Rollout:
    """Make a reader's rollout final, in place, and return it: the ending derived where the
    reader set none (`derive`), the evidence filled from the trace (`fill_evidence`) and a silent
    truncation corrected (`correct_silent_truncation`). Idempotent. Every reader's output goes
    through it at one place (ingest/files.py `read_records`; the OTLP receiver's traces in
    app/worker/trace_spool.py), so a notebook reading files with `ingest` sees the endings the
    dashboard stores."""
    derive(rollout)
    fill_evidence(rollout)
    correct_silent_truncation(rollout)
    return rollout


def generated_tokens(rollout: Rollout) -> int:
    """The tokens the policy generated: per sampled node, its tokens with loss mask 1, but never more than
    the model call that produced it reports (`usage.output_tokens`): pads or post-EOS tokens a
    trainer kept with mask 1 were not generated (verl-project/verl#3805, case 38; the
    `mask_on_padding` check reports them)."""
    reported: dict[int, int] = {}
    for c in rollout.calls:
        if c.node is not None and c.usage is not None and c.usage.output_tokens is not None:
            reported[c.node] = reported.get(c.node, 0) + c.usage.output_tokens
    total = 0
    for i, n in enumerate(rollout.nodes):
        if not (n.sampled or n.message.role == "assistant"):
            continue  # environment tokens with mask 1 were not generated either (mask_on_unsampled)
        trained = sum(map(bool, n.mask))
        total += min(trained, reported[i]) if i in reported and reported[i] > 0 else trained
    return total


def fill_evidence(rollout: Rollout) -> None:
    """Fill `ending.evidence` from the trace itself where the reader left it empty:
    last finish reason, output tokens sampled (mask = 1), turns (assistant messages), and the
    dialect and tool of tool-call markup left unparsed in the last assistant message when it has no
    structured call (`last_answer_unparsed_tool_call`: the final answer was a call; the
    `unparsed_tool_call` check, ingest/tool_markup.py, whose one scan of the message it shares)."""
    ev = rollout.ending.evidence
    if ev.last_finish_reason is None:
        last = next((c for c in reversed(rollout.calls) if c.error is None and c.finish_reason), None)
        if last is not None:
            ev.last_finish_reason = last.finish_reason_raw or last.finish_reason
    if ev.turns is None:
        ev.turns = sum(1 for n in rollout.nodes if n.message.role == "assistant")
    if ev.output_tokens is None and any(n.token_ids for n in rollout.nodes):
        ev.output_tokens = generated_tokens(rollout)
    if ev.last_answer_unparsed_tool_call is None and uses_structured_calls(rollout):
        last = next((n for n in reversed(rollout.nodes) if n.message.role == "assistant"), None)
        found = unparsed_call(last.message) if last is not None and not last.message.tool_calls else None
        if found is not None:
            ev.last_answer_unparsed_tool_call, ev.last_answer_unparsed_tool = found.dialect, found.tool


def derive(rollout: Rollout) -> EndingInfo:
    """The ending for a rollout whose reader did not set one: from `stop_condition`, then from
    errors, then from the last call's finish reason (`length` → length_cut). Otherwise unknown."""
    info = rollout.ending
    if info.type != Ending.unknown:
        return info
    if rollout.stop_condition:
        info.detail = info.detail or rollout.stop_condition
        info.type = from_reason(rollout.stop_condition)  # the one table, case-insensitive
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
    elif (last is not None and last.finish_reason == "stop" and rollout.nodes and last.node == len(rollout.nodes) - 1
          and not rollout.nodes[-1].message.tool_calls):
        info.type = Ending.submitted  # the trace ends with a generation that stopped by itself: an answer
        info.detail = info.detail or f"finish_reason={last.finish_reason_raw or 'stop'}"
    return settle(rollout)


def settle(rollout: Rollout) -> EndingInfo:
    """The two rules that overrule a source's stated ending, applied by every reader
    (`RolloutBuilder.finish`), from the last model call's finish reason:

    - aborted: the last generation was aborted or failed at the inference server
      (`abort`, `aborted`, `error`, `cancelled`) → `error`: it says nothing about the policy, so it
      leaves the default baseline (tests/fixtures/cases/32-finish-reason-abort.json);
    - silent truncation: the agent "submitted", but its last generation stopped for length →
      `length_cut`, by `correct_silent_truncation` (the one rule, which records the source's claim
      so the `silent_truncation` check reports it; verifiers data was corrected silently before).

    The source's words stay in `detail`; the raw finish reason is in the evidence."""
    info = rollout.ending
    last = next((c for c in reversed(rollout.calls) if c.finish_reason), None)
    if last is None:
        return info
    raw = last.finish_reason_raw or last.finish_reason
    if last.finish_reason == "error" and info.type != Ending.error:
        was = info.type
        info.type = Ending.error
        info.detail = info.detail or f"finish_reason={raw}"
        info.message = (f"the last generation ended with finish reason {raw!r} (aborted by the inference "
                        f"server): an infrastructure error" + (f", not {was.value}" if was != Ending.unknown else ""))
    if info.evidence.last_finish_reason is None:
        info.evidence.last_finish_reason = raw
    return correct_silent_truncation(rollout)  # one rule, recorded for the `silent_truncation` check


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
    `silent_truncation` check reports it (docs/trace-format.md, "Endings")."""
    info = rollout.ending
    if info.type not in (Ending.submitted, Ending.task_detected) or "silent_truncation" in info.extra:
        return info
    ev = info.evidence
    why = truthful = None
    last = (ev.last_finish_reason or "").strip().lower()
    if last in LENGTH_FINISH_REASONS:
        truthful, why = Ending.length_cut, ("the last generation stopped for length "
                                            f"(finish reason {ev.last_finish_reason!r})")
    elif (ev.last_output_tokens is not None and ev.last_output_token_cap
          and ev.last_output_tokens >= ev.last_output_token_cap):
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
