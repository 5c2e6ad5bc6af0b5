"""The native format: round trip, unknown fields kept, the committed JSON Schema is current,
and lockstep arrays are fitted and reported, not rejected."""
from __future__ import annotations

import json
import math
from pathlib import Path

import orjson

from ingest.formats import native
from ingest.formats.base import ReadContext
from ingest.schema import Rollout, json_schema
from ingest.source import open_source
from tests.helpers import rollout

ROOT = Path(__file__).resolve().parents[2]


def test_round_trip_keeps_unknown_fields_at_every_level(tmp_path):
    line = rollout("rt", group="g", index=2).to_json_dict()
    line["collector_version"] = "7.1"
    line["nodes"][1]["routed_experts"] = [[1, 2]]
    line["nodes"][1]["message"]["provider_state"] = [{"k": "v"}]
    line["ending"]["evidence"]["gpu"] = "h100"
    path = tmp_path / "rt.jsonl"
    path.write_text(json.dumps(line) + "\n")
    (r,) = list(native.read(open_source(path), ReadContext()))
    assert r.extra["collector_version"] == "7.1"
    assert r.nodes[1].extra["routed_experts"] == [[1, 2]]
    assert r.nodes[1].message.extra["provider_state"] == [{"k": "v"}]
    again = Rollout.model_validate(orjson.loads(native.write_line(r)))
    assert again.to_json_dict() == r.to_json_dict()


def test_short_arrays_are_padded_and_recorded_not_rejected():
    r = Rollout.model_validate({"schema": "rollscope/1", "id": "x", "run": {"id": "r"}, "nodes": [
        {"message": {"role": "assistant", "content": "hi"}, "token_ids": [1, 2, 3], "mask": [True, True, True],
         "logprobs": [-0.1]}]})
    node = r.nodes[0]
    assert node.logprobs == [-0.1, None, None]
    assert node.extra["source_lengths"] == {"logprobs": 1}


def test_non_finite_reward_survives_strict_json():
    r = rollout("nan", reward=math.nan)
    line = native.write_line(r)
    assert b"NaN" not in line
    assert Rollout.model_validate(orjson.loads(line)).reward_status() == "nan"


def test_committed_json_schema_is_current():
    committed = json.loads((ROOT / "docs" / "rollscope-1.schema.json").read_text())
    assert committed == json.loads(json.dumps(json_schema())), "run `make schema`"


def test_wrong_schema_version_is_a_clear_error(tmp_path):
    path = tmp_path / "v2.jsonl"
    path.write_text(json.dumps({"schema": "rollscope/2", "id": "x", "run": {"id": "r"}}) + "\n")
    (err,) = list(native.read(open_source(path), ReadContext()))
    assert err.line == 1 and err.field == "schema" and "rollscope/1" in err.message
