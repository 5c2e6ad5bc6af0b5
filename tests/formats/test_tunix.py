"""The Tunix reader against real google-tunix 0.1.7 output (tests/fixtures/realdata/tunix/v0.1.7).

Every trace file is sniffed and read without RecordError, and what it yields is compared with
the generator's own summary.json: ending per status (docs/formats-tunix.md), trajectory reward,
assistant turns, per-turn rewards and mc_returns, Token-mode token counts, and the
orchestrator / CSV grouping. Reader-only: no database.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ingest.errors import RecordError
from ingest.formats import tunix
from ingest.formats.base import ReadContext
from ingest.graph import branches
from ingest.schema import Ending, Rollout
from ingest.source import open_source
from tests.conftest import data_path

DATA = data_path("realdata", "tunix", "v0.1.7")

SUMMARY = json.loads((DATA / "summary.json").read_text()) if DATA.is_dir() else {"cases": []}
CASES = {c["file"]: c for c in SUMMARY["cases"]}
NOT_TRACES = {"summary.json"}
TRACE_FILES = sorted(p.name for p in DATA.iterdir()
                     if p.name not in NOT_TRACES and not p.name.endswith(".meta.json")) if DATA.is_dir() else []
META_FILES = sorted(p.name for p in DATA.iterdir() if p.name.endswith(".meta.json")) if DATA.is_dir() else []

# The documented ending table, for files that carry a status. SUCCEEDED depends on the last turn.
STATUS_ENDING = {
    "MAX_STEPS_REACHED": Ending.truncated,
    "MAX_CONTEXT_LIMIT_REACHED": Ending.truncated,
    "TIMEOUT": Ending.truncated,
    "ENV_TIMEOUT": Ending.error,
}
SUCCEEDED_ENDING = {  # case → ending for SUCCEEDED
    "submitted": Ending.submitted,
    "submitted_gamma09_final_bonus": Ending.submitted,
    "submitted_no_rollout_prompt_or_logprobs": Ending.submitted,
    "no_tokenizer": Ending.submitted,
    "single_turn": Ending.submitted,
    "max_steps_env_truncated": Ending.truncated,
}


def read_all(name: str, ctx: ReadContext | None = None) -> list[Rollout | RecordError]:
    return list(tunix.read(open_source(DATA / name), ctx or ReadContext()))


def read_ok(name: str) -> list[Rollout]:
    out = read_all(name)
    errors = [r for r in out if isinstance(r, RecordError)]
    assert not errors, [str(e) for e in errors]
    return out  # type: ignore[return-value]


def one(name: str) -> Rollout:
    rollouts = read_ok(name)
    assert len(rollouts) == 1
    return rollouts[0]


def assistants(r: Rollout):
    return [n for n in r.nodes if n.message.role == "assistant"]


def branch_tokens(r: Rollout) -> list[int]:
    paths = branches(r.nodes)
    assert len(paths) == 1, "Tunix traces are one linear branch"
    return [t for i in paths[0] for t in r.nodes[i].token_ids]


def raw(name: str):
    return json.loads((DATA / name).read_text())


# --- detection ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", TRACE_FILES)
def test_every_trace_file_is_sniffed_and_read(name):
    assert tunix.sniff(open_source(DATA / name))
    rollouts = read_ok(name)
    assert rollouts
    for r in rollouts:
        assert r.source["format"] == "tunix"
        assert r.run.id == DATA.name
        assert r.ending.type in set(Ending)


@pytest.mark.parametrize("name", META_FILES + ["summary.json"])
def test_meta_and_summary_are_not_claimed(name):
    assert not tunix.sniff(open_source(DATA / name))


def test_generic_chat_list_is_left_to_the_chat_reader(tmp_path):
    p = tmp_path / "chat.json"
    p.write_text(json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]))
    assert not tunix.sniff(open_source(p))


def test_detection_is_by_content_not_name(tmp_path):
    p = tmp_path / "whatever.json"
    p.write_text((DATA / "submitted.Token.json").read_text())
    assert tunix.sniff(open_source(p))
    (r,) = tunix.read(open_source(p), ReadContext())
    assert isinstance(r, Rollout) and r.source["mode"] == "Token"


# --- per case against summary.json ----------------------------------------------------------

@pytest.mark.parametrize("case", SUMMARY["cases"], ids=lambda c: c["file"])
def test_case_matches_summary(case):
    r = one(case["file"])
    mode = case["mode"]
    assert r.source["mode"] == mode
    assert r.id == Path(case["file"]).stem

    # ending
    if mode == "Conversation":
        assert r.ending.type == Ending.unknown and r.reward is None
    elif mode == "Steps":
        # no status: only a not-done last turn decides (the engine stopped on a budget)
        last_done = raw(case["file"])[-1]["done"]
        assert r.ending.type == (Ending.unknown if last_done else Ending.truncated)
        assert r.ending.detail is None
    else:
        status = case["status"]
        want = SUCCEEDED_ENDING[case["case"]] if status == "SUCCEEDED" else STATUS_ENDING[status]
        assert r.ending.type == want
        assert r.ending.detail == status
        assert r.extra["status"] == status

    # reward (Steps: the engine's own definition, the undiscounted sum of turn rewards)
    if mode != "Conversation":
        assert r.reward == pytest.approx(case["trajectory_reward"])

    # turns
    assert len(assistants(r)) == case["n_steps"]
    assert r.ending.evidence.turns == case["n_steps"]
    assert len(r.calls) == case["n_steps"]
    assert all(r.nodes[c.node].message.role == "assistant" and r.nodes[c.node].sampled for c in r.calls)

    # per-turn rewards and returns, on the assistant node of each turn
    if mode in ("Trajectory", "Steps"):
        nodes = assistants(r)
        assert [n.reward for n in nodes] == pytest.approx(case["step_rewards"])
        assert [n.mc_return for n in nodes] == pytest.approx(case["mc_returns"])
        assert r.extra["turn_rewards"] == pytest.approx(case["step_rewards"])
        assert r.extra["mc_returns"] == pytest.approx(case["mc_returns"])
        assert r.metrics["mc_return"] == pytest.approx(case["mc_returns"][0])

    if mode == "Token":
        d = raw(case["file"])
        assert sum(sum(n.mask) for n in r.nodes) == case["n_mask_ones"]
        prompt_node = next(n for n in r.nodes if "left_padding" in n.extra)
        conversation = sum(len(n.token_ids) for n in r.nodes) - len(prompt_node.token_ids)
        assert conversation == case["n_conversation_tokens"]
        assert len(prompt_node.token_ids) + prompt_node.extra["left_padding"] == case["n_prompt_tokens"]
        # the branch is exactly (prompt without padding) + conversation tokens
        pad = prompt_node.extra["left_padding"]
        assert branch_tokens(r) == d["prompt_tokens"][pad:] + d["conversation_tokens"]
        assert r.task is not None and r.task.key == d["original_input"]["id"]
        assert r.policy is not None and r.policy.start == d["policy_version"]


@pytest.mark.parametrize("name", [f for f in TRACE_FILES if f.endswith(".Trajectory.json")
                                  and not f.startswith("orchestrator")])
def test_trajectory_tokens_follow_the_steps(name):
    r = one(name)
    d = raw(name)
    prompt_node = next(n for n in r.nodes if "left_padding" in n.extra)
    pad = prompt_node.extra["left_padding"]
    want = list(d["prompt_tokens"][pad:])
    for s in d["steps"]:
        want += (s["assistant_tokens"] or []) + (s["env_tokens"] or [])
    assert branch_tokens(r) == want
    assert r.task.key == d["task"]["id"] and r.task.data == d["task"]
    # env tokens never train
    assert not any(any(n.mask) for n in r.nodes if not n.sampled)


# --- specific behaviours ----------------------------------------------------------------------

def test_left_padding_is_stripped_and_counted():
    r = one("submitted.Trajectory.json")
    node = r.nodes[1]
    assert node.message.role == "user" and node.extra["left_padding"] == 211
    assert node.token_ids[0] != 32000 and len(node.token_ids) == 1024 - 211
    assert not any(node.mask)
    # a prompt without padding keeps every token
    r = one("submitted_no_rollout_prompt_or_logprobs.Trajectory.json")
    assert r.nodes[1].extra["left_padding"] == 0 and len(r.nodes[1].token_ids) == 423


def test_finish_is_the_final_answer_not_a_tool_call():
    r = one("submitted.Trajectory.json")
    first, last = assistants(r)
    assert [c.name for c in first.message.tool_calls] == ["calculator"]
    assert first.message.tool_calls[0].arguments == '{"a": 17, "b": 25, "op": "*"}'
    assert last.message.tool_calls is None
    tool = r.nodes[r.nodes.index(first) + 1]
    assert tool.message.role == "tool" and tool.message.tool_call_id == first.message.tool_calls[0].id
    assert len(tool.token_ids) == 16 and not any(tool.mask)
    assert r.ending.type == Ending.submitted


def test_env_truncated_itself_is_truncated_with_the_raw_status():
    r = one("max_steps_env_truncated.Trajectory.json")
    assert r.ending.type == Ending.truncated and r.ending.detail == "SUCCEEDED"
    assert "truncated itself" in r.ending.message
    # the terminal observation comes from `observation` and is not tokenized
    last = r.nodes[-1]
    assert last.message.role == "tool" and last.token_ids == [] and last.message.extra["content_from"] == "observation"


def test_env_timeout_turn_has_no_tokens_and_an_unanswered_call():
    r = one("env_timeout.Trajectory.json")
    assert r.ending.type == Ending.error and r.ending.detail == "ENV_TIMEOUT"
    last = r.nodes[-1]
    assert last.message.role == "assistant" and last.token_ids == []
    assert [c.name for c in last.message.tool_calls] == ["slow_lookup"]
    assert r.ending.evidence.output_tokens is None  # the hung turn's tokens were never recorded


def test_single_turn_action_string_is_submitted():
    r = one("single_turn.Trajectory.json")
    assert r.ending.type == Ending.submitted and "single-turn" in r.ending.message
    (a,) = assistants(r)
    assert a.message.tool_calls is None and len(a.token_ids) == 16 and all(a.mask)


def test_logprobs_without_tokens_are_recorded_not_dropped():
    r = one("no_tokenizer.Trajectory.json")
    first = assistants(r)[0]
    assert first.token_ids == [] and first.extra["source_lengths"]["logprobs"] == 55
    assert len(first.extra["overflow"]["logprobs"]) == 55


def test_token_mode_split_by_mask_runs():
    r = one("submitted.Token.json")
    d = raw("submitted.Token.json")
    a1, a2 = assistants(r)
    assert (len(a1.token_ids), len(a2.token_ids)) == (55, 19)
    tool = r.nodes[r.nodes.index(a1) + 1]
    assert tool.message.role == "tool" and len(tool.token_ids) == 16
    # old_logprobs kept as given at every position, env positions included
    lps = [x for n in r.nodes for x in n.logprobs]
    assert lps == pytest.approx(d["old_logprobs"])
    assert "token_span" not in a1.extra
    # tool calls recovered from the text, paired with the tool message that answers them
    assert a1.message.tool_calls[0].id == tool.message.tool_call_id
    assert a1.extra["tool_calls_from"] == "text"


def test_token_mode_terminal_env_message_is_untokenized():
    r = one("max_steps_env_truncated.Token.json")
    assert r.nodes[-1].message.role == "tool" and r.nodes[-1].token_ids == []
    r = one("env_timeout.Token.json")
    assert r.nodes[-1].message.role == "assistant" and r.nodes[-1].token_ids == []
    assert r.ending.type == Ending.error


def test_overlong_filtered_token_rollout_is_unsplit_and_marked():
    r = one("max_steps_reached_overlong_filter.Token.json")
    d = raw("max_steps_reached_overlong_filter.Token.json")
    assert r.extra["overlong_filtered"] is True
    first = assistants(r)[0]
    assert first.extra["token_span"] == "unsplit"
    assert first.token_ids == d["conversation_tokens"] and not any(first.mask)
    assert first.logprobs == pytest.approx(d["old_logprobs"])
    assert all(n.token_ids == [] for n in r.nodes[r.nodes.index(first) + 1:])
    assert r.ending.type == Ending.truncated
    # the unfiltered twin is split and not marked
    assert "overlong_filtered" not in one("max_steps_reached.Token.json").extra


def test_empty_token_dict():
    r = one("no_tokenizer.Token.json")
    assert all(n.token_ids == [] for n in assistants(r))
    assert not any("token_span" in n.extra for n in r.nodes)
    assert "overlong_filtered" not in r.extra


def test_steps_mode_has_no_prompt_and_text_tool_calls():
    r = one("submitted.Steps.json")
    assert r.nodes[0].message.role == "assistant" and r.nodes[0].parent is None
    call = r.nodes[0].message.tool_calls[0]
    assert call.name == "calculator" and call.id == r.nodes[1].message.tool_call_id
    assert r.extra["reward_from"] == "sum of turn rewards"


def test_conversation_mode():
    r = one("submitted.Conversation.json")
    assert [n.message.role for n in r.nodes] == ["system", "user", "assistant", "tool", "assistant"]
    assert r.reward is None and r.ending.type == Ending.unknown
    assert all(n.token_ids == [] for n in r.nodes)


def test_ids_are_stable_across_reads():
    # derived from the file's name and the record's place in it, never from the read itself
    expected = {
        "orchestrator_group.Token.json": [f"orchestrator_group.Token#{g}.{i}" for g in (0, 1) for i in (0, 1, 2)],
        "trajectory_log_orchestrator_group.csv": [f"trajectory_log_orchestrator_group#{i}" for i in range(6)],
        "submitted.Token.json": ["submitted.Token"],
    }
    for name, ids in expected.items():
        first = [r.id for r in read_ok(name)]
        assert first == ids and [r.id for r in read_ok(name)] == first


def test_run_and_step_from_context():
    (r,) = read_all("submitted.Token.json", ReadContext(run_id="run-a", step=12))
    assert r.run.id == "run-a" and r.step == 12
    # orchestrator output does not carry the learner's step: left None
    assert all(r.step is None for r in read_all("orchestrator_group.Token.json", ReadContext(step=12)))


# --- orchestrator and CSV -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["orchestrator_group.Token.json", "orchestrator_group.Trajectory.json"])
def test_orchestrator_groups(name):
    rollouts = read_ok(name)
    doc = raw(name)
    assert len(rollouts) == 6
    assert sorted({r.group.id for r in rollouts}) == ["6", "7"]
    for b, batch in enumerate(doc):
        for i, item in enumerate(batch):
            r = rollouts[b * 3 + i]
            assert r.id == f"{Path(name).stem}#{b}.{i}"
            assert r.group.id == str(item["group_id"]) and r.group.index == item["pair_index"]
            assert r.group.size == len(batch) == 3
            traj = item["traj"]
            assert r.reward == traj.get("trajectory_reward", traj.get("reward"))
            assert r.step is None
    assert {r.group.index for r in rollouts if r.group.id == "6"} == {0, 1, 2}
    if "Token" in name:
        assert all(r.policy.start == 3 and all(c.policy_version == 3 for c in r.calls) for r in rollouts)
    else:
        # Trajectory-mode items carry no policy version (it is stamped on env.task, not the Trajectory)
        assert all(r.policy is None for r in rollouts)


def test_csv_log_matches_the_orchestrator_token_output():
    rows = read_ok("trajectory_log_orchestrator_group.csv")
    items = read_ok("orchestrator_group.Token.json")
    assert len(rows) == 6
    assert [(r.group.id, r.reward) for r in rows] == [(i.group.id, i.reward) for i in items]
    assert [branch_tokens(r) for r in rows] == [branch_tokens(i) for i in items]
    # the CSV keeps no pair_index: the index is the order of appearance within the group
    assert [r.group.index for r in rows] == [0, 1, 2, 0, 1, 2]
    assert all(r.group.size == 3 and r.policy.start == 3 for r in rows)
    assert all(r.ending.type == Ending.submitted for r in rows)
    # rows span many physical lines (cells hold newlines); each names the line it starts on
    assert rows[0].source["line"] < rows[1].source["line"] < rows[2].source["line"]


def test_csv_cells_are_literals_never_code(tmp_path):
    src = (DATA / "trajectory_log_orchestrator_group.csv").read_text()
    header, _, rest = src.partition("\n")
    bad = header + "\n" + rest.replace("[1, 1", "__import__('os')", 1)  # first row's conversation_masks
    p = tmp_path / "log.csv"
    p.write_text(bad)
    out = list(tunix.read(open_source(p), ReadContext()))
    errors = [r for r in out if isinstance(r, RecordError)]
    assert len(errors) == 1 and errors[0].field == "conversation_masks"
    assert len(out) == 6


# --- malformed input -------------------------------------------------------------------------

def test_malformed_tokens_name_the_field(tmp_path):
    d = raw("submitted.Trajectory.json")
    d["steps"][1]["assistant_tokens"][3] = "x"
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    (err,) = tunix.read(open_source(p), ReadContext())
    assert isinstance(err, RecordError) and err.field == "steps[1].assistant_tokens[3]"


def test_logprob_length_mismatch_is_recorded(tmp_path):
    d = raw("submitted.Trajectory.json")
    d["steps"][0]["logprobs"] = d["steps"][0]["logprobs"][:-2]
    p = tmp_path / "short.json"
    p.write_text(json.dumps(d))
    (r,) = tunix.read(open_source(p), ReadContext())
    a = assistants(r)[0]
    assert a.extra["source_lengths"]["logprobs"] == 53 and a.logprobs[-2:] == [None, None]
    assert not any(x is not None and math.isnan(x) for x in a.logprobs)


def test_orchestrator_item_error_names_its_path(tmp_path):
    doc = raw("orchestrator_group.Token.json")
    doc[1][2]["traj"]["conversation_masks"] = "oops"
    p = tmp_path / "orch.json"
    p.write_text(json.dumps(doc))
    out = list(tunix.read(open_source(p), ReadContext()))
    errors = [r for r in out if isinstance(r, RecordError)]
    assert len(out) == 6 and len(errors) == 1
    assert errors[0].field == "$[1][2].traj.conversation_masks"


def test_parser_appended_end_tokens_stay_with_the_final_assistant(tmp_path):
    """Mask 0 over end-of-turn tokens the chat parser appended: a trailing 0-run with no
    observation after it belongs to the last assistant message."""
    d = raw("submitted.Token.json")
    d["conversation_tokens"] = d["conversation_tokens"] + [32002]
    d["conversation_masks"] = d["conversation_masks"] + [0]
    d["old_logprobs"] = d["old_logprobs"] + [0.0]
    p = tmp_path / "appended.json"
    p.write_text(json.dumps(d))
    (r,) = tunix.read(open_source(p), ReadContext())
    last = assistants(r)[-1]
    assert len(last.token_ids) == 20 and last.mask[-1] is False and sum(last.mask) == 19
    assert "token_span" not in last.extra


def test_jsonl_of_token_dicts(tmp_path):
    lines = [json.dumps(raw(n)) for n in ("submitted.Token.json", "timeout.Token.json")]
    p = tmp_path / "tokens.jsonl"
    p.write_text("\n".join(lines) + "\n")
    src = open_source(p)
    assert src.kind == "jsonl" and tunix.sniff(src)
    a, b = tunix.read(src, ReadContext())
    assert (a.id, b.id) == ("tokens#L1", "tokens#L2")
    assert (a.ending.type, b.ending.type) == (Ending.submitted, Ending.truncated)
