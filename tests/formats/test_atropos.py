"""The Atropos reader (ingest/formats/atropos.py) on NousResearch/atropos's rubiks example group
(tests/fixtures/realdata/atropos). Expected counts read from the file: tokens per sample, masks
that are not -100, scores, messages per sample."""
from __future__ import annotations

import json
from pathlib import Path

from ingest.errors import RecordError
from ingest.formats import atropos, registry
from ingest.formats.base import ReadContext
from ingest.schema import Ending, Rollout
from ingest.source import open_source
from tests.conftest import FIXTURES

FILE = FIXTURES / "realdata" / "atropos" / "rubiks_process_results_32.line1.jsonl"


def read(path: Path) -> list[Rollout | RecordError]:
    return list(atropos.read(open_source(path), ReadContext()))


def test_real_group_matches_hand_counts():
    rs = read(FILE)
    assert all(isinstance(r, Rollout) for r in rs)
    assert [sum(len(n.token_ids) for n in r.nodes) for r in rs] == [2091, 1804, 2031, 2024]
    assert [sum(sum(n.mask) for n in r.nodes) for r in rs] == [157, 157, 157, 157]
    assert [r.reward for r in rs] == [0.6455555555555557, 0.5955555555555556, 0.6455555555555557, 0.6307407407407408]
    for i, r in enumerate(rs):
        assert r.group.id == "rubiks_process_results_32.line1#0" and (r.group.index, r.group.size) == (i, 4)
        assert [n.message.role for n in r.nodes] == ["system", "user", "assistant", "user"]
        assert [n.message.extra.get("source_role") for n in r.nodes] == [None, "environment", "agent", "environment"]
        # split at Llama 3's <|start_header_id|> (128006): each message its own tokens (issue 19)
        assert r.extra["token_span"] == "turns"
        assert [n.token_ids[k] for n, k in zip(r.nodes, (1, 0, 0, 0))] == [128006] * 4
        assert [n.token_ids[-1] for n in r.nodes] == [128009] * 4  # each ends with <|eot_id|>
        assert [len(n.token_ids) for n in r.nodes[:2]] == [1177, 161]  # BOS + system, then the first state
        assert [n.token_ids[1 if k == 0 else 0:][1] for k, n in enumerate(r.nodes)] == [9125, 24175, 8252, 24175]
        agent, last = r.nodes[2], r.nodes[3]
        # the file trains the last environment message, not the agent's turn: shown as written
        assert agent.sampled and not any(agent.mask) and sum(last.mask) == 157 and not last.mask[0]
        assert not any(r.nodes[0].mask) and not any(r.nodes[1].mask)
        assert r.ending.type == Ending.unknown
        assert r.extra["parsed_actions"] == "UUUR"[i] and "mask_value_mismatch" not in r.extra
        assert sum(x is not None for x in agent.loss_weights["token_weights"]) == len(agent.token_ids)


def test_advantages_logprobs_and_placeholders_follow_the_spans(tmp_path):
    group = {"tokens": [[1, 2, 3, 4, 5, -200]], "masks": [[-100, -100, 3, 4, -100, -100]], "scores": [1.0],
             "advantages": [[0, 0, 0.5, 0.5, 0, 0]], "inference_logprobs": [[0, 0, -0.1, -0.2, 0, 0]],
             "messages": [[{"role": "user", "content": "q"}, {"role": "agent", "content": "a"},
                           {"role": "environment", "content": [{"type": "image"}]}]]}
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps(group) + "\n")
    assert registry.detect(open_source(p)).NAME == "atropos"
    (r,) = read(p)
    assert [n.token_ids for n in r.nodes] == [[1, 2], [3, 4], [5, -200]]  # as written; marked, not rewritten
    assert r.nodes[1].advantages == [0.5, 0.5] and r.nodes[1].logprobs == [-0.1, -0.2]
    assert r.nodes[2].extra["placeholder_token_ids"] == [[1, -200]]  # kept, marked; the rollout is not lost


