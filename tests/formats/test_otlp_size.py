"""The OTLP export grows with the rollout, not with its square: each `chat` span's input holds
only the messages after the previous model output on its branch (`rollscope.input.elided`,
`rollscope.input.after`; docs/formats-otlp.md), and reading it back is still exact."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ingest.export import Export
from ingest.formats import native
from ingest.formats.base import ReadContext
from ingest.formats.registry import detect
from ingest.otel.read import rollout_from_spans
from ingest.otel.semconv import AFTER, ELIDED, NODES, ROLLOUT
from ingest.otel.write import spans_from_rollout
from ingest.source import open_source
from tests.conftest import data_path
from tests.formats.test_otlp import agent_run, read_file, sdk_spans, write_otlp_json


def _many_turns(tmp_path, turns: int):
    script = data_path("cases", "15-17-make-large-cases.py")
    subprocess.run([sys.executable, str(script), str(tmp_path), "0.001", str(turns)], check=True, capture_output=True)
    src = open_source(tmp_path / "17-many-turns.json")
    [r] = list(detect(src).read(src, ReadContext(run_id="big")))
    return r


def _shape(r):
    return [(n.parent, n.message.role, n.message.text(), n.message.tool_call_id,
             [(c.id, c.name, c.arguments) for c in n.message.tool_calls or []]) for n in r.nodes]


def _paths(r):
    """Each node as the messages from the root to it, sorted: the graph whatever the numbering."""
    keys = [row[1:] for row in _shape(r)]
    paths = []
    for i in range(len(r.nodes)):
        p, j = [], i
        while j is not None:
            p.append(repr(keys[j]))
            j = r.nodes[j].parent
        paths.append(tuple(p[::-1]))
    return sorted(paths)


@pytest.mark.slow
def test_export_of_500_turns_is_linear_and_round_trips(tmp_path):
    r = _many_turns(tmp_path, 500)
    assert len(r.nodes) == 1002
    size_native = len(native.write_line(r))
    data = b"".join(Export([r], "otlp"))
    # The whole history in every span would be ~250x the native size here (measured 3.9 GB for
    # 5,000 turns); one copy of each message plus the span framing is a few times it.
    assert len(data) <= 6 * size_native, (len(data), size_native)
    out = tmp_path / "x.otlp.jsonl"
    out.write_bytes(data)
    [back] = read_file(out)
    a, b = r.to_json_dict(), back.to_json_dict()
    a.pop("source"), b.pop("source")
    assert a == b
    out.write_bytes(b"".join(Export([back], "otlp")))
    assert out.read_bytes() == data  # OTLP → Rollscope → OTLP gives the same spans

    spans = json.loads(data)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    attrs = [{x["key"]: x["value"] for x in s["attributes"]} for s in spans if s["name"].startswith("chat")]
    first, second = attrs[0], attrs[1]
    assert [m["role"] for m in json.loads(first["gen_ai.input.messages"]["stringValue"])] == ["user"]
    assert ELIDED not in first
    # The second call sees user, assistant, tool: only the tool result is new since the first.
    new = json.loads(second["gen_ai.input.messages"]["stringValue"])
    assert [m["role"] for m in new] == ["tool"] and second[ELIDED] == {"intValue": "2"}
    assert second[AFTER]["stringValue"] == spans[1]["spanId"]


def test_elided_inputs_alone_rebuild_the_graph_in_any_span_order(tmp_path):
    """Without Rollscope's exact root attributes (a viewer's copy, or spans dropped on the
    way), `rollscope.input.after` still puts each input under the right node, branches included,
    whatever order the spans arrive in."""
    [r] = read_file(write_otlp_json(tmp_path / "a.json", sdk_spans(lambda t: agent_run(t, subagent=True))))
    assert len({n.parent for n in r.nodes}) < len(r.nodes)  # a branch
    big = _many_turns(tmp_path, 50)
    for rollout in (r, big):
        spans = spans_from_rollout(rollout)
        assert any(ELIDED in s.attributes for s in spans)
        for s in spans:
            s.attributes.pop(ROLLOUT, None)
            s.attributes.pop(NODES, None)
            s.start_ns = s.end_ns = None  # no times: the file order decides
        assert _shape(rollout_from_spans(spans)) == _shape(rollout)
        root, rest = spans[0], spans[1:]  # in another order the nodes are numbered otherwise
        assert _paths(rollout_from_spans([root, *reversed(rest)])) == _paths(rollout)
