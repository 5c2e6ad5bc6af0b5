"""The native reader's fast path (ingest/fastdecode.py) decodes exactly what pydantic decodes:
the same rollout (`to_json()` byte for byte, field values with their types, `extra`, fields set,
private attributes) and the same numpy arrays as `node_arrays` builds from pydantic's nodes; a
line it does not find plain goes to pydantic, so accepted and rejected lines and their error
messages (file, line, field) are those of the pydantic path."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import orjson
import pytest
from pydantic import BaseModel

from ingest import demo, fastdecode
from ingest.arrays import node_arrays
from ingest.errors import RecordError
from ingest.formats import native
from ingest.formats.base import ReadContext
from ingest.jsonio import dumps
from ingest.schema import Rollout
from ingest.source import open_source
from tests.conftest import FIXTURES
from tests.helpers import bench_workload


def _state(m):
    """A model's whole state, recursively, each scalar with its type (5 is not 5.0, 1 not True),
    every dict with its key order; the private `_arrays` cache aside."""
    if isinstance(m, BaseModel):
        private = m.__pydantic_private__
        if private is not None:
            private = {k: v for k, v in private.items() if k != "_arrays"}
        return (type(m).__name__, {k: _state(v) for k, v in m.__dict__.items()}, sorted(m.model_fields_set),
                _state(m.__pydantic_extra__), private)
    if isinstance(m, list):
        return [_state(v) for v in m]
    if isinstance(m, dict):
        return list(m), {k: _state(v) for k, v in m.items()}
    if isinstance(m, float) and m != m:
        return "nan"
    return type(m).__name__, m


def _arrays_equal(a, b) -> bool:
    for name in ("token_ids", "mask", "is_content", "logprobs", "advantages", "reference_logprobs"):
        x, y = getattr(a, name), getattr(b, name)
        if (x is None) != (y is None):
            return False
        if x is not None and (x.dtype != y.dtype or not np.array_equal(x, y, equal_nan=True)):
            return False
    return True


def decoded(raw: bytes) -> str:
    """'fast', 'slow' (pydantic accepts, the fast path leaves it to pydantic) or 'refused' (both);
    asserts the fast path's rollout is pydantic's."""
    try:
        slow = Rollout.model_validate_json(raw)
    except ValueError:
        slow = None
    fast = fastdecode.rollout(raw)
    if fast is None:
        return "slow" if slow is not None else "refused"
    assert slow is not None, f"the fast path accepted a line pydantic refuses: {raw[:300]!r}"
    assert fast.to_json() == slow.to_json()
    assert _state(fast) == _state(slow)
    for a, b in zip(fast.nodes, slow.nodes, strict=True):
        cached = a.__pydantic_private__["_arrays"]
        assert (cached is not None) == bool(a.token_ids)  # handed over for every node with tokens
        assert node_arrays(a) is cached if cached is not None else True
        assert _arrays_equal(node_arrays(a), node_arrays(b))
    return "fast"


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def workload():
    return bench_workload()


def test_real_files_decode_the_same_and_all_go_fast(tmp_path, workload):
    demo.write(tmp_path / "demo.jsonl", tokenizer=False, steps=3, groups=4, group_size=4)
    workload.write(tmp_path / "agentic.jsonl", 8)
    workload.write_text(tmp_path / "text.jsonl", 8)
    workload.write_text(tmp_path / "long.jsonl", 1, turns=500)
    for name in ("demo", "agentic", "text", "long"):
        lines = _lines(tmp_path / f"{name}.jsonl")
        assert lines and {decoded(line) for line in lines} == {"fast"}, name


def test_the_native_case_fixtures_decode_the_same():
    paths = sorted(FIXTURES.glob("cases/*.jsonl"))
    seen = [decoded(line) for p in paths for line in _lines(p) if b'"rollscope/1"' in line]
    assert "fast" in seen


def _base() -> dict:
    return {"schema": "rollscope/1", "id": "r1", "run": {"id": "run"}, "step": 3,
            "group": {"id": "g", "index": 0}, "reward": 1.0, "ending": {"type": "submitted"},
            "calls": [{"node": 1, "model": "m", "time": {"start": 1.0, "end": 2.5}}],
            "nodes": [
                {"parent": None, "message": {"role": "user", "content": "fix it"}, "token_ids": [5, 6, 7],
                 "mask": [False, False, False]},
                {"parent": 0, "message": {"role": "assistant", "content": "ok", "tool_calls": [
                    {"id": "c1", "name": "shell", "arguments": "{}"}]}, "sampled": True, "timestamp": 10.5,
                 "token_ids": [8, 9, 10, 11], "mask": [True, True, True, True],
                 "is_content": [True, True, True, False], "logprobs": [-0.5, -0.25, None, -1.0],
                 "advantages": [0.5, 0.5, 0.5, 0.5], "policy_version": 2},
                {"parent": 1, "message": {"role": "tool", "content": "done", "tool_call_id": "c1"}}]}


def _text_only(d: dict) -> dict:
    for node in d["nodes"]:
        for key in ("token_ids", "mask", "is_content", "logprobs", "advantages"):
            node.pop(key, None)
    return d


def _node(d: dict, **change) -> dict:
    d["nodes"][1].update(change)
    return d


# (name, edit of the base record, where it must go): every odd value a writer has been seen to
# write, and values only a hostile or broken writer would
CASES = [
    ("plain", lambda d: d, "fast"),
    ("mask as 0/1 ints", lambda d: _node(d, mask=[1, 0, 1, True]), "fast"),
    ("logprobs as ints", lambda d: _node(d, logprobs=[0, -1, None, -2]), "fast"),
    ("int timestamp", lambda d: _node(d, timestamp=10), "fast"),
    ("null advantages", lambda d: _node(d, advantages=None), "fast"),
    ("empty arrays", lambda d: _node(d, mask=[], logprobs=[], is_content=[]), "fast"),
    ("extra given", lambda d: _node(d, extra={"a": [1, 2]}), "fast"),
    ("trainer logprobs that fit", lambda d: _node(d, extra={"trainer_logprobs": [-1.0, -1.0, -1.0, -1.0]}), "fast"),
    ("content parts", lambda d: d["nodes"][2]["message"].update(
        content=[{"type": "text", "text": "a"}, {"type": "image_url", "n": 18446744073709551616}]) or d, "fast"),
    ("extra keys in the envelope", lambda d: d.update(collector="x") or d["run"].update(k=1) or d, "fast"),
    ("big int in envelope extra", lambda d: d.update(big=123456789012345678901234567890) or d, "fast"),
    ("big int, no tokens", lambda d: _text_only(d).update(big=-123456789012345678901234567890) or d, "fast"),
    ("big float, no tokens", lambda d: _text_only(d).update(big=1e300) or d, "fast"),
    ("id -1 (not recorded)", lambda d: _node(d, token_ids=[-1, 9, 10, 11]), "fast"),
    ("no nodes", lambda d: d.pop("nodes") and d.pop("calls") and d, "fast"),
    ("bool id", lambda d: _node(d, token_ids=[8, True, 10, 11]), "refused"),
    ("float id", lambda d: _node(d, token_ids=[8, 2.0, 10, 11]), "refused"),
    ("null id", lambda d: _node(d, token_ids=[8, None, 10, 11]), "refused"),
    ("string id", lambda d: _node(d, token_ids=[8, "9", 10, 11]), "refused"),
    ("id past int32", lambda d: _node(d, token_ids=[8, 2**31, 10, 11]), "refused"),
    ("id past int64", lambda d: _node(d, token_ids=[8, 2**70, 10, 11]), "refused"),
    ("id below int32", lambda d: _node(d, token_ids=[8, -(2**31) - 1, 10, 11]), "refused"),
    ("placeholder -100", lambda d: _node(d, token_ids=[8, -100, 10, 11]), "slow"),
    ("mask 2", lambda d: _node(d, mask=[1, 2, 1, 1]), "refused"),
    # no lax conversion of strings or booleans (ingest/schema.py `Flag`, `Number`, `NodeIndex`),
    # decided by the same pydantic-core schema on both paths; a float loss mask's 1.0 / 0.0 is read
    ("mask as strings", lambda d: _node(d, mask=["true", "false", "1", "0"]), "refused"),
    ("mask 'yes'", lambda d: _node(d, mask=[True, "yes", True, True]), "refused"),
    ("mask '1'", lambda d: _node(d, mask=[True, "1", True, True]), "refused"),
    ("mask 0.5", lambda d: _node(d, mask=[True, 0.5, True, True]), "refused"),
    ("mask as floats", lambda d: _node(d, mask=[1.0, 0.0, 1.0, 1.0]), "fast"),
    ("is_content as a string", lambda d: _node(d, is_content=[True, "no", True, False]), "refused"),
    ("mask null", lambda d: _node(d, mask=None), "refused"),
    ("bool logprob", lambda d: _node(d, logprobs=[True, -1.0, None, -1.0]), "refused"),
    ("numeric string logprob", lambda d: _node(d, logprobs=["-0.1", -1.0, None, -1.0]), "refused"),
    ("string logprob", lambda d: _node(d, logprobs=["x", -1.0, None, -1.0]), "refused"),
    ("string advantage", lambda d: _node(d, advantages=["0.5", 0.5, 0.5, 0.5]), "refused"),
    ("bool loss weight", lambda d: _node(d, loss_weights={"a": [True, 1.0, 0, 0]}), "refused"),
    ("string node reward", lambda d: _node(d, reward="1.0"), "refused"),
    ("string parent", lambda d: _node(d, parent="0"), "refused"),
    ("float parent", lambda d: _node(d, parent=0.0), "refused"),
    ("bool parent", lambda d: _node(d, parent=False), "refused"),
    ("int sampled", lambda d: _node(d, sampled=1), "fast"),
    ("string sampled", lambda d: _node(d, sampled="yes"), "refused"),
    ("string call node", lambda d: d["calls"][0].update(node="1") or d, "refused"),
    ("short logprobs", lambda d: _node(d, logprobs=[-0.5]), "slow"),
    ("long mask", lambda d: _node(d, mask=[True] * 6), "slow"),
    ("arrays without ids", lambda d: _node(d, token_ids=[]), "slow"),
    ("trainer logprobs off by one", lambda d: _node(d, extra={"trainer_logprobs": [-1.0] * 3}), "slow"),
    ("unknown node key", lambda d: _node(d, routed_experts=[[1, 2]]), "slow"),
    ("unknown message key", lambda d: d["nodes"][1]["message"].update(provider_state={}) or d, "slow"),
    ("unknown tool call key", lambda d: d["nodes"][1]["message"]["tool_calls"][0].update(type="function") or d,
     "slow"),
    ("bool timestamp", lambda d: _node(d, timestamp=True), "slow"),
    ("string timestamp", lambda d: _node(d, timestamp="10"), "slow"),
    ("parent after the node", lambda d: _node(d, parent=2), "refused"),
    ("call naming no node", lambda d: d["calls"][0].update(node=9) or d, "refused"),
    ("unknown role", lambda d: d["nodes"][1]["message"].update(role="robot") or d, "refused"),
    ("bool policy version", lambda d: _node(d, policy_version=True), "refused"),
    ("loss weights", lambda d: _node(d, loss_weights={"a": [1, 1.0, 0, 0]}), "fast"),
    ("wrong schema field type", lambda d: d.update(step=-1) or d, "refused"),
    # the native export's marker of NaN / ±Infinity token values (Node._non_finite_values)
    ("non-finite marker", lambda d: _node(d, logprobs=[None, -1.0, None, -1.0],
                                          non_finite={"logprobs": {"nan": [0], "-inf": [2]}}), "slow"),
    ("non-finite marker on a number", lambda d: _node(d, logprobs=[-1.0, -1.0, None, -1.0],
                                                      non_finite={"logprobs": {"nan": [0]}}), "refused"),
]


@pytest.mark.parametrize(("edit", "where"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_odd_records_go_to_pydantic_and_decode_the_same(edit, where):
    raw = dumps(edit(copy.deepcopy(_base())))
    assert decoded(raw) == where


@pytest.mark.parametrize("text", [
    b'"logprobs": [NaN, -1.0, null, Infinity]', b'"timestamp": NaN', b'"token_ids": [8, 9, 10, 1e1]',
    b'"token_ids": [8, 9, 10, 11], "token_ids": [1, 2, 3, 4]', b'"sampled": 1', b'"sampled": "yes"',
    b'"reward": 1e400', b'"timestamp": -0.0, "reward": 18446744073709551616',
], ids=["nan logprobs", "nan timestamp", "exponent id", "duplicate key", "int sampled", "string sampled",
        "float overflow", "big int reward"])
def test_text_orjson_would_not_write_decodes_the_same(text):
    raw = orjson.dumps(_base()).replace(b'"sampled":true', b"%s, \"sampled\":true" % text, 1)
    assert raw != orjson.dumps(_base())
    decoded(raw)


@pytest.mark.parametrize("raw", [
    '{"schema": "rollscope/1", "id": "\\ud800x", "run": {"id": "r"}}',
    '{"schema": "rollscope/1", "id": "x", "run": {"id": "r"}, "nodes": [{"message": {"role": "user", '
    '"content": "lone \\udc00 surrogate"}, "token_ids": [1], "mask": [true]}]}',
    '{"schema": "rollscope/1", "id": ".", "run": {"id": "r"}}',
    '{"schema": "rollscope/1", "id": "x", "run": {"id": "r"}, "nodes": [}',
    '[1, 2]',
])
def test_broken_or_refused_lines_decode_the_same(raw):
    decoded(raw.encode())


def test_the_reader_accepts_and_rejects_the_same_lines_with_the_same_messages(tmp_path, monkeypatch):
    lines = [dumps(edit(copy.deepcopy(_base()))) for _, edit, _ in CASES]
    lines.append(b'{"schema": "rollscope/1", "id": "x", "run": {"id": "r"}, "nodes": [}')
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")

    def read() -> list[str]:
        out = list(native.read(open_source(path), ReadContext()))
        return [str(r) if isinstance(r, RecordError) else r.to_json().decode() for r in out]

    fast = read()
    monkeypatch.setattr(fastdecode, "rollout", lambda raw: None)
    slow = read()
    assert fast == slow
    assert sum(s.startswith("{") for s in fast) == sum(w != "refused" for _, _, w in CASES)
    assert any("nodes[1]" in s for s in fast if not s.startswith("{")), fast


def test_the_schema_copy_has_no_python_hook_on_nodes():
    def hooks(s, inside=False):
        if isinstance(s, list):
            return [h for x in s for h in hooks(x, inside)]
        if not isinstance(s, dict):
            return []
        found = [s["function"]] if inside and s.get("type", "").startswith("function-") else []
        if inside and s.get("type") == "model" and "post_init" in s:
            found.append("post_init")
        for k, v in s.items():
            if k == "fields" and "nodes" in v and not inside:
                found += hooks(v["nodes"], True) + hooks({n: f for n, f in v.items() if n != "nodes"}, False)
            else:
                found += hooks(v, inside)
        return found

    copied = fastdecode._schema(Rollout.__pydantic_core_schema__)
    assert hooks(copied) == []
    assert len(hooks(Rollout.__pydantic_core_schema__)) >= 6  # the original keeps them


def test_a_node_with_its_arrays_built_equals_one_without():
    raw = orjson.dumps(_base())
    fast, slow = fastdecode.rollout(raw), Rollout.model_validate_json(raw)
    assert fast.nodes[1].__pydantic_private__["_arrays"] is not None
    assert slow.nodes[1].__pydantic_private__["_arrays"] is None
    assert fast == slow
    slow.nodes[1].token_ids = [1, 2, 3, 4]
    assert fast != slow
