"""The verl reader (ingest/formats/verl.py). verl ships no rollout files, so these fixtures are built
from the writer's code (verl-project/verl ray_trainer.py `_write_generations`, trainer_base.py v1
`uid` lines, agent_loop.py `AgentLoopOutput`)."""
from __future__ import annotations

import json

from ingest.errors import RecordError
from ingest.formats import verl
from ingest.formats.base import ReadContext
from ingest.schema import Ending, Rollout
from ingest.source import open_source


def lines(tmp_path, name, *records):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return p


def read(p):
    return list(verl.read(open_source(p), ReadContext()))


def test_rollout_data_dir_text_lines(tmp_path):
    p = lines(tmp_path, "7.jsonl",
              {"input": "system\nWhat is 2+2?\nassistant\n", "output": "4", "gts": "4", "score": 1.0, "acc": 1.0,
               "pred": "4"},
              {"input": "q", "output": "a", "gts": {"answer": 5}, "score": 0.0, "step": 7, "uid": "s3_1_0",
               "request_id": "req-9"})
    a, b = read(p)
    assert isinstance(a, Rollout) and a.step == 7 and a.reward == 1.0 and a.metrics == {"acc": 1.0}
    assert [n.message.role for n in a.nodes] == ["user", "assistant"] and a.nodes[1].sampled
    assert a.task.data == "4" and a.extra["pred"] == "4" and a.ending.type == Ending.unknown
    # reward extras: components of weight 0 beside the reward (`score`), which stays the total
    assert {k: (v.score, v.weight) for k, v in a.rewards.items()} == {"acc": (1.0, 0.0)} and a.total_reward() == 1.0
    assert b.id == "s3_1_0" and (b.group.id, b.group.index) == ("s3", 1) and b.extra["request_id"] == "req-9"


def test_agent_loop_output_tokens_split_by_mask(tmp_path):
    rec = {"prompt_ids": [1, 2, 3], "response_ids": [10, 11, 20, 21, 22, 12], "response_mask": [1, 1, 0, 0, 0, 1],
           "response_logprobs": [-0.1, -0.2, 0.0, 0.0, 0.0, -0.3], "reward_score": 0.5, "num_turns": 4,
           "extra_fields": {"turn_scores": [0.1], "reward_extra_info": {"acc": 0.0, "format": 0.5, "pred": "7"}}}
    (r,) = read(lines(tmp_path, "dump.jsonl", rec))
    assert [(n.message.role, n.token_ids) for n in r.nodes] == [
        ("user", [1, 2, 3]), ("assistant", [10, 11]), ("user", [20, 21, 22]), ("assistant", [12])]
    assert r.nodes[1].logprobs == [-0.1, -0.2] and r.reward == 0.5 and r.extra["num_turns"] == 4
    assert r.ending.evidence.output_tokens == 3 and r.extra["extra_fields"]["turn_scores"] == [0.1]
    assert {k: (v.score, v.weight) for k, v in r.rewards.items()} == {"acc": (0.0, 0.0), "format": (0.5, 0.0)}
    assert r.total_reward() == 0.5


def test_bad_token_line_is_a_record_error_the_next_is_read(tmp_path):
    p = lines(tmp_path, "d.jsonl", {"prompt_ids": [1], "response_ids": [2, 3], "response_mask": [1]},
              {"prompt_ids": [1], "response_ids": [2], "response_mask": [1]})
    err, ok = read(p)
    assert isinstance(err, RecordError) and err.line == 1 and err.field == "response_mask"
    assert isinstance(ok, Rollout)
