"""Each rollout-scope check on a passing and a failing fixture (the native model, no database)."""
from __future__ import annotations

import pytest

from ingest.checks import run_rollout_checks
from ingest.endings import normalise
from ingest.schema import Rollout


def prepare(r):
    """Normalise the ending as every reader's output is (in place) and return the rollout."""
    return normalise(r)


def node(role, ids=(), mask=None, logprobs=None, parent="auto", **msg):
    n = {"message": {"role": role, **msg}, "sampled": role == "assistant", "token_ids": list(ids)}
    if mask is not None:
        n["mask"] = list(mask)
    if logprobs is not None:
        n["logprobs"] = list(logprobs)
    if parent != "auto":
        n["parent"] = parent
    return n


def make(nodes, **kw) -> Rollout:
    for i, n in enumerate(nodes):
        n.setdefault("parent", i - 1 if i else None)
    body = {"id": "x", "run": {"id": "r"}, "nodes": nodes, "reward": 1.0, **kw}
    return prepare(Rollout.model_validate(body))


def fired(r: Rollout, kind: str):
    res = run_rollout_checks(r)
    return [f for f in res.findings if f.kind == kind], [s for s in res.skipped if s.kind == kind]


def clean_tokens():
    return [node("user", [1, 2], [0, 0], [None, None], content="q"),
            node("assistant", [3, 4, 5], [1, 1, 1], [-0.1, -0.2, -0.3], content="a")]


def test_placeholder_token_id():
    assert fired(make(clean_tokens()), "placeholder_token_id") == ([], [])
    nodes = clean_tokens()
    nodes[0]["token_ids"] = [-100, 2]
    nodes[1]["token_ids"] = [3, -200, -1]  # -1 = not recorded: not a placeholder
    (a, b), _ = fired(make(nodes), "placeholder_token_id")
    assert (a.node_idx, a.position, a.detail["values"]) == (0, 0, [-100])
    assert (b.node_idx, b.detail["positions"], b.detail["values"]) == (1, [1], [-200])
    _, (skip,) = fired(make([node("user", content="q"), node("assistant", content="a")]), "placeholder_token_id")
    assert skip.message == "no token ids recorded"


def test_invalid_logprob():
    assert fired(make(clean_tokens()), "invalid_logprob") == ([], [])
    nodes = clean_tokens()
    nodes[1]["logprobs"] = [-0.1, 0.5, float("nan")]
    (f,), _ = fired(make(nodes), "invalid_logprob")
    assert (f.node_idx, f.detail["positions"]) == (1, [1, 2])


def test_implausible_logprob():
    assert fired(make(clean_tokens()), "implausible_logprob") == ([], [])
    nodes = clean_tokens()
    nodes[1]["logprobs"] = [-0.1, -25.0, -31.5]
    (f,), _ = fired(make(nodes), "implausible_logprob")
    assert (f.node_idx, f.position, f.detail["count"], f.detail["threshold"]) == (1, 1, 2, -20.0)
    nodes = clean_tokens()
    nodes[1]["logprobs"] = [None, None, None]
    assert fired(make(nodes), "implausible_logprob")[1][0].message == "no behaviour logprobs recorded on sampled tokens"


def test_mask_on_unsampled():
    assert fired(make(clean_tokens()), "mask_on_unsampled") == ([], [])
    nodes = clean_tokens() + [node("tool", [6, 7, 8], [1, 0, 1], content="out", tool_call_id="c")]
    (f,), _ = fired(make(nodes), "mask_on_unsampled")
    assert (f.node_idx, f.detail["role"], f.detail["positions"], f.severity) == (2, "tool", [0, 2], "error")
    plain = make([node("user", content="q"), node("assistant", content="a")])
    assert fired(plain, "mask_on_unsampled")[1][0].message == "no loss mask recorded"


def test_sampled_mask_zero():
    assert fired(make(clean_tokens()), "sampled_mask_zero") == ([], [])
    trailing = clean_tokens()
    trailing[1]["mask"] = [1, 1, 0]  # a template token the parser appended (e.g. <|im_end|>)
    assert fired(make(trailing), "sampled_mask_zero") == ([], [])
    hole = clean_tokens()
    hole[1]["token_ids"] = [3, 4, 5, 6]
    hole[1]["mask"] = [1, 0, 1, 0]
    hole[1]["logprobs"] = [-0.1] * 4
    (f,), _ = fired(make(hole), "sampled_mask_zero")
    assert (f.node_idx, f.detail["positions"], f.detail["where"]) == (1, [1], "inside the turn")
    content = clean_tokens()
    content[1]["mask"] = [1, 1, 0]
    content[1]["is_content"] = [1, 1, 1]  # the source says the last token is content
    (f,), _ = fired(make(content), "sampled_mask_zero")
    assert f.detail["positions"] == [2]
    zeroed = clean_tokens()
    zeroed[1]["mask"] = [0, 0, 0]  # a filter zeroed the whole rollout
    found, (skip,) = fired(make(zeroed), "sampled_mask_zero")
    assert found == [] and "trains on nothing" in skip.message