def test_unaligned_mask_keeps_every_token_unsplit(tmp_path):
    group = {"tokens": [[1, 2, 3, 4]], "masks": [[1, -100, 3, -100]], "scores": [0.0],
             "messages": [[{"role": "user", "content": "q"}, {"role": "agent", "content": "a"}]]}
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps(group) + "\n")
    (r,) = read(p)
    assert sum(len(n.token_ids) for n in r.nodes) == 4 and r.extra["token_span"] == "unsplit"


def test_mismatched_sample_counts_are_a_record_error(tmp_path):
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps({"tokens": [[1]], "masks": [[1], [1]], "scores": [1.0]}) + "\n")
    (err,) = read(p)
    assert isinstance(err, RecordError) and err.field == "masks" and "2 entries for 1 samples" in err.message


def test_messages_between_agent_turns_without_a_turn_marker_share_one_span_that_says_so(tmp_path):
    """No token opens every message (no template marker): the mask runs decide, and the system and
    user messages before the agent's turn share one span on the user node, which names both
    (`token_span = "joined"`, `token_messages`); never silently on one message (issue 19)."""
    group = {"tokens": [[7, 8, 9, 10, 11, 12]], "masks": [[-100, -100, -100, -100, 11, 12]], "scores": [1.0],
             "messages": [[{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                           {"role": "agent", "content": "a"}]]}
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps(group) + "\n")
    (r,) = read(p)
    assert [len(n.token_ids) for n in r.nodes] == [0, 4, 2]
    assert r.nodes[1].extra["token_span"] == "joined" and r.nodes[1].extra["token_messages"] == [0, 1]
    assert r.extra["token_span"] == "joined"


def test_a_chatml_turn_marker_splits_every_message(tmp_path):
    """ChatML (`<|im_start|>` opens every message, no BOS): system, user and agent each get their
    own tokens, the mask as written; the agent turn's untrained role header is the generation
    prompt, so it goes with the message before it and the agent's node starts at what was sampled
    (issue 20: positions agree with the readers that record each request's prompt)."""
    S = 151644
    group = {"tokens": [[S, 1, 2, S, 3, 4, 5, S, 6, 7]], "masks": [[-100] * 8 + [6, 7]], "scores": [0.5],
             "messages": [[{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                           {"role": "agent", "content": "a"}]]}
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps(group) + "\n")
    (r,) = read(p)
    assert [n.token_ids for n in r.nodes] == [[S, 1, 2], [S, 3, 4, 5, S], [6, 7]]
    assert r.nodes[2].mask == [True, True] and r.extra["token_span"] == "turns"


def test_filler_logprobs_and_tool_results_in_one_turn(tmp_path):
    """Issue 20: inference_logprobs of 1.0 where nothing was trained are Atropos's filler, not
    logprobs; two tool results rendered in one ChatML turn are cut at each result's wrapper (id 30,
    `<tool_response>`), the agent's role header going with the prompt."""
    S = 151644
    tokens = [S, 1, S, 2, 3, S, 4, 30, 5, 30, 6, S, 7, 8]
    masks = [-100] * 3 + [2, 3] + [-100] * 7 + [7, 8]
    lp = [1.0] * 3 + [-0.5, -0.25] + [1.0] * 7 + [-0.1, -0.2]
    group = {"tokens": [tokens], "masks": [masks], "scores": [1.0], "inference_logprobs": [lp],
             "messages": [[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                           {"role": "tool", "content": "x"}, {"role": "tool", "content": "y"},
                           {"role": "assistant", "content": "b"}]]}
    p = tmp_path / "g.jsonl"
    p.write_text(json.dumps(group) + "\n")
    (r,) = read(p)
    assert [n.token_ids for n in r.nodes] == [[S, 1, S], [2, 3], [S, 4, 30, 5], [30, 6, S], [7, 8]]
    assert r.nodes[0].logprobs == [None] * 3 and r.nodes[1].logprobs == [-0.5, -0.25]
    assert r.nodes[4].mask == [True, True]
