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
        agent = r.nodes[2]
        assert agent.sampled and all(agent.mask) and not any(r.nodes[1].mask)
        assert r.ending.type == Ending.unknown and r.ending.evidence.output_tokens == 157
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
