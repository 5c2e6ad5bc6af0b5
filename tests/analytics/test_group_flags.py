"""A group-scope finding (zero_variance_group: rollout_pk NULL, the group's identity) counts for
every member of its group wherever findings are counted per rollout: the list's `flag` facet
(from the step rollups, the task rollups and the rows), the findings chart, a step's story; and
each of those counts is the total of the list its link opens (`flag=<kind>` selects the members),
through the real HTTP app on SQLite and Postgres."""
from __future__ import annotations

from urllib.parse import urlencode

from tests.helpers import ingest, rollout, write_jsonl

KIND = "zero_variance_group"


def _fixture(engine, tmp_path) -> None:
    rs = []
    # step 0: "flat" has no learning signal (all 1.0), "mixed" has
    for i, ending in enumerate(["submitted", "submitted", "truncated", "submitted"]):
        rs.append(rollout(f"flat-{i}", run="G", step=0, group="flat", index=i, reward=1.0, ending=ending,
                          task={"key": "t-a" if i < 2 else "t-b"}))
        rs.append(rollout(f"mixed-{i}", run="G", step=0, group="mixed", index=i, reward=float(i % 2),
                          task={"key": "t-a"}))
    # a flat group whose members sit in steps 1 and 2 (each step counts its own members)
    for i in range(3):
        rs.append(rollout(f"span-{i}", run="G", step=1 if i < 2 else 2, group="span", index=i, reward=0.5,
                          task={"key": "t-c"}))
    rs.append(rollout("mixed2-0", run="G", step=2, group="mixed2", index=0, reward=0.0, task={"key": "t-c"}))
    rs.append(rollout("mixed2-1", run="G", step=2, group="mixed2", index=1, reward=1.0, task={"key": "t-c"}))
    ingest(engine, write_jsonl(tmp_path / "g.jsonl", rs))


def _flag_count(facets: dict) -> int:
    return next((v["count"] for v in facets["flag"] if v["value"] == KIND), 0)


def test_group_findings_count_for_their_members_in_facets_chart_and_list(client, engine, tmp_path):
    _fixture(engine, tmp_path)
    members = {0: 4, 1: 2, 2: 1}  # flagged members per step
    # the list filter selects the members of the flagged groups
    for step, n in members.items():
        got = client.get(f"/runs/G/rollouts.json?step={step}&flag={KIND}").json()
        assert got["total"] == n, step
    # the flag facet, whichever path counts it (step rollups, ending within them, task rollups,
    # per-step task rollups, the rows under the facet budget), equals the list it links to
    for q in ({}, {"step": 0}, {"steps": "1-2"}, {"ending": "submitted"}, {"ending": "truncated"},
              {"task": "t-*"}, {"task": "t-b"}, {"task": "t-a", "ending": "submitted"}, {"group": "fl*"},
              {"group": "span", "step": 1}, {"reward_min": 0.5}):
        facets = client.get(f"/runs/G/facets.json?{urlencode(q)}").json()["facets"]
        listed = client.get(f"/runs/G/rollouts.json?{urlencode(q | {'flag': KIND})}").json()["total"]
        assert listed > 0, q
        assert _flag_count(facets) == listed, q
        value = next(v for v in facets["flag"] if v["value"] == KIND)
        assert {k: str(v) for k, v in value["params"].items()} == {k: str(v) for k, v in q.items()} | {"flag": KIND}
    # the findings chart: each point is the total of the list its click opens
    fig = client.get("/runs/G/charts/findings.json").json()["figure"]
    series = next(d for d in fig["data"] if d["name"] == KIND)
    assert dict(zip(series["x"], series["y"])) == members
    for url, y in zip(series["customdata"], series["y"]):
        path, _, query = url.partition("?")
        assert client.get(f"{path}.json?{query}").json()["total"] == y, url
    # the run page's chart and checks table say the same
    run = client.get("/runs/G.json").json()
    embedded = next(d for d in run["charts"]["findings"]["data"] if d["name"] == KIND)
    assert dict(zip(embedded["x"], embedded["y"])) == members
    # a step's story lists the finding with the members' count and the same link
    story = client.get("/runs/G/steps/0.json").json()
    found = next(f for f in story["findings"] if f["kind"] == KIND)
    assert found["count"] == 4
