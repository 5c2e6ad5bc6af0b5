"""Trace checks, run at ingest: a declared registry (ingest/checks/registry.py), one module per
family. Each check reads the native model and returns findings; a finding never changes the data
(nothing is "repaired"), except `silent_truncation`, which documents the ending it corrects.

Families: `arrays` (per-token arrays), `mask` (loss mask), `sequence` (tokens across turns),
`template` (ids vs the chat template), `tools` (tool calls), `messages` (turn contents), `endings`,
`rewards`, `groups` (group scope), `timing` (model and tool call spans). Kinds, rules and sources:
docs/checks.md.
"""
from __future__ import annotations

# Registration order is the order findings are listed in: not alphabetical, so not sorted.
# isort: off
from ingest.checks import arrays, mask, sequence, template, tools, messages, endings, rewards, groups  # noqa: F401
from ingest.checks import shift, vocab  # noqa: F401  (logprob_shift; token_out_of_vocab, duplicate_bos)
from ingest.checks import timing  # noqa: F401  (after messages: timing_incomplete)
# isort: on
from ingest.checks.context import EMPTY, CheckContext
from ingest.checks.groups import (
    Group,
    GroupMember,
    Sibling,
    groups_from_rollouts,
    link_siblings,
    prompt_key,
    prompt_text,
)
from ingest.checks.registry import (
    REGISTRY,
    SKIPPED,
    Check,
    CheckResults,
    FindingData,
    Hit,
    Skip,
    check,
    kinds,
    label,
    version,
)

# Kinds stored under an older name: one `<array>_len_mismatch` per array before the registry
# (migration 0003 renames them to `array_len_mismatch` with `detail.array`), and
# `tool_call_markup_unparsed` before issue 20 fixed the name `unparsed_tool_call` (migration 0014).
RENAMED_KINDS = {"tool_call_markup_unparsed": "unparsed_tool_call"}


def legacy_kind(kind: str) -> str:
    """The registered kind for a kind stored under an older name (`logprob_len_mismatch`,
    `mask_len_mismatch`, ... → `array_len_mismatch`; `tool_call_markup_unparsed` →
    `unparsed_tool_call`); other kinds unchanged. Pages and the `flag` filter read through it, so
    an old link keeps working."""
    if kind in RENAMED_KINDS:
        return RENAMED_KINDS[kind]
    return "array_len_mismatch" if kind.endswith("_len_mismatch") else kind


def run_rollout_checks(rollout, ctx: CheckContext | None = None) -> CheckResults:
    """Every rollout-scope check on one native rollout (`ingest.schema.Rollout`), in registry
    order: findings and skipped outcomes."""
    from ingest.checks.registry import run

    return run("rollout", rollout, ctx or EMPTY)


def run_group_checks(group: Group, ctx: CheckContext | None = None) -> CheckResults:
    """Every group-scope check on one group."""
    from ingest.checks.registry import run

    return run("group", group, ctx or EMPTY)


__all__ = ["REGISTRY", "SKIPPED", "Check", "CheckContext", "CheckResults", "FindingData", "Group", "GroupMember",
           "Hit", "legacy_kind", "Skip", "check", "kinds", "label", "run_group_checks", "run_rollout_checks",
           "Sibling", "groups_from_rollouts", "link_siblings", "prompt_key", "prompt_text", "version"]
