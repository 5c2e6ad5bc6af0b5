"""Pages (issue 23) as a person sees them in Debian's chromium: the header's navigation, token
chips that break only between chips (never `typ|e`, `<end_of_turn>` never cut at the edge), table
cells that end in an ellipsis instead of breaking a word, and times in words with the exact time
on hover; long run and component names clipped on one line (the page fits 1400 px), run ids shown
whole when there is room, quarantine paths cut from the start, the "could not decide" line.
One live server for the module (a real Tunix trace with its tokenizer, and the extra rollouts)."""
from __future__ import annotations

import pytest

from tests.browser import live_server, open_page, tunix_database
from tests.helpers import http, rollout

pytestmark = pytest.mark.browser
DETAIL = "sandbox_crashed_while_running_the_hidden_tests_of_the_task"


LONG_NAME = "n" * 400  # a run name without spaces
COMP_175 = "c" * 175
COMP_5000 = "hostile-comp" + "x" * 4988


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from app.db.engine import make_engine
    from ingest.schema import Rollout
    from tests.helpers import ingest

    body = rollout("crashed-with-a-rather-long-rollout-identifier-0001", run="narrow", step=1, reward=None,
                   task={"key": "swe/" + "very_long_task_name_" * 3}).to_json_dict()
    crashed = Rollout.model_validate({**body, "ending": {"type": "error", "detail": DETAIL}})
    named = Rollout.model_validate({**rollout("n0", run="named").to_json_dict(),
                                    "run": {"id": "named", "name": LONG_NAME}})
    comps = {COMP_175: {"score": 1.0, "weight": 1.0}, COMP_5000: {"score": 0.5, "weight": 0.5}}
    members = [rollout(f"member-with-an-id-of-some-length-{i}", run="comps", group="G", index=i, reward=None,
                       rewards=comps) for i in range(3)]
    extra = [crashed, named, *members, rollout("text-only", run="comps", tokens=False),
             rollout("t0", run="tunix-grpo-orchestrator"), rollout("t1", run="tunix-grpo-orchestrator-trajectories")]
    folder = tmp_path_factory.mktemp("finish")
    url = tunix_database(folder, extra)
    bad = folder / "spool" / "some" / "deeply" / "nested" / "folder" / "cases" / "11-bad.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"schema": "rollscope/1", "id": 5}\n')
    engine = make_engine(url)
    assert not ingest(engine, bad).ok  # quarantined
    engine.dispose()
    with live_server(url) as base:
        yield base


CHIPS = """root => Array.from(root.querySelectorAll('.messages .tok')).map(e => {
  const r = e.getBoundingClientRect(), box = e.closest('.tokens').getBoundingClientRect();
  return {text: e.textContent, ws: getComputedStyle(e).whiteSpace, lines: e.getClientRects().length,
          height: r.height, right: r.right, edge: box.right, clipped: e.scrollWidth > e.clientWidth + 1,
          title: e.title};
})"""


def test_chips_break_only_between_chips_and_long_ones_end_in_an_ellipsis(server, browser):
    page, problems = open_page(browser, f"{server}/runs/tunix/rollouts/submitted.Trajectory")
    page.set_viewport_size({"width": 820, "height": 900})
    page.locator(".messages .tok").first.wait_for()
    chips = page.locator("body").evaluate(CHIPS)
    assert len(chips) > 50
    one_line = min(c["height"] for c in chips) * 1.6
    for c in chips:
        assert c["ws"] == "pre" and c["lines"] == 1 and c["height"] < one_line, c  # never broken inside
        assert c["right"] <= c["edge"] + 1, c  # never past the strip's edge
    eot = [c for c in chips if c["text"] == "<end_of_turn>"]
    assert eot and not any(c["clipped"] for c in eot)  # shown whole
    for c in chips:
        if c["clipped"]:
            assert c["text"] in c["title"], c  # a clipped piece is whole on hover
    # the header's sections, and the page's times
    assert page.locator("header nav.site a").all_inner_texts() == ["Runs", "Search", "Ingest", "Quarantine", "API"]
    assert problems == []
    page.close()


def test_narrow_cells_end_in_an_ellipsis_with_the_value_on_hover(server, browser):
    page, problems = open_page(browser, f"{server}/runs/narrow/rollouts")
    page.set_viewport_size({"width": 1280, "height": 700})
    cell = page.locator("#rollouts tbody tr td .clip", has_text="sandbox_")
    cell.wait_for()
    got = cell.evaluate("""e => ({title: e.title, clipped: e.scrollWidth > e.clientWidth,
        overflow: getComputedStyle(e).textOverflow, lines: Math.round(e.getBoundingClientRect().height /
        parseFloat(getComputedStyle(e).lineHeight))})""")
    assert got == {"title": DETAIL, "clipped": True, "overflow": "ellipsis", "lines": 1}, got
    fits = page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    assert fits
    page.goto(f"{server}/runs/narrow")
    when = page.locator("#run-metadata time").first  # in a closed <details>: its text, not what is drawn
    words = when.text_content()
    assert when.get_attribute("title").endswith(" UTC") and (words == "just now" or words.endswith(" ago")), words
    assert problems == []
    page.close()


