"""Every real file the readers on this branch read (tests/fixtures/realdata, a copy of
tests/fixtures/realdata) goes through all checks, rollout and group scope, and what fires is asserted.

The expectations were reviewed one by one: tau-bench reuses a tool-call id; Tunix tokenizes the
final tool result of an episode cut at its step or context budget (nothing follows it); Tunix's
TIMEOUT/ENV_TIMEOUT episodes end on a call whose result never came; a Tunix Trajectory without a
tokenizer has short per-token arrays; Tunix Token mode without sampler logprobs pads them with 0.0.
A clean Tunix SUCCEEDED rollout fires nothing.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from ingest.checks import groups_from_rollouts, run_group_checks, run_rollout_checks
from ingest.errors import RecordError
from ingest.files import read_records, walk
from ingest.formats.base import ReadContext
from ingest.formats.registry import detect
from ingest.source import open_source
from tests.conftest import FIXTURES

REALDATA = FIXTURES / "realdata"
TUNIX = "tunix/v0.1.7/"
_MODES = ("Conversation", "Steps", "Token", "Trajectory")


def _tunix(case: str, **by_mode: dict) -> dict[str, dict]:
    return {f"{TUNIX}{case}.{mode}.json": by_mode.get(mode, {}) for mode in _MODES}


CUT = {"terminal_env_tokenized": 1}  # Conversation mode has no tokens: nothing to tokenize
UNANSWERED = {"unanswered_tool_call": 1}
EXPECTED: dict[str, dict[str, int]] = {
    "tau-bench/gpt-4o-airline.sample.json": {"duplicate_tool_call_id": 2},
    "mini-swe-agent/github_issue.traj.json": {},
    # Inspect's tool-error log holds eleven tool results whose assistant turns were not logged
    "inspect_ai/log_tool_call_error.json": {"unpaired_tool_result": 11},
    "inspect_ai/log_read_sample.eval": {},
    # SWE-agent 1.x reuses call ids across turns (three ids, each used by more than one call)
    "swe-agent/marshmallow-code__marshmallow-1867.function_calling_replace.traj": {"duplicate_tool_call_id": 3},
    "swe-agent/pydicom__pydicom-1458.traj": {},  # the final `submit` ended the run: no result expected
    "openhands/basic.json": {},  # `finish` ended the run: no observation expected
    # trackio 0.43.0's own files: the project database, its static export, an inbox fragment; the
    # Hub viewer's session file is claimed and skipped. rl-edge.db's failed generation has no text.
    "trackio/v0.43.0/rl-project.db": {},
    "trackio/v0.43.0/rl-edge.db": {"empty_response": 1},
    "trackio/v0.43.0/static/aux/traces.parquet": {},
    "trackio/v0.43.0/static/metrics.parquet": {},
    "trackio/v0.43.0/inbox/1817af54259445e8/00000000.jsonl": {},
    "trackio/v0.43.0/traces/rl-project/grpo-run/9c860b5673f54e95928ffa283bdd57ce-c59c4a7112b842df8d45f049690a8030"
    "-rollouts-2.jsonl": {},
    **_tunix("submitted"), **_tunix("submitted_gamma09_final_bonus"), **_tunix("single_turn"),
    **_tunix("timeout"), **_tunix("max_steps_env_truncated"),
    **_tunix("no_tokenizer", Trajectory={"array_len_mismatch": 2}),
    **_tunix("submitted_no_rollout_prompt_or_logprobs", Token={"suspected_logprob_padding": 2}),
    **_tunix("env_timeout", **{m: UNANSWERED for m in _MODES}),
    **_tunix("timeout_via_slow_model", **{m: UNANSWERED for m in _MODES}),
    **_tunix("max_context_limit", Steps=CUT, Token=CUT, Trajectory=CUT),
    **_tunix("max_steps_reached", Steps=CUT, Token=CUT, Trajectory=CUT),
    # Token mode with the overlong filter on records the zeroed sequence without the final result
    **_tunix("max_steps_reached_overlong_filter", Steps=CUT, Trajectory=CUT),
    f"{TUNIX}orchestrator_group.Token.json": {},
    f"{TUNIX}orchestrator_group.Trajectory.json": {},
    f"{TUNIX}trajectory_log_orchestrator_group.csv": {},
    # verifiers' scripted model (and the ATIF files Harbor wrote from the same runs) names every
    # call `call_0`: the id is reused across turns, as tau-bench does. The max_turns episode stops
    # on a call whose result never came.
    "atif/max_turns.part1.trajectory.json": {"duplicate_tool_call_id": 1, "unanswered_tool_call": 1},
    "atif/max_turns.part2.trajectory.json": {},
    "atif/multi_tool.trajectory.json": {"duplicate_tool_call_id": 1},
    "atif/tunix_sample_atif_v1_7.json": {},
    "verifiers/eval_multi_tool.jsonl": {},
    "verifiers/run_dir/train_group/traces.jsonl": {"duplicate_tool_call_id": 1},
    "verifiers/train_group.jsonl": {"duplicate_tool_call_id": 1},
    "verifiers/train_group_with_advantages.jsonl": {"duplicate_tool_call_id": 1},
    "verifiers/train_max_turns.jsonl": {"duplicate_tool_call_id": 1, "unanswered_tool_call": 1},
    "verifiers/train_multi_tool.jsonl": {"duplicate_tool_call_id": 1},
    # the rubiks group's mask trains the last environment message (its role header token reads
    # `environment`), not the agent's turn; split at the template's turn marker, that shows (issue 19)
    "atropos/rubiks_process_results_32.line1.jsonl": {"mask_on_unsampled": 4, "sampled_mask_zero": 4,
                                                      "terminal_env_tokenized": 4},
    "nemo-gym/anyterminal_agent_hermes.first2.jsonl": {},
    "nemo-gym/competitive_coding_challenges.first2.jsonl": {},
    "nemo-gym/example_multi_step.first1.jsonl": {},
    "nemo-gym/grl_sokoban.first2.jsonl": {},
    # NeMo Gym's quirk: the final function_call has no output
    "nemo-gym/mini_swe_agent_2.first1.jsonl": {"unanswered_tool_call": 1},
}
# Group-scope findings; every other file's groups are well-formed and carry a learning signal.
GROUP_EXPECTED: dict[str, dict[str, int]] = {
    # both sampled solutions of the task scored the same: no learning signal under GRPO
    "nemo-gym/competitive_coding_challenges.first2.jsonl": {"zero_variance_group": 1},
}


def _check_file(path: Path) -> tuple[Counter, Counter, Counter]:
    """(rollout findings, group findings, group skips) per kind over every record of a file."""
    source = open_source(path)
    reader = detect(source)
    assert reader is not None, f"{path}: no reader"
    own, grouped, skipped = Counter(), Counter(), Counter()
    items = []
    for item in read_records(reader, source, ReadContext(), []):
        assert not isinstance(item, RecordError), item  # final: its ending normalised by read_records
        own.update(f.kind for f in run_rollout_checks(item).findings)
        items.append(item)
    for g in groups_from_rollouts(items).values():
        res = run_group_checks(g)
        grouped.update(f.kind for f in res.findings)
        skipped.update(s.kind for s in res.skipped)
    return own, grouped, skipped


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_file_fires_what_it_should(name):
    own, grouped, skipped = _check_file(REALDATA / name)
    assert dict(own) == EXPECTED[name]
    assert dict(grouped) == GROUP_EXPECTED.get(name, {})
    # none of these sources records advantages: the advantage checks say so
    assert set(skipped) <= {"advantage_mismatch", "errored_reward_in_baseline", "zero_variance_group"}


def test_every_real_file_a_reader_reads_has_an_expectation():
    """A new reader that reads another real file adds that file's expected findings above."""
    read = []
    for path, _ in walk([REALDATA]):
        try:
            reader = detect(open_source(path))
        except RecordError:
            continue
        if reader is not None:
            read.append(str(path.relative_to(REALDATA)))
    assert sorted(set(read) - set(EXPECTED)) == [], "add the findings these files fire to EXPECTED"
