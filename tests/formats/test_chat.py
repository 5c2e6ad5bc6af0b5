"""The chat reader (ingest/formats/chat.py), reader only: every case in
tests/fixtures/cases, detection, and record-level validation errors."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ingest import graph
from ingest.errors import RecordError
from ingest.formats import _openai, chat
from ingest.formats.base import ReadContext
from ingest.schema import Ending, Rollout
from ingest.source import open_source
from tests.formats.reading import data, only_branch_pairs, read_with, rollouts_with, write

HERE = Path(__file__).resolve().parent


def case(name: str) -> Path:
    return data(f"cases/{name}")


def read(path: Path, ctx: ReadContext | None = None) -> list[Rollout | RecordError]:
    return read_with(chat, path, ctx)


def rollouts(path: Path, ctx: ReadContext | None = None) -> list[Rollout]:
    return rollouts_with(chat, path, ctx)


# --- cases ---------------------------------------------------------------------------------

def test_every_case_file_is_detected_and_keeps_case():
    names = ["01-token-drift-retokenization.json", "04-logprobs-length-mismatch.json",
             "05-duplicate-tool-call-ids.json", "07-unanswered-tool-call.json",
             "08-utf8-split-across-tokens.json", "10-nan-and-null-rewards.json", "11-torn-jsonl-tail.jsonl",
             "11b-malformed-middle-line.jsonl", "13-empty-assistant-response.json"]
    for name in names:
        path = case(name)
        assert chat.sniff(open_source(path)), name
        out = read(path)
        good = [r for r in out if isinstance(r, Rollout)]
        assert good, name
        if path.suffix == ".json":
            assert all(isinstance(r, Rollout) for r in out), name
            assert all("source" in r.extra["_case"] for r in good), name
        for r in good:
            assert r.ending.type in set(Ending)
            assert r.to_json_dict()["id"] == r.id


def test_case01_token_drift_two_branches():
    (r,) = rollouts(case("01-token-drift-retokenization.json"))
    assert r.id == "case01" and r.reward == 1.0
    paths = graph.branches(r.nodes)
    assert len(paths) == 2
    first, second = ([r.nodes[i] for i in p] for p in paths)
    assert [n.message.role for n in first] == ["user", "assistant"]
    assert first[0].token_ids == [1, 2, 3] and first[0].mask == [False] * 3
    assert first[1].token_ids == [10, 11, 99] and first[1].mask == [True] * 3 and first[1].sampled
    assert first[1].logprobs == [-0.7, -0.1, -0.01]
    # the second request's full prompt is kept as given, on a new root; nothing repaired
    assert second[0].parent is None and second[0].token_ids == [1, 2, 3, 12, 99, 50, 51]
    assert second[0].extra["token_drift"] == {"turn": 1, "index": 3, "expected": 10, "found": 12}
    assert second[1].token_ids == [20, 99] and second[1].logprobs == [-0.3, -0.02]
    assert r.extra["token_drift"] is True
    # source pieces as hex bytes, per token
    assert first[1].extra["token_bytes"] == [" he".encode().hex(), b"llo".hex(), b"<eos>".hex()]
    assert second[0].extra["token_bytes"][3] == " hello".encode().hex()
    assert r.ending.evidence.output_tokens == 5
    # no message text in the source: derived from the pieces and marked so
    assert first[1].message.content == " hello<eos>" and first[1].extra["content_from"] == "token_bytes"


def test_turns_without_drift_hold_only_the_delta(tmp_path):
    rec = {"rollout_id": "ok", "turns": [
        {"prompt_ids": [1, 2], "completion_ids": [5, 6], "logprobs": [-1.0, -2.0]},
        {"prompt_ids": [1, 2, 5, 6, 7, 8], "completion_ids": [9], "logprobs": [-0.5], "finish_reason": "length"},
    ]}
    (r,) = rollouts(write(tmp_path, "t.json", json.dumps(rec)))
    assert len(graph.branches(r.nodes)) == 1
    assert [n.token_ids for n in r.nodes] == [[1, 2], [5, 6], [7, 8], [9]]
    assert [n.parent for n in r.nodes] == [None, 0, 1, 2]
    assert not any("token_drift" in n.extra for n in r.nodes)
    assert [c.node for c in r.calls] == [1, 3] and r.calls[1].usage.input_tokens == 6
    assert r.ending.type == Ending.length_cut  # endings.derive from the last call's finish reason


def test_case04_logprobs_short_and_zero_padded():
    a, b = rollouts(case("04-logprobs-length-mismatch.json"))
    assert (a.id, b.id) == ("case04a", "case04b")
    (na,) = a.nodes
    assert na.sampled and na.message.role == "assistant" and len(na.token_ids) == 6
    assert na.logprobs == [-0.21, -0.05, -0.01, -1.3, None, None]  # missing, never 0.0
    assert na.extra["source_lengths"] == {"logprobs": 4}
    assert na.mask == [True] * 6
    (nb,) = b.nodes
    assert nb.logprobs == [-0.21, -0.05, -0.01, -1.3, 0.0, 0.0]  # kept as given
    assert len(nb.logprobs) == 6 and "source_lengths" not in nb.extra
    assert nb.extra["token_bytes"][-1] == b"<|im_end|>".hex()
    assert na.message.content == "The answer is 4<|im_end|>"


def test_case05_duplicate_ids_all_calls_kept_and_paired_in_order():
    (r,) = rollouts(case("05-duplicate-tool-call-ids.json"))
    calls = [(i, tc.id, tc.name) for i, n in enumerate(r.nodes) for tc in (n.message.tool_calls or [])]
    assert calls == [(1, "call_X", "search_direct_flight"), (3, "call_X", "search_onestop_flight"),
                     (5, "call_Y", "get_flight"), (5, "call_Y", "get_flight")]
    pairs = only_branch_pairs(r)
    by = {(c.node, c.position): c for c in pairs}
    assert by[(1, 0)].name == "search_direct_flight" and by[(1, 0)].result_node == 2
    assert r.nodes[2].message.content == "[]"
    assert by[(3, 0)].name == "search_onestop_flight" and by[(3, 0)].result_node == 4
    assert "HAT136" in r.nodes[4].message.content
    assert (by[(5, 0)].result_node, by[(5, 1)].result_node) == (6, 7)
    assert r.nodes[1].message.content is None


def test_case07_unanswered_call_and_error_ending():
    (r,) = rollouts(case("07-unanswered-tool-call.json"))
    pairs = {c.id: c.result_node for c in only_branch_pairs(r)}
    assert pairs == {"call_a": None, "call_b": 2}
    assert r.ending.type == Ending.error and r.ending.detail == "error"
    assert r.ending.message == "provider rejected request: tool_call id without response (placeholder text)"
    assert r.errors and r.errors[0].message == r.ending.message


def test_case08_openai_logprobs_bytes():
    a, b = rollouts(case("08-utf8-split-across-tokens.json"))
    assert a.id.endswith("#variant_a") and b.id.endswith("#variant_b")
    assert a.extra["variant"] == "variant_a" and "_case" in a.extra
    (na,) = a.nodes
    assert na.message.role == "assistant" and na.sampled
    assert na.message.text() == "Hi 😀!"
    hexes = na.extra["token_bytes"]
    assert hexes == ["4869", "20", "f09f", "9880", "21"]
    assert bytes.fromhex("".join(hexes)).decode("utf-8") == "Hi 😀!"
    assert na.logprobs == [-0.02, -0.3, -0.9, -0.05, -0.4]
    assert na.token_ids == [-1] * 5  # OpenAI gives no ids; none are invented (-1 = not recorded)
    assert na.mask == [True] * 5
    (nb,) = b.nodes
    assert nb.message.text() == "😊"  # message-level text as given
    assert nb.extra["token_bytes"] == ["efbfbd"] * 4


def test_case10_non_finite_and_null_rewards_in_one_group():
    rs = rollouts(case("10-nan-and-null-rewards.json"))
    assert [r.id for r in rs] == ["g1-0", "g1-1", "g1-2", "g1-3"]
    assert all(r.group.id == "g1" and r.group.size == 4 for r in rs)
    assert [r.group.index for r in rs] == [0, 1, 2, 3]
    assert [r.reward_status() for r in rs] == ["ok", "nan", "unscored", "inf"]
    assert math.isnan(rs[1].reward) and rs[2].reward is None and rs[3].reward == math.inf
    assert rs[0].extra["reward_components"] == {"format": 1.0, "correct": 1.0}
    assert rs[0].metrics["reward_components.correct"] == 1.0
    assert math.isnan(rs[1].metrics["reward_components.correct"])
    assert rs[2].metrics["reward_components.format"] is None
    # the breakdown's finite values are reward components beside the reward, never summed into it
    assert {k: (v.score, v.weight) for k, v in rs[0].rewards.items()} == {"format": (1.0, 1.0), "correct": (1.0, 1.0)}
    assert list(rs[1].rewards) == ["format"] and rs[2].rewards == {} and rs[0].total_reward() == 1.0
    assert rs[2].total_reward() is None and rs[2].reward_status() == "unscored"


def test_case11_torn_tail():
    out = read(case("11-torn-jsonl-tail.jsonl"))
    good = [r for r in out if isinstance(r, Rollout)]
    errs = [r for r in out if isinstance(r, RecordError)]
    assert [r.id for r in good] == ["t-0", "t-1"]
    assert len(errs) == 1 and errs[0].line == 3
    assert errs[0].message == ("cut-off line: truncated JSON, the record ends early (after 128 bytes, before its "
                               "closing }) and the line has no newline: the writer stopped mid-line")
    assert good[1].reward == 0.0 and good[1].nodes[1].message.content == "hey"
    assert good[0].source["line"] == 1


def test_case11b_malformed_middle_line():
    out = read(case("11b-malformed-middle-line.jsonl"))
    assert [type(r).__name__ for r in out] == ["Rollout", "RecordError", "Rollout"]
    assert out[1].line == 2
    # said plainly: cut off, not a parser position inside the record ("line 2 column 1 (char 30)")
    assert str(out[1]).endswith(":2: cut-off line: truncated JSON, the record ends early (after 29 bytes, before "
                                "its closing }) and the line was ended there: the rest of the record is missing")
    assert [r.id for r in out if isinstance(r, Rollout)] == ["t-0", "t-1"]


def test_case13_empty_assistant_turn_kept():
    (r,) = rollouts(case("13-empty-assistant-response.json"))
    assert [n.message.role for n in r.nodes] == ["user", "assistant", "tool", "assistant"]
    first, empty = r.nodes[1], r.nodes[3]
    assert first.token_ids == [151657, 198, 4913, 151658, 151645] and first.mask == [True] * 5
    assert empty.message.content == "" and empty.token_ids == [151645]
    assert empty.logprobs == [-0.9] and empty.mask == [True]
    assert not r.nodes[0].token_ids and not r.nodes[2].token_ids
    assert r.ending.type == Ending.error and r.errors[0].type == "EmptyModelResponseError"
    assert r.reward == 0.0


# --- detection -----------------------------------------------------------------------------

# test_sniff_rejects_native_and_tunix moved to test_detect.py (the registry's order decides).


@pytest.mark.parametrize("rel", [
    "tunix/v0.1.7/submitted.Trajectory.json",
    "tunix/v0.1.7/submitted.Token.json", "tunix/v0.1.7/submitted.Steps.json",
    "tunix/v0.1.7/orchestrator_group.Trajectory.json", "atropos/rubiks_process_results_32.line1.jsonl",
    "nemo-gym/grl_sokoban.first2.jsonl", "verifiers/train_group.jsonl", "openhands/basic.json",
    "swe-agent/pydicom__pydicom-1458.traj", "inspect_ai/log_tool_call_error.json",
    "atif/multi_tool.trajectory.json",
])
def test_sniff_leaves_other_real_formats_alone(rel):
    assert not chat.sniff(open_source(data(f"realdata/{rel}")))


def test_bare_message_list_is_one_rollout(tmp_path):
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"}]
    path = write(tmp_path, "conv.json", json.dumps(msgs))
    assert chat.sniff(open_source(path))
    (r,) = rollouts(path, ReadContext(run_id="exp1"))
    assert r.id == "conv#0" and r.run.id == "exp1" and len(r.nodes) == 3
    assert r.ending.type == Ending.unknown


# --- messages and records ------------------------------------------------------------------

def test_roles_tool_call_shapes_and_record_fields(tmp_path):
    rec = {
        "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "environment", "content": [{"type": "text", "text": "obs"}, "more"]},
            {"role": "assistant", "content": None, "finish_reason": "tool_calls",
             "tool_calls": [{"id": 7, "type": "function", "function": {"name": "f", "arguments": {"a": "é"}}},
                            {"id": "x", "name": "g", "arguments": "{not json"}]},
            {"role": "function", "name": "f", "content": "1"},
            {"role": "assistant", "function_call": {"name": "h", "arguments": "{}"}, "content": "done",
             "timestamp": 1700000000.5},
        ],
        "reward": True, "group_id": 5, "step": 12, "ending": "no_such_reason", "custom": {"k": 1},
        "metrics": {"latency": 1.5, "note": "slow"}, "task": {"q": "?"}, "task_id": 9,
    }
    (r,) = rollouts(write(tmp_path, "rec.json", json.dumps(rec)))
    roles = [n.message.role for n in r.nodes]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert r.nodes[0].message.extra["source_role"] == "developer"
    assert r.nodes[1].message.extra["source_role"] == "environment"
    assert r.nodes[1].message.text() == "obs\nmore"
    assert r.nodes[3].message.extra["source_role"] == "function" and r.nodes[3].message.name == "f"
    tcs = r.nodes[2].message.tool_calls
    assert (tcs[0].id, tcs[0].name, json.loads(tcs[0].arguments)) == ("7", "f", {"a": "é"})
    assert (tcs[1].id, tcs[1].arguments) == ("x", "{not json")
    assert r.nodes[4].message.tool_calls[0].name == "h" and r.nodes[4].timestamp == 1700000000.5
    assert [n.parent for n in r.nodes] == [None, 0, 1, 2, 3]
    assert r.calls[0].node == 2 and r.calls[0].finish_reason == "tool_call"
    assert r.reward == 1.0 and r.group.id == "5" and r.step == 12
    assert r.ending.type == Ending.unknown and r.ending.detail == "no_such_reason"
    assert r.extra["custom"] == {"k": 1} and r.metrics == {"latency": 1.5} and r.extra["metrics"] == {"note": "slow"}
    assert r.task.key == "9" and r.task.data == {"q": "?"}
    assert r.id == "rec#0"


def test_ending_reason_mapping_keeps_raw_detail(tmp_path):
    lines = [
        {"rollout_id": "a", "messages": [], "ending": {"reason": "max_tokens"}},
        {"rollout_id": "b", "messages": [], "ending": {"reason": "Stop"}},
        {"rollout_id": "c", "messages": [], "ending": {"error_type": "Timeout", "message": "tool hung"}},
        {"rollout_id": "d", "messages": [], "stop_condition": "max_turns"},
    ]
    rs = rollouts(write(tmp_path, "e.jsonl", "\n".join(json.dumps(x) for x in lines)))
    assert [(r.ending.type, r.ending.detail) for r in rs] == [
        (Ending.length_cut, "max_tokens"), (Ending.submitted, "Stop"), (Ending.error, "Timeout"),
        (Ending.truncated, "max_turns")]
    assert rs[2].errors[0].type == "Timeout" and rs[2].ending.message == "tool hung"


ANSWERED = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


@pytest.mark.parametrize("fields,ending,detail", [
    ({"ending": {"type": "truncated", "detail": "max_turns"}}, Ending.truncated, "max_turns"),  # Rollscope's shape
    ({"ending": {"stop_reason": "end_turn"}}, Ending.submitted, "end_turn"),
    ({"stop_reason": "max_turns"}, Ending.truncated, "max_turns"),
    ({"termination_reason": "user_stop"}, Ending.task_detected, "user_stop"),  # tau2: the user simulator ended it
    ({"termination_reason": "too_many_errors"}, Ending.error, "too_many_errors"),
    ({"finish_reason": "length"}, Ending.length_cut, "length"),
    ({"stop_condition": "Max_Turns"}, Ending.truncated, "Max_Turns"),  # the table is case-insensitive
    # a word the table does not know never hides a later field it knows
    ({"ending": "weird", "termination_reason": "agent_stop"}, Ending.submitted, "agent_stop"),
    ({"termination_reason": "weird", "finish_reason": "length"}, Ending.length_cut, "length"),
    ({"termination_reason": "weird"}, Ending.unknown, "weird"),
])
def test_a_records_own_ending_fields_go_through_the_one_table(tmp_path, fields, ending, detail):
    from ingest.endings import normalise

    p = write(tmp_path, "e.jsonl", json.dumps({"rollout_id": "r", "messages": ANSWERED, **fields}))
    (r,) = [normalise(x) for x in rollouts(p)]
    assert (r.ending.type, r.ending.detail) == (ending, detail)
    if ending == Ending.error:
        assert r.errors and r.errors[0].type == detail
    if "weird" in json.dumps(fields) and ending != Ending.unknown:
        assert r.ending.extra["not_in_table"]


def test_jsonl_validation_errors_name_line_and_field(tmp_path):
    good = {"messages": [{"role": "user", "content": "hi"}]}
    no_role = {"rollout_id": "bad1", "messages": [{"role": "user"}, {"role": "assistant"},
                                                  {"role": "user"}, {"content": "who am I"}]}
    bad_calls = {"messages": [{"role": "assistant", "tool_calls": {"id": "c"}}]}
    bad_ids = {"turns": [{"prompt_ids": [1, "x"], "completion_ids": [2]}]}
    path = write(tmp_path, "v.jsonl", "\n".join(json.dumps(x) for x in [good, no_role, bad_calls, bad_ids, good]))
    out = read(path)
    assert [type(x).__name__ for x in out] == ["Rollout", "RecordError", "RecordError", "RecordError", "Rollout"]
    assert (out[1].line, out[1].field) == (2, "messages[3].role")
    assert (out[2].line, out[2].field) == (3, "messages[0].tool_calls")
    assert (out[3].line, out[3].field) == (4, "turns[0].prompt_ids[1]")
    assert out[1].file.endswith("v.jsonl")
    assert [x.id for x in out if isinstance(x, Rollout)] == ["v#0", "v#4"]  # <stem>#<line index>


def test_json_list_validation_errors_name_index(tmp_path):
    doc = [{"messages": [{"role": "user", "content": "ok"}]},
           {"messages": [{"role": "user", "content": 5}]},
           {"rollouts": [{"messages": [{"role": "tool", "tool_calls": [{"function": {"arguments": "{}"}}]}]}]}]
    out = read(write(tmp_path, "l.json", json.dumps(doc)))
    assert isinstance(out[0], Rollout) and out[0].id == "l#0"
    assert isinstance(out[1], RecordError) and out[1].line is None and out[1].field == "[1].messages[0].content"
    assert isinstance(out[2], RecordError) and out[2].field == "[2].rollouts[0].messages[0].tool_calls[0].function.name"


def test_turn_tokens_count_mismatch_and_top_level_completion_on_messages(tmp_path):
    rec = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
           "turn_tokens": [{"completion_ids": [1, 2], "logprobs": [-1.0]}, {"completion_ids": [3]}]}
    rec2 = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                         {"role": "user", "content": "q2"}, {"role": "assistant", "content": "b"}],
            "completion_ids": [8, 9], "logprobs": [-0.1, -0.2]}
    r1, r2 = rollouts(write(tmp_path, "m.jsonl", json.dumps(rec) + "\n" + json.dumps(rec2) + "\n"))
    assert r1.nodes[1].token_ids == [1, 2] and r1.nodes[1].logprobs == [-1.0, None]
    assert r1.nodes[1].extra["source_lengths"] == {"logprobs": 1}
    assert r1.extra["turn_tokens_count_mismatch"] == {"assistant_messages": 1, "turn_tokens": 2}
    assert r1.extra["unaligned_turn_tokens"] == [1]
    assert r2.nodes[3].token_ids == [8, 9] and not r2.nodes[1].token_ids


def test_token_pieces_never_crash_on_invalid_utf8(tmp_path):
    # a lone surrogate (JSON escape, not valid UTF-8 when encoded), raw byte lists, OpenAI escapes
    text = ('{"completion_ids": [1, 2, 3, 4], "logprobs": [-1, -1, -1, -1], '
            '"completion_pieces": ["\\udcff", [240, 159], "bytes:\\\\x98\\\\x80", null]}')
    (r,) = rollouts(write(tmp_path, "u.json", text))
    hexes = r.nodes[0].extra["token_bytes"]
    assert hexes[1:] == ["f09f", "9880", None]
    assert isinstance(hexes[0], str) and hexes[0] == hexes[0].lower()
    assert _openai.piece_hex("é") == "c3a9"


def test_short_pieces_are_fitted_and_recorded(tmp_path):
    rec = {"completion_ids": [1, 2, 3], "completion_pieces": ["a"]}
    (r,) = rollouts(write(tmp_path, "p.json", json.dumps(rec)))
    node = r.nodes[0]
    assert node.extra["token_bytes"] == ["61", None, None]
    assert node.extra["source_lengths"] == {"token_bytes": 1}
    assert node.logprobs == []  # not given: stays empty, never zeros
    assert node.message.content is None  # pieces incomplete: no text derived


def test_large_cases_read(tmp_path):
    """Cases 15/17, generated on demand: a 1 MB tool output and 5,000 tool-call turns."""
    import subprocess
    import sys

    script = case("15-17-make-large-cases.py")
    subprocess.run([sys.executable, str(script), str(tmp_path), "1", "5000"], check=True, capture_output=True)
    (big,) = rollouts(tmp_path / "15-huge-tool-output.json")
    assert len(big.nodes[2].message.content) > 1_000_000
    (many,) = rollouts(tmp_path / "17-many-turns.json")
    assert len(many.nodes) == 10_002 and many.ending.evidence.turns == 5_001
    calls = only_branch_pairs(many)
    assert len(calls) == 5_000 and all(c.result_node == c.node + 1 for c in calls)


def test_token_turns_carry_the_openai_choice_of_each_request(tmp_path):
    # A turn records what the chat completion response said of its choice: `logprobs.content[]`
    # (values and each token's bytes), `finish_reason`, `usage`, and the request's `max_tokens`.
    rec = {"rollout_id": "r1", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hé"},
                                            {"role": "user", "content": "More"}, {"role": "assistant", "content": "!"}],
           "turns": [{"prompt_ids": [1, 2], "completion_ids": [7, 8],
                      "logprobs": {"content": [{"token": "H", "logprob": -0.1, "bytes": [72], "top_logprobs": []},
                                               {"token": "é", "logprob": -0.2, "bytes": [195, 169],
                                                "top_logprobs": []}]},
                      "finish_reason": "length", "usage": {"prompt_tokens": 2, "completion_tokens": 2},
                      "max_tokens": 2, "seed": 5},
                     {"prompt_ids": [1, 2, 7, 8, 3], "completion_ids": [9], "logprobs": [-0.3]}]}
    [r] = rollouts(write(tmp_path, "r.jsonl", json.dumps(rec) + "\n"))
    answer = r.nodes[1]
    assert answer.logprobs == [-0.1, -0.2] and answer.extra["token_bytes"] == ["48", "c3a9"]
    assert answer.extra["turn_fields"] == {"seed": 5}
    first = next(c for c in r.calls if c.node == 1)
    assert (first.finish_reason, first.usage.output_tokens, first.sampling) == ("length", 2, {"max_tokens": 2})
    second = next(c for c in r.calls if c.node == 3)  # no usage given: the recorded lengths
    assert (second.finish_reason, second.usage.input_tokens, second.usage.output_tokens) == (None, 5, 1)