def test_static_files_come_compressed_and_cached_over_real_http(server):
    import re


    html = http.get(f"{server}/runs").text
    for path in [*re.findall(r'(?:src|href)="(/static/[^"]+)"', html), "/static/vendor/plotly-2.35.2.min.js"]:
        r = http.get(server + path, headers={"Accept-Encoding": "gzip"})
        assert r.status_code == 200 and r.headers["content-encoding"] == "gzip", path
        assert r.headers["cache-control"] == "public, max-age=31536000, immutable", path  # every URL is versioned


FITS = "document.documentElement.scrollWidth <= window.innerWidth + 1"
CLIPS = """els => els.map(e => ({title: e.title, text: e.textContent, width: e.getBoundingClientRect().width,
  clipped: e.scrollWidth > e.clientWidth + 1, overflow: getComputedStyle(e).textOverflow,
  lines: Math.round(e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight))}))"""


def test_long_names_end_in_an_ellipsis_and_the_page_fits_the_window(server, browser):
    page, problems = open_page(browser, f"{server}/runs")
    page.set_viewport_size({"width": 1400, "height": 900})
    assert page.evaluate(FITS)  # a 400-character run name made the page 4,635 px wide
    ids = {c["text"]: c for c in page.locator("td.run-cell a .clip").evaluate_all(CLIPS)}
    for rid in ("tunix-grpo-orchestrator", "tunix-grpo-orchestrator-trajectories"):
        assert not ids[rid]["clipped"], ids[rid]  # room to spare: shown whole (was "tunix-grpo-orches…")
    name = page.locator("td.run-cell .sub .clip").evaluate_all(CLIPS)
    assert [(n["title"], n["clipped"], n["lines"], n["overflow"]) for n in name] == [(LONG_NAME, True, 1, "ellipsis")]
    # the group page: component headers clip, the rollout ids stay on one line
    page.goto(f"{server}/runs/comps/groups/G")
    table = page.locator("table.reward-components")
    heads = table.locator("thead .clip").evaluate_all(CLIPS)
    assert [h["title"][:12] for h in heads] == [COMP_175[:12], "hostile-comp"]  # (a stored name is capped)
    assert all(h["clipped"] and h["lines"] == 1 for h in heads), heads
    cells = table.locator("tbody td:first-child .clip").evaluate_all(CLIPS)
    assert len(cells) == 3 and all(c["lines"] == 1 and not c["clipped"] for c in cells), cells
    assert page.evaluate(FITS)  # was 1,761 px wide
    # the rollout page's components: one line each
    page.goto(f"{server}/runs/comps/rollouts/member-with-an-id-of-some-length-0")
    names = page.locator("#reward-components tbody td:first-child .clip").evaluate_all(CLIPS)
    assert sorted(n["title"][:12] for n in names) == [COMP_175[:12], "hostile-comp"]
    assert all(n["lines"] == 1 and n["clipped"] for n in names), names  # a name wrapped over hundreds of lines
    assert page.evaluate(FITS)
    # quarantine: a path clipped from its start keeps the file name in view
    page.set_viewport_size({"width": 900, "height": 700})
    page.goto(f"{server}/quarantine")
    path = page.locator("table.grid td .clip-start").first
    got = path.evaluate("""e => {
      const box = e.getBoundingClientRect(), text = e.firstElementChild.getBoundingClientRect();
      return {title: e.title, clipped: e.scrollWidth > e.clientWidth + 1, start_hidden: text.left < box.left - 1,
              end_shown: Math.abs(text.right - box.right) <= 1}; }""")
    assert got["title"].endswith("/cases/11-bad.jsonl") and got["clipped"], got
    assert got["start_hidden"] and got["end_shown"], got  # the head is cut, the file name shows
    assert problems == []
    page.close()


def test_checks_that_could_not_decide_are_one_line(server, browser):
    page, problems = open_page(browser, f"{server}/runs/comps/rollouts/text-only")
    page.set_viewport_size({"width": 320, "height": 700})
    summary = page.locator("details.checks-skipped > summary")
    got = summary.evaluate("""e => ({text: e.textContent, overflow: getComputedStyle(e).textOverflow,
      lines: Math.round(e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight))})""")
    assert " checks could not decide" in got["text"] and got["lines"] == 1 and got["overflow"] == "ellipsis", got
    assert problems == []
    page.close()
