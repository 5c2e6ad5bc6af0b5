"""Layout as a person sees it, in Debian's chromium against a live uvicorn server: bare-id token
chips never break inside, table words never break and pages never overflow, step axes tick on
whole steps, and a run with one ending type still shows its legend."""
from __future__ import annotations

import re

import pytest

from tests.browser import open_page, served_rollouts
from tests.helpers import rollout

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    wide = rollout("wide", run="few", step=2)
    n = 120  # long ids, many of them: the strip must wrap, each chip stays whole
    wide.nodes[1].token_ids = [1_000_000_000 + i for i in range(n)]
    wide.nodes[1].mask, wide.nodes[1].logprobs = [True] * n, [-0.5] * n
    rs = [wide, rollout("b", run="few", step=3), rollout("c", run="few", step=3, reward=0.0)]
    with served_rollouts(tmp_path_factory.mktemp("web2"), rs) as base:
        yield base


def test_bare_id_chips_wrap_between_not_inside(server, browser):
    page = browser.new_page(viewport={"width": 420, "height": 900})
    page.goto(f"{server}/runs/few/rollouts/wide")
    lines = page.evaluate("""() => {
        const chips = [...document.querySelectorAll('#m-1 .tok-id')];
        return {broken: chips.filter(c => c.getClientRects().length !== 1).length,
                rows: new Set(chips.map(c => Math.round(c.getBoundingClientRect().top))).size,
                n: chips.length};
    }""")
    assert lines["n"] == 120 and lines["broken"] == 0, lines
    assert lines["rows"] > 1, lines  # the strip as a whole still wraps
    page.close()


def test_step_axis_is_whole_steps_and_a_single_ending_has_a_legend(server, browser):
    page, problems = open_page(browser, f"{server}/runs/few")
    for fig in ('figure[data-figure="fig-endings"]', "figure#chart-reward"):  # embedded; fetched from its twin
        plot = page.locator(f"{fig} .plot")
        plot.locator(".main-svg").first.wait_for()
        ticks = plot.locator(".xtick text").evaluate_all("els => els.map(e => e.textContent)")
        assert ticks and all(re.fullmatch(r"-?\d+", t) for t in ticks), (fig, ticks)
        assert plot.locator(".legend .traces").count() >= 1, fig
    legend = page.locator('figure[data-figure="fig-endings"] .legend .traces text').evaluate_all(
        "els => els.map(e => e.textContent)")
    assert legend == ["submitted"]
    assert problems == []
    page.close()


# Words (runs of letters and digits) drawn on more than one line: a word broken mid-word (a
# break at a hyphen or slash is a separator, not mid-word).
BROKEN_WORDS = """sel => {
  const broken = [];
  for (const cell of document.querySelectorAll(sel)) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      for (const m of n.data.matchAll(/[\\p{L}\\p{N}]+/gu)) {
        const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
        const lines = new Set([...r.getClientRects()].map(x => Math.round(x.top)));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""


@pytest.fixture(scope="module")
def run_server(tmp_path_factory):
    from tests.browser import served_rollouts
    from tests.helpers import rollout

    long_id = "a-very-long-rollout-identifier-with-many-separators/" * 3
    rs = [rollout(f"r{i}", run="checks-run", step=i % 3, group=f"g{i % 2}", index=i) for i in range(6)]
    rs.append(rollout(long_id, run="checks-run", step=1))
    with served_rollouts(tmp_path_factory.mktemp("checks"), rs) as base:
        yield base


@pytest.mark.parametrize("width", [1400, 800])
def test_run_page_checks_table_never_breaks_words_and_fits(run_server, browser, width):
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(f"{run_server}/runs/checks-run")
    page.wait_for_load_state("networkidle")
    assert page.locator("table.checks tbody tr").count() > 5
    broken = page.evaluate(BROKEN_WORDS, "table.grid th, table.checks td:not(:first-child), table.checks code.kind, "
                                         "h1, h2")
    assert broken == [], (width, broken)
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, (width, overflow)
    page.goto(f"{run_server}/runs/checks-run/rollouts")
    page.wait_for_load_state("networkidle")
    assert page.evaluate(BROKEN_WORDS, "table.grid th, .flag") == [], width
    assert page.evaluate(BROKEN_WORDS, "#rollouts td:first-child a") == [], width  # "r0" … stay whole
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, (width, overflow)
    page.goto(f"{run_server}/runs")  # the runs list: its per-ending columns collapse at 800 px
    page.wait_for_load_state("networkidle")
    assert page.evaluate(BROKEN_WORDS, "table.grid th") == [], width
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, (width, overflow)
    page.close()
