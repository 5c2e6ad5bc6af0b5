"""`timing_incomplete` on real readers' output: an Inspect log whose model event never completed
(UKGovernmentBEIS/inspect_ai#4226, the real .eval fixture with `completed` removed), an Inspect
tool event with no `completed`, a tool result stamped before its call; the clean twins silent,
a rollout with no timing skipped. Latency figures leave the incomplete calls out."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

from ingest.checks import run_rollout_checks
from ingest.files import read_records
from ingest.formats.base import ReadContext
from ingest.formats.registry import detect
from ingest.metrics import model_latency, tool_latency
from ingest.source import open_source
from tests.conftest import data_path
from tests.helpers import rollout, write_jsonl

EVAL = data_path("realdata", "inspect_ai", "log_read_sample.eval")


def read(path: Path):
    src = open_source(path)
    [r] = list(read_records(detect(src), src, ReadContext(), []))
    return r


def _rewrite_eval(tmp_path: Path, edit) -> Path:
    """The real .eval zip with its one sample passed through `edit` (the rest byte for byte)."""
    out = tmp_path / "edited.eval"
    with zipfile.ZipFile(EVAL) as zin, zipfile.ZipFile(out, "w") as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name == "samples/1_epoch_1.json":
                sample = json.loads(data)
                edit(sample)
                data = json.dumps(sample).encode()
            zout.writestr(name, data)
    return out


def timing(r):
    res = run_rollout_checks(r)
    return ([f for f in res.findings if f.kind == "timing_incomplete"],
            [s for s in res.skipped if s.kind == "timing_incomplete"])


def test_an_inspect_model_event_that_never_completed(tmp_path):
    clean = read(EVAL)
    assert timing(clean) == ([], []) and clean.calls[0].time.end is not None

    def drop_completed(sample):
        [model] = [e for e in sample["events"] if e.get("event") == "model"]
        del model["completed"]

    r = read(_rewrite_eval(tmp_path, drop_completed))
    [f], _ = timing(r)
    assert f.node_idx == r.calls[0].node == 2 and f.position is None
    assert f.detail == {"call": "model", "index": 0, "start": r.calls[0].time.start, "end": None, "duration": None,
                        "status": "open"}
    assert model_latency(r) is None and model_latency(clean) > 0


def test_an_inspect_tool_event_without_completed_and_a_result_stamped_before_its_call(tmp_path):
    msgs = [{"role": "user", "content": "list"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "ls", "arguments": "{}"},
                                                              {"id": "c2", "name": "cat", "arguments": "{}"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a b", "extra": {"timing": {"start": 10.0}}},
            {"role": "tool", "tool_call_id": "c2", "content": "x", "extra": {"timing": {"start": 10.0, "end": 10.4}}},
            {"role": "assistant", "content": "done"}]
    path = write_jsonl(tmp_path / "t.jsonl", [rollout("t", messages=msgs, tokens=False)])
    r = read(path)
    [f], _ = timing(r)
    assert (f.node_idx, f.position) == (1, 0)
    assert f.detail["call"] == "tool" and f.detail["id"] == "c1" and f.detail["end"] is None

    stamped = [dict(m) for m in msgs[:2]] + [dict(msgs[2], extra={}), dict(msgs[3], extra={}), msgs[4]]
    r = rollout("s", messages=stamped, tokens=False)
    for i, ts in ((1, 20.0), (2, 19.5), (3, 20.25)):
        r.nodes[i].timestamp = ts
    [f], _ = timing(r)
    assert f.detail["id"] == "c1" and f.detail["status"] == "negative" and f.detail["duration"] == -0.5
    assert tool_latency(r) == 0.75  # ingest.metrics: each result minus its parent message; the -0.5 is left out

    for i, ts in ((1, 20.0), (2, 20.5), (3, 20.25)):
        r.nodes[i].timestamp = ts
    assert timing(r) == ([], [])


def test_no_timing_recorded_is_skipped():
    _, [s] = timing(rollout("n"))
    assert "no model or tool call has timing" in s.message
