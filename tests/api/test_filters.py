"""One meaning of each rollouts-list filter on every list (docs/api.md, "Filters"): the page's
twin, its CSV, the facets, `/api/v1/runs/{run}/rollouts` and the export select the same
rollouts; `task` / `group` match exactly, and a trailing `*` asks for a prefix."""
from __future__ import annotations

import csv
import io
import json

import pytest

from tests.helpers import ingest, rollout, write_jsonl


@pytest.fixture
def loaded(client, engine, tmp_path):
    rs = [rollout(f"r{i}", step=i % 2, group=f"g-{i % 3}" if i < 6 else "g-10", task={"key": key})
          for i, key in enumerate(["calc/1", "calc/1", "calc/10", "calc/10", "text/1", "calc", "calc/1", "other"])]
    rs.append(rollout("nostep", step=None, task={"key": "calc/1"}))
    ingest(engine, write_jsonl(tmp_path / "f.jsonl", rs))
    return client


def _every_list(client, query: str) -> dict[str, list[str]]:
    page = client.get(f"/runs/r1/rollouts.json?{query}&limit=1000").json()
    api = client.get(f"/api/v1/runs/r1/rollouts?{query}&limit=1000").json()
    rows = list(csv.DictReader(io.StringIO(client.get(f"/runs/r1/rollouts.csv?{query}").text)))
    export = [json.loads(line)["id"] for line in client.get(f"/api/v1/runs/r1/export?{query}").text.splitlines()]
    facets = client.get(f"/runs/r1/facets.json?{query}").json()
    assert facets["total"] == page["total"]
    return {"page": [r["rollout_id"] for r in page["rollouts"]], "api": [r["rollout_id"] for r in api["items"]],
            "csv": [r["rollout_id"] for r in rows], "export": export}


@pytest.mark.parametrize("query, expected", [
    ("task=calc/1", {"r0", "r1", "r6", "nostep"}),  # exact: not calc/10
    ("task=calc/1*", {"r0", "r1", "r2", "r3", "r6", "nostep"}),  # prefix
    ("task=calc*", {"r0", "r1", "r2", "r3", "r5", "r6", "nostep"}),
    ("group=g-1", {"r1", "r4"}),  # exact: not g-10
    ("group=g-1*", {"r1", "r4", "r6", "r7"}),
    ("task=calc/1*&step=0", {"r0", "r2", "r6"}),
    ("step=1&steps=0-1", {"r1", "r3", "r5", "r7"}),  # filters combine with AND: step within steps
    ("step=1&steps=0-0", set()),  # and a step outside the range matches nothing
])
def test_every_list_gives_each_filter_one_meaning(loaded, query, expected):
    got = _every_list(loaded, query)
    assert set(got["page"]) == expected
    # one engine, one order (step, ingest order, no step last) on every list
    assert got["page"] == got["api"] == got["csv"] == got["export"], got
