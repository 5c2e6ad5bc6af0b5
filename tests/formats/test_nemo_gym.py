"""The NeMo Gym reader (ingest/formats/nemo_gym.py) on the real rollout files of NVIDIA-NeMo/Gym's
environments (tests/fixtures/realdata/nemo-gym). Expected counts were read from the files: input
items, function calls and outputs, assistant messages, token ids, rewards, ending flags."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.errors import RecordError
from ingest.formats import nemo_gym, registry
from ingest.formats.base import ReadContext
from ingest.graph import branches, pair_tool_calls
from ingest.schema import Ending, Rollout
from ingest.source import open_source
from tests.conftest import FIXTURES
from tests.helpers import ingest

DATA = FIXTURES / "realdata" / "nemo-gym"


def read(path: Path) -> list[Rollout]:
    out = list(nemo_gym.read(open_source(path), ReadContext()))
    errors = [str(r) for r in out if isinstance(r, RecordError)]
    assert not errors, errors
    return out  # type: ignore[return-value]


# (file, line) → (id, nodes, model calls, tool calls, tool results, sampled tokens, reward, ending, detail)
HAND = {
    ("anyterminal_agent_hermes.first2.jsonl", 0):
        ("anyterminal_hermes:task1-rollout0", 14, 7, 6, 6, 0, 1.0, Ending.submitted, "final assistant message"),
    ("anyterminal_agent_hermes.first2.jsonl", 1):
        ("anyterminal_hermes:task0-rollout0", 28, 14, 13, 13, 0, 1.0, Ending.submitted, "final assistant message"),
    ("competitive_coding_challenges.first2.jsonl", 0):
        ("simple_agent:task0-rollout1", 2, 1, 0, 0, 785, 0.0, Ending.submitted, "final assistant message"),
    ("competitive_coding_challenges.first2.jsonl", 1):
        ("simple_agent:task0-rollout3", 2, 1, 0, 0, 959, 0.0, Ending.submitted, "final assistant message"),
    ("example_multi_step.first1.jsonl", 0):
        ("example_multi_step.first1#0", 9, 4, 3, 3, 0, 1.0, Ending.submitted, "final assistant message"),
    ("grl_sokoban.first2.jsonl", 0):
        ("grl_sokoban_gymnasium_agent:task0-rollout0", 22, 10, 0, 0, 0, 10.0, Ending.task_detected, "terminated=true"),
    ("grl_sokoban.first2.jsonl", 1):
        ("grl_sokoban_gymnasium_agent:task2-rollout0", 43, 20, 0, 0, 0, -2.0000000000000004, Ending.truncated,
         "truncated=true"),
    ("mini_swe_agent_2.first1.jsonl", 0):
        ("mini_swe_agent_2:task4-rollout0", 14, 5, 8, 7, 0, 1.0, Ending.unknown, "last item: function_call"),
}


@pytest.mark.parametrize("key", sorted(HAND), ids=lambda k: f"{k[0]}:{k[1]}")
def test_real_file_matches_hand_counts(key):
    rid, n_nodes, n_calls, n_tool_calls, n_results, n_sampled, reward, ending, detail = HAND[key]
    r = read(DATA / key[0])[key[1]]
    assert r.id == rid and len(r.nodes) == n_nodes and len(r.calls) == n_calls
    assert sum(len(n.message.tool_calls or []) for n in r.nodes) == n_tool_calls
    assert sum(n.message.role == "tool" for n in r.nodes) == n_results
    assert sum(sum(n.mask) for n in r.nodes) == n_sampled
    assert r.reward == reward and (r.ending.type, r.ending.detail) == (ending, detail)
    assert len(branches(r.nodes)) == 1 and r.source["format"] == "nemo-gym"
    assert r.timing["start"] > 1.7e9  # response.created_at, epoch seconds


# (file, line) → the verify output's reward-like fields, read from the files: components of weight 0
PARTS = {("example_multi_step.first1.jsonl", 0): {"accuracy": 1.0, "set_overlap": 1.0},
         ("competitive_coding_challenges.first2.jsonl", 0): {"subtask_score": 11.0},
         ("anyterminal_agent_hermes.first2.jsonl", 0): {"resolved": 1.0},
         ("grl_sokoban.first2.jsonl", 0): {}}


@pytest.mark.parametrize("key", sorted(PARTS), ids=lambda k: k[0])
def test_reward_parts_are_components_beside_the_reward(key):
    r = read(DATA / key[0])[key[1]]
    assert {k: v.score for k, v in r.rewards.items()} == PARTS[key]
    assert all(v.weight == 0 for v in r.rewards.values()) and r.total_reward() == r.reward


def test_tokens_per_model_call_with_logprobs():
    r = read(DATA / "competitive_coding_challenges.first2.jsonl")[0]
    prompt, answer = r.nodes
    assert len(prompt.token_ids) == 109 and not any(prompt.mask)
    assert len(answer.token_ids) == 785 and all(answer.mask) and len(answer.logprobs) == 785
    assert answer.message.reasoning_content  # the reasoning item's summary
    assert r.calls[0].usage.input_tokens == 109 and r.calls[0].usage.output_tokens == 785
    assert r.group.id == "simple_agent:0" and r.group.index == 1


def test_parallel_calls_paired_by_call_id_and_final_call_unanswered():
    r = read(DATA / "mini_swe_agent_2.first1.jsonl")[0]
    (path,) = branches(r.nodes)
    pairs = pair_tool_calls(path, [n.message.model_dump() for n in r.nodes])
    assert len(pairs) == 8 and [p.result_node is None for p in pairs].count(True) == 1
    assert pairs[-1].result_node is None and "COMPLETE_TASK_AND_SUBMIT" in pairs[-1].name + \
        r.nodes[pairs[-1].node].message.tool_calls[-1].arguments
    parallel = [n for n in r.nodes if len(n.message.tool_calls or []) == 2]
    assert parallel, "a model call with two function calls stays one node"


def test_token_fields_present_but_empty_mean_not_recorded():
    r = read(DATA / "anyterminal_agent_hermes.first2.jsonl")[0]
    assert not any(n.token_ids for n in r.nodes)
    assert r.ending.evidence.output_tokens is None


def _record(**kw) -> dict:
    base = json.loads((DATA / "grl_sokoban.first2.jsonl").read_text().splitlines()[0])
    for k in ("terminated", "truncated"):
        base.pop(k)
    base.update(kw)
    return base


@pytest.mark.parametrize("fields,response,ending,detail", [
    ({}, {"error": {"code": "server_error", "message": "boom"}}, Ending.error, "server_error"),
    ({"context_length_exceeded_error": True}, {}, Ending.truncated, "context_length_exceeded_error"),
    ({"container_timed_out": True}, {}, Ending.error, "container_timed_out"),
    ({"agent_timed_out": True}, {}, Ending.truncated, "agent_timed_out"),
    ({}, {"incomplete_details": {"reason": "max_output_tokens"}}, Ending.length_cut,
     "incomplete_details.reason=max_output_tokens"),
    ({}, {"status": "failed"}, Ending.error, "status=failed"),
    ({"termination_reason": "max_turns"}, {}, Ending.truncated, "max_turns"),
])
def test_ending_table(tmp_path, fields, response, ending, detail):
    rec = _record(**fields)
    rec["response"].update(response)
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(rec) + "\n")
    (r,) = read(p)
    assert (r.ending.type, r.ending.detail) == (ending, detail)


def _line(name: str, **fields) -> dict:
    rec = json.loads((DATA / name).read_text().splitlines()[0])
    rec.update(fields)
    return rec


@pytest.mark.parametrize("name,fields,ending,detail", [
    # the tau2 agent (responses_api_agents/tau2/app.py) writes tau2's SimulationRun as `result`; on a
    # real line whose response says `status: completed` and ends on the agent's message
    ("example_multi_step.first1.jsonl", {"result": {"termination_reason": "user_stop"}}, Ending.task_detected,
     "result.termination_reason=user_stop"),
    ("example_multi_step.first1.jsonl", {"result": {"termination_reason": "max_steps"}}, Ending.truncated,
     "result.termination_reason=max_steps"),
    ("example_multi_step.first1.jsonl", {"result": {"termination_reason": "too_many_errors"}}, Ending.error,
     "result.termination_reason=too_many_errors"),
    ("example_multi_step.first1.jsonl", {"termination_reason": "user_stop"}, Ending.task_detected, "user_stop"),
    # status `completed` on a line that ends on a tool call: still not an ending word
    ("mini_swe_agent_2.first1.jsonl", {"result": {"termination_reason": "agent_stop"}}, Ending.submitted,
     "result.termination_reason=agent_stop"),
    # a word the table does not know never hides a later field it knows, and never becomes a guess
    ("grl_sokoban.first2.jsonl", {"termination_reason": "some_new_reason"}, Ending.task_detected, "terminated=true"),
    ("example_multi_step.first1.jsonl", {"termination_reason": "some_new_reason"}, Ending.unknown, "some_new_reason"),
])
def test_ending_words_in_order_the_first_known_word_decides(tmp_path, name, fields, ending, detail):
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(_line(name, **fields)) + "\n")
    (r,) = read(p)
    assert (r.ending.type, r.ending.detail) == (ending, detail)
    assert r.extra.get("result") == fields.get("result")  # kept, and written back by to_record


def test_an_unknown_incomplete_reason_does_not_hide_the_termination_reason(tmp_path):
    rec = _line("example_multi_step.first1.jsonl", termination_reason="user_stop")
    rec["response"].update(status="incomplete", incomplete_details={"reason": "content_policy_review"})
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps(rec) + "\n")
    (r,) = read(p)
    assert (r.ending.type, r.ending.detail) == (Ending.truncated, "status=incomplete")
    rec["response"]["status"] = "completed"
    p.write_text(json.dumps(rec) + "\n")
    (r,) = read(p)
    assert (r.ending.type, r.ending.detail) == (Ending.task_detected, "user_stop")


def test_retries_are_attempts_and_only_the_latest_enters_the_group(client, engine, tmp_path):
    lines = DATA.joinpath("grl_sokoban.first2.jsonl").read_text().splitlines()
    a0 = json.loads(lines[0])
    a1 = dict(json.loads(lines[0]), _ng_attempt_index=1, reward=0.0)
    other = dict(json.loads(lines[1]), _ng_task_index=0, _ng_rollout_index=1)
    p = tmp_path / "run" / "retried.jsonl"
    p.parent.mkdir()
    p.write_text("\n".join(json.dumps(x) for x in (a0, a1, other)) + "\n")
    assert registry.detect(open_source(p)).NAME == "nemo-gym"
    assert ingest(engine, p, run="ng").ok
    g = client.get("/runs/ng/groups/grl_sokoban_gymnasium_agent:0.json").json()
    assert len(g["members"]) == 2 and len(g["superseded"]) == 1
    assert {m["attempt"] for m in g["members"]
            if m["rollout_id"] == "grl_sokoban_gymnasium_agent:task0-rollout0"} == {1}


def test_rollscope_patch_restores_what_nemo_gym_has_no_place_for_and_a_bad_one_costs_its_line(tmp_path):
    """`to_record` of a tau-bench rollout (id not from the indices, ending decided by its reader)
    reads back the same; a `_rollscope.patch` that does not fit is a record error, not a crash."""
    from ingest.formats import tau_bench

    [r, *_] = [x for x in tau_bench.read(open_source(FIXTURES / "realdata/tau-bench/gpt-4o-airline.sample.json"),
                                         ReadContext(run_id="t")) if isinstance(x, Rollout)]
    d = nemo_gym.to_record(r)
    assert d["_rollscope"]["rollout_id"] == r.id and "patch" in d["_rollscope"]
    bad = json.loads(json.dumps(d))
    bad["_rollscope"]["patch"] = {"at": {"nodes": {"999": {"set": {"timestamp": 1}}}}}
    p = tmp_path / "x.jsonl"
    p.write_text(json.dumps(d) + "\n" + json.dumps(bad) + "\n")
    good, err = list(nemo_gym.read(open_source(p), ReadContext(run_id="t")))
    assert good.to_json_dict(exclude={"source"}) == r.to_json_dict(exclude={"source"})
    assert good.ending == r.ending and good.id == r.id
    assert isinstance(err, RecordError) and err.line == 2 and "_rollscope.patch" in str(err)
