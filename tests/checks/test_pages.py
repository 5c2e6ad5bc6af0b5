"""Where findings show: the rollout page (badge at the message and token, link to the position),
the rollouts list (filter and column), the run page (chart per step, counts per kind, which
checks ran and why others could not decide), and the JSON twins with the same ids."""
from __future__ import annotations

import json
from urllib.parse import parse_qs, urlparse

from app.worker.sync import register_tokenizer
from ingest.checks import REGISTRY
from ingest.checks.context import load_context
from tests.checks.test_template_checks import FOLDER, two_turns
from tests.helpers import ingest, rollout, write_jsonl


def _data(engine, tmp_path):
    bad = rollout("bad", step=0, group="g0", index=0, reward=1.0)
    bad.nodes[1].token_ids = [-100, 121, 122]
    rs = [bad, rollout("ok0", step=0, group="g0", index=1, reward=0.0),
          rollout("flat0", step=1, group="g1", index=0, reward=1.0),
          rollout("flat1", step=1, group="g1", index=1, reward=1.0)]
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs))


def test_run_page_counts_charts_and_says_which_checks_ran(client, engine, tmp_path):
    _data(engine, tmp_path)
    d = client.get("/runs/r1.json").json()
    table = {c["kind"]: c for c in d["checks"]}
    assert list(table) == list(REGISTRY)  # every registered check, in registry order
    assert table["placeholder_token_id"]["rollouts"] == 1 and table["placeholder_token_id"]["checked"] == 4
    assert table["zero_variance_group"]["rollouts"] == 2  # a group finding counts its rollouts
    tm = table["template_mismatch"]
    assert tm["skipped"] == 4 and tm["checked"] == 0 and "no chat template stored" in tm["skip_reasons"][0]["reason"]
    assert d["chat_template"] is False
    fig = d["charts"]["findings"]
    bars = {t["name"]: t for t in fig["data"]}
    # the registry's findings chart: rollouts per kind
    assert set(bars) == {"placeholder_token_id", "zero_variance_group"}
    assert bars["placeholder_token_id"]["y"] == [1, 0] and bars["zero_variance_group"]["y"] == [0, 2]
    url = bars["placeholder_token_id"]["customdata"][0]
    assert parse_qs(urlparse(url).query) == {"step": ["0"], "flag": ["placeholder_token_id"]}
    assert [r["rollout_id"]
            for r in client.get(url.replace("/rollouts?", "/rollouts.json?")).json()["rollouts"]] == ["bad"]
    html = client.get("/runs/r1").text
    assert 'data-figure="fig-findings"' in html and 'id="checks"' in html
    assert "no chat template stored for this run" in html
    assert '<a href="/runs/r1/rollouts?flag=placeholder_token_id">1</a>' in html


def test_rollouts_list_column_has_rollout_and_group_kinds(client, engine, tmp_path):
    _data(engine, tmp_path)
    rows = {r["rollout_id"]: r for r in client.get("/runs/r1/rollouts.json").json()["rollouts"]}
    assert [f["kind"] for f in rows["bad"]["findings"]] == ["placeholder_token_id"]
    assert [f["kind"] for f in rows["flat0"]["findings"]] == ["zero_variance_group"]
    assert rows["bad"]["flags"] == ["placeholder_token_id"]  # the twin keeps its shape
    html = client.get("/runs/r1/rollouts").text
    assert 'href="/runs/r1/rollouts?flag=zero_variance_group"' in html
    assert [r["rollout_id"]
            for r in client.get("/runs/r1/rollouts.json?flag=zero_variance_group").json()["rollouts"]] == [
        "flat0", "flat1"]


def test_rollout_page_badges_link_to_the_token(client, engine, tmp_path):
    _data(engine, tmp_path)
    d = client.get("/runs/r1/rollouts/bad.json").json()
    (f,) = [f for f in d["findings"] if f["kind"] == "placeholder_token_id"]
    assert f["anchor"] == "t-3" and f["url"] == "#t-3"  # token 0 of message 1: offset 3 on the branch
    tok = d["messages"][1]["tokens"][0]
    assert tok["anchor"] == "t-3" and tok["flags"] == ["placeholder token id"]
    html = client.get("/runs/r1/rollouts/bad").text
    assert 'id="t-3"' in html and "tok-flagged" in html
    head = html.split('id="m-1"')[1].split("</header>")[0]
    assert 'href="#t-3"' in head and "placeholder token id" in head
    skipped = {s["kind"] for s in d["checks_skipped"]}
    assert {"template_mismatch", "tool_results_split"} - skipped == {"tool_results_split"}  # no parallel calls: decided


def test_a_tokenizer_folder_keeps_the_chat_template_with_the_run(client, engine, tmp_path):
    ctx = load_context(FOLDER)
    r = two_turns(ctx, tmp_path, keep_reasoning=False)
    path = tmp_path / "stripped.jsonl"
    path.write_text(json.dumps(r.to_json_dict()) + "\n")
    key = register_tokenizer(engine, FOLDER)
    assert ingest(engine, path, tokenizer_key=key, check_context=ctx).ok
    d = client.get("/runs/r/rollouts/t.json").json()
    kinds = [f["kind"] for f in d["findings"]]
    assert "reasoning_stripped" in kinds and "token_drift" not in kinds
    assert "template_mismatch" not in {s["kind"] for s in d["checks_skipped"]}  # it ran, and matched
    run = client.get("/runs/r.json").json()
    assert run["chat_template"] is True
    assert {c["kind"]: c for c in run["checks"]}["template_mismatch"]["checked"] == 1
