"""Property tests (hypothesis) per reader, seeded from the real files: a real record with one part
replaced by any JSON value, or removed, either lands as a Rollout or comes back as a RecordError
with a reason; nothing raises out of a reader, and what lands can be written as strict JSON.
Examples are bounded (`max_examples`) so the suite stays fast."""
from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.errors import RecordError
from ingest.formats import registry
from ingest.formats.base import ReadContext
from ingest.jsonio import dumps
from ingest.schema import Rollout
from ingest.source import open_source
from tests.conftest import FIXTURES

REAL = FIXTURES / "realdata"
SEEDS = {  # reader → (file, kind): the first record of a real file
    "verifiers": (REAL / "verifiers/train_multi_tool.jsonl", "jsonl"),
    "nemo-gym": (REAL / "nemo-gym/example_multi_step.first1.jsonl", "jsonl"),
    "atropos": (REAL / "atropos/rubiks_process_results_32.line1.jsonl", "jsonl"),
    "atif": (REAL / "atif/multi_tool.trajectory.json", "json"),
    "tunix": (REAL / "tunix/v0.1.7/submitted.Trajectory.json", "json"),
    "tau-bench": (REAL / "tau-bench/gpt-4o-airline.sample.json", "json"),
    "chat": (FIXTURES / "cases/05-duplicate-tool-call-ids.json", "json"),
    "verl": (None, "jsonl"),
    "native": (FIXTURES / "cases/30-mask-on-env-tokens.jsonl", "jsonl"),
}
VERL_SEED = {"prompt_ids": [1, 2, 3], "response_ids": [4, 5, 6, 7], "response_mask": [1, 1, 0, 1],
             "response_logprobs": [-0.1, -0.2, 0.0, -0.3], "reward_score": 1.0, "num_turns": 3}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _seed(name: str) -> Any:
    path, kind = SEEDS[name]
    if path is None:
        return VERL_SEED
    text = path.read_text()
    doc = json.loads(text.splitlines()[0]) if kind == "jsonl" else json.loads(text)
    if name == "tau-bench":
        doc = doc[:1]
    if name == "atropos":  # keep it small: two samples, short token lists
        for k in ("tokens", "masks", "token_scores", "token_weights", "messages", "scores", "parsed_actions"):
            if isinstance(doc.get(k), list):
                doc[k] = doc[k][:2]
    return doc


def _paths(value: Any, prefix: tuple = (), out: list | None = None, limit: int = 400) -> list[tuple]:
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(value, dict):
        for k, v in value.items():
            out.append(prefix + (k,))
            _paths(v, prefix + (k,), out, limit)
    elif isinstance(value, list):
        for i, v in enumerate(value[:6]):
            out.append(prefix + (i,))
            _paths(v, prefix + (i,), out, limit)
    return out


def _mutate(doc: Any, path: tuple, new: Any, delete: bool) -> Any:
    doc = json.loads(json.dumps(doc))
    cur = doc
    for p in path[:-1]:
        cur = cur[p]
    last = path[-1]
    if delete:
        if isinstance(cur, dict):
            cur.pop(last, None)
        else:
            cur.pop(last)
    else:
        cur[last] = new
    return doc


@pytest.mark.parametrize("name", sorted(SEEDS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(data=st.data())
def test_any_mutation_lands_or_is_quarantined(name, data, tmp_path_factory):
    seed = _seed(name)
    paths = _paths(seed)
    path = data.draw(st.sampled_from(paths))
    delete = data.draw(st.booleans())
    doc = _mutate(seed, path, data.draw(json_values), delete)
    kind = SEEDS[name][1]
    out = tmp_path_factory.mktemp("prop") / ("x.jsonl" if kind == "jsonl" else "x.json")
    text = json.dumps(doc, allow_nan=True)
    out.write_text(text + "\n" if kind == "jsonl" else json.dumps(doc, allow_nan=True, indent=1))
    try:
        source = open_source(out)
    except RecordError as exc:
        assert exc.message
        return
    reader = registry.get(name)
    items = list(reader.read(source, ReadContext(run_id="p")))
    for item in items:
        assert isinstance(item, (Rollout, RecordError)), type(item)
        if isinstance(item, RecordError):
            assert item.message and item.file
        else:
            dumps(item.to_json_dict())  # strict JSON, every digit kept
