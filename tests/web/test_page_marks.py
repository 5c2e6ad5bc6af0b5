"""What the pages mark, through the real HTTP app on SQLite and Postgres: a run without training
steps has no charts, the token legend appears only when it explains something, lost bytes are
one badge, suspected padding and every call of a duplicated tool-call id are marked."""
from __future__ import annotations

from tests.conftest import data_path
from tests.helpers import ingest, rollout, write_jsonl


def _case(engine, name: str, run: str = "cases"):
    assert ingest(engine, data_path("cases", name), run=run).ok


def _article(html: str, idx: int) -> str:
    """The HTML of one message article."""
    start = html.index(f'id="m-{idx}"')
    end = html.find("</article>", start)
    return html[start:end]


def test_run_without_steps_hides_charts(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("x", step=None), rollout("y", step=None)]))
    d = client.get("/runs/r1.json").json()
    assert d["charts"] is None and d["steps_recorded"] is False
    assert [s["step"] for s in d["steps"]] == [None] and d["steps"][0]["rollouts"] == 2
    html = client.get("/runs/r1").text
    assert "figure" not in html and "fig-endings" not in html
    assert "No training steps recorded: ingest with <code>--step</code> or include <code>step</code>" in html
    assert '<a href="/runs/r1/rollouts">–</a>' in html
    ingest(engine, write_jsonl(tmp_path / "b.jsonl", [rollout("z", run="r2", step=4)]))
    assert client.get("/runs/r2.json").json()["charts"] is not None
    assert "fig-endings" in client.get("/runs/r2").text


def test_token_legend_only_when_it_explains_something(client, engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("none", tokens=False), rollout("ids")]))
    assert 'class="legend"' not in client.get("/runs/r1/rollouts/none").text
    html = client.get("/runs/r1/rollouts/ids").text
    assert 'class="legend"' in html and "no tokenizer stored" in html
    assert html.count("tok-id") >= 6  # every bare id is set apart
    _case(engine, "08-utf8-split-across-tokens.json")  # token text from source-recorded bytes
    html = client.get("/runs/cases/rollouts/08-utf8-split-across-tokens%23variant_a").text
    assert 'class="legend"' in html and "no tokenizer stored" not in html and "tok-id" not in html


def test_bytes_lost_upstream_is_one_badge(client, engine):
    _case(engine, "08-utf8-split-across-tokens.json")
    html = client.get("/runs/cases/rollouts/08-utf8-split-across-tokens%23variant_b").text
    header = _article(html, 0).split("</header>")[0]
    assert header.count('class="flag') == 1
    assert header.count("bytes lost upstream") == 1 and ">bytes_lost_upstream<" not in header


def test_suspected_padding_marks_its_tokens(client, engine):
    _case(engine, "04-logprobs-length-mismatch.json")
    d = client.get("/runs/cases/rollouts/case04b.json").json()
    toks = [t for m in d["messages"] for t in m["tokens"]]
    assert [t["suspect"] for t in toks] == [False] * 4 + [True] * 2
    html = client.get("/runs/cases/rollouts/case04b").text
    assert html.count("tok-suspect") == 2 and "suspected padding" in html
    assert "tok-suspect" not in client.get("/runs/cases/rollouts/case04a").text


def test_duplicate_tool_call_id_lists_every_call(client, engine):
    _case(engine, "05-duplicate-tool-call-ids.json")
    d = client.get("/runs/cases/rollouts/case05.json").json()
    dup = {f["detail"]["id"]: f["calls"] for f in d["findings"] if f["kind"] == "duplicate_tool_call_id"}
    assert [(c["node"], c["position"]) for c in dup["call_X"]] == [(1, 0), (3, 0)]
    assert [(c["node"], c["position"]) for c in dup["call_Y"]] == [(5, 0), (5, 1)]
    findings = client.get("/runs/cases/rollouts/case05").text.split('class="findings"')[1].split("</section>")[0]
    for text in ['href="#m-1">#1 call 0</a>', 'href="#m-3">#3 call 0</a>',
                 'href="#m-5">#5 call 0</a>', 'href="#m-5">#5 call 1</a>']:
        assert text in findings
