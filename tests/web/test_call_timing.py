"""A model call with a start and no end, and one that ends before it starts, through the real app
(SQLite and Postgres): the rollout page and its twin answer, the timeline marks both calls
("end not recorded", the negative duration shown, never a negative width), the latency figure
says how many calls it covers, and `timing_incomplete` selects the rollout (inspect_ai#4226)."""
from __future__ import annotations

import math

from app.views.rollout.timeline import MARK
from tests.helpers import ingest, rollout, write_jsonl

TURNS = [{"role": r, "content": f"{r} {k}"} for k in range(4) for r in ("user", "assistant")]


def _calls(times):
    return [{"node": 2 * k + 1, "model": "m", "time": t} for k, t in enumerate(times)]


def test_a_call_without_an_end_is_shown_and_never_fails_a_page(client, engine, tmp_path):
    broken = rollout("broken", run="tm", messages=TURNS, calls=_calls([
        {"start": 100.0, "end": 100.5}, {"start": 101.0, "end": 101.7}, {"start": 102.0},
        {"start": 104.0, "end": 103.7}]))
    clean = rollout("clean", run="tm", messages=TURNS, calls=_calls([
        {"start": 100.0, "end": 100.5}, {"start": 101.0, "end": 101.7}, {"start": 102.0, "end": 102.1},
        {"start": 104.0, "end": 104.2}]))
    assert ingest(engine, write_jsonl(tmp_path / "a.jsonl", [broken, clean]), run="tm").ok

    page = client.get("/runs/tm/rollouts/broken")
    assert page.status_code == 200
    d = client.get("/runs/tm/rollouts/broken.json")
    assert d.status_code == 200
    tl = d.json()["timeline"]
    rows = {r["call"]: r for r in tl["rows"] if r["kind"] == "model"}
    assert rows[2]["status"] == "open" and rows[2]["duration"] is None and rows[2]["width"] == MARK
    assert rows[3]["status"] == "negative" and math.isclose(rows[3]["duration"], -0.3)
    assert all(r["width"] > 0 and r["left"] >= 0 for r in tl["rows"])
    assert tl["model_latency"]["calls"] == 4 and tl["model_latency"]["timed"] == 2
    assert math.isclose(tl["model_latency"]["median"], 0.6)
    html = page.text
    assert "end not recorded" in html and "(ends before it starts)" in html
    assert "median 0.600 s over 2 of 4 calls" in html
    assert 'width: -' not in html

    found = [f for f in d.json()["findings"] if f["kind"] == "timing_incomplete"]
    assert sorted((f["detail"]["index"], f["detail"]["status"], f["detail"]["end"]) for f in found) == [
        (2, "open", None), (3, "negative", 103.7)]
    flagged = client.get("/runs/tm/rollouts.json?flag=timing_incomplete").json()["rollouts"]
    assert [r["rollout_id"] for r in flagged] == ["broken"]

    tl = client.get("/runs/tm/rollouts/clean.json").json()["timeline"]
    assert tl["model_latency"]["timed"] == 4 and all(r["status"] == "complete" for r in tl["rows"])
    assert "over 4 of 4 calls" in client.get("/runs/tm/rollouts/clean").text
    step = client.get("/runs/tm/steps/0")  # the step's latency says how many rollouts it covers
    assert step.status_code == 200 and "(over the 2 of 2 rollouts timed)" in step.text


def test_hostile_model_name_on_an_open_call_is_escaped(client, engine, tmp_path):
    r = rollout("h", run="tm", messages=TURNS[:2],
                calls=[{"node": 1, "model": "<script>x</script>", "time": {"start": 5}}])
    assert ingest(engine, write_jsonl(tmp_path / "h.jsonl", [r]), run="tm").ok
    html = client.get("/runs/tm/rollouts/h").text
    assert "<script>x</script>" not in html and "end not recorded" in html


def test_a_tool_call_whose_result_never_completed_is_marked_on_the_timeline(client, engine, tmp_path):
    """Inspect keeps a tool event's times on its result (`extra.timing`); without `completed` the
    call has a start and no end: the timeline (read from the stored nodes) marks it open."""
    msgs = [{"role": "user", "content": "list"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "ls", "arguments": "{}"}]},
            {"role": "tool", "tool_call_id": "c1", "content": "a b", "extra": {"timing": {"start": 10.0}}},
            {"role": "assistant", "content": "done"}]
    r = rollout("tool", run="tm", messages=msgs, calls=[{"node": 1, "time": {"start": 9.0, "end": 9.5}}])
    assert ingest(engine, write_jsonl(tmp_path / "t.jsonl", [r]), run="tm").ok
    d = client.get("/runs/tm/rollouts/tool.json").json()
    [row] = [r for r in d["timeline"]["rows"] if r["kind"] == "tool"]
    assert row["status"] == "open" and row["duration"] is None and row["name"] == "ls"
    assert d["timeline"]["tool_latency"] == {"calls": 1, "timed": 0, "total": None, "median": None}
    [f] = [f for f in d["findings"] if f["kind"] == "timing_incomplete"]
    assert f["detail"]["id"] == "c1" and f["detail"]["call"] == "tool"
    assert "end not recorded" in client.get("/runs/tm/rollouts/tool").text