def test_terminal_env_tokenized():
    assert fired(make(clean_tokens()), "terminal_env_tokenized") == ([], [])
    nodes = clean_tokens() + [node("tool", [6, 7], [0, 0], content="final observation", tool_call_id="c")]
    (f,), _ = fired(make(nodes), "terminal_env_tokenized")
    assert (f.node_idx, f.detail) == (2, {"role": "tool", "tokens": 2, "trained": 0})
    untokenized = clean_tokens() + [node("tool", content="final observation", tool_call_id="c")]
    assert fired(make(untokenized), "terminal_env_tokenized") == ([], [])


CALL = {"id": "c1", "name": "f"}


@pytest.mark.parametrize("arguments, shape", [
    ('"{\\"q\\": 1}"', "double_encoded"), ('{"q": "Par', "cut_off"), ('"Paris"', "scalar"), ("", "missing"),
    ("[1, 2]", "array"), ("q=1", "not_json"), ("7", "scalar")])
def test_malformed_tool_arguments(arguments, shape):
    ok = make([node("user", content="q"), node("assistant", tool_calls=[{**CALL, "arguments": '{"q": 1}'}])])
    assert fired(ok, "malformed_tool_arguments") == ([], [])
    bad = make([node("user", content="q"), node("assistant", tool_calls=[{**CALL, "arguments": arguments}])])
    (f,), _ = fired(bad, "malformed_tool_arguments")
    assert (f.node_idx, f.position, f.detail["shape"]) == (1, 0, shape)


def test_empty_reasoning_only():
    ok = make([node("user", content="q"), node("assistant", content="4", reasoning_content="2+2")])
    assert fired(ok, "empty_reasoning_only") == ([], [])
    bad = make([node("user", content="q"), node("assistant", content="", reasoning_content="2+2 is")])
    (f,), _ = fired(bad, "empty_reasoning_only")
    assert f.node_idx == 1
    blocks = make([node("user", content="q"), node("assistant", content=[{"type": "thinking", "thinking": "hm"}])])
    assert len(fired(blocks, "empty_reasoning_only")[0]) == 1
    assert fired(bad, "empty_response")[0] == []  # reasoning is not an empty response


def test_silent_truncation_changes_the_ending_and_keeps_the_claim():
    ok = make(clean_tokens(), ending={"type": "submitted", "detail": "agent_completed"},
              calls=[{"node": 1, "finish_reason": "stop"}])
    assert fired(ok, "silent_truncation") == ([], []) and ok.ending.type == "submitted"
    cut = make(clean_tokens(), ending={"type": "submitted", "detail": "agent_completed"},
               calls=[{"node": 1, "finish_reason": "length"}])
    (f,), _ = fired(cut, "silent_truncation")
    assert cut.ending.type == "length_cut" and cut.ending.detail == "agent_completed"
    assert f.detail["claimed"] == "submitted" and f.detail["ending"] == "length_cut"
    assert "stopped for length" in f.detail["why"]
    capped = make(clean_tokens(), ending={"type": "task_detected", "detail": "SUCCEEDED",
                                          "evidence": {"last_output_tokens": 512, "last_output_token_cap": 512}})
    assert capped.ending.type == "length_cut" and len(fired(capped, "silent_truncation")[0]) == 1
    steps = clean_tokens()
    steps[1]["message"]["tool_calls"] = [{"id": "c", "name": "f", "arguments": "{}"}]
    limited = make(steps + [node("tool", content="o", tool_call_id="c")],
                   ending={"type": "submitted", "detail": "submitted", "evidence": {"max_turns": 1}})
    assert limited.ending.type == "truncated" and len(fired(limited, "silent_truncation")[0]) == 1
    prepare(cut)  # idempotent: the claim stays the source's
    assert cut.ending.extra["silent_truncation"]["claimed"] == "submitted"


def test_non_finite_reward():
    assert fired(make(clean_tokens()), "non_finite_reward") == ([], [])
    (f,), _ = fired(make(clean_tokens(), reward=None, reward_non_finite="nan"), "non_finite_reward")
    assert f.detail == {"reward_status": "nan"}
