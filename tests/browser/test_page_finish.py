"""Pages (issue 23) as a person sees them in Debian's chromium: the header's navigation, token
chips that break only between chips (never `typ|e`, `<end_of_turn>` never cut at the edge), table
cells that end in an ellipsis instead of breaking a word, and times in words with the exact time
on hover. One live server for the module (a real Tunix trace with its tokenizer)."""
from __future__ import annotations

import pytest

from tests.browser import live_server, open_page, tunix_database
from tests.helpers import rollout

pytestmark = pytest.mark.browser
DETAIL = "sandbox_crashed_while_running_the_hidden_tests_of_the_task"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from ingest.schema import Rollout

    body = rollout("crashed-with-a-rather-long-rollout-identifier-0001", run="narrow", step=1, reward=None,
                   task={"key": "swe/" + "very_long_task_name_" * 3}).to_json_dict()
    crashed = Rollout.model_validate({**body, "ending": {"type": "error", "detail": DETAIL}})
    with live_server(tunix_database(tmp_path_factory.mktemp("finish"), [crashed])) as base:
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

    import httpx

    html = httpx.get(f"{server}/runs").text
    for path in [*re.findall(r'(?:src|href)="(/static/[^"]+)"', html), "/static/vendor/plotly-2.35.2.min.js"]:
        r = httpx.get(server + path, headers={"Accept-Encoding": "gzip"})
        assert r.status_code == 200 and r.headers["content-encoding"] == "gzip", path
        assert r.headers["cache-control"] == "public, max-age=31536000, immutable", path  # every URL is versioned
