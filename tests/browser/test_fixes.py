"""Second-round web fixes as a person sees them, in Debian's chromium against a live uvicorn
server: bare-id token chips never break inside, step axes tick on whole steps, and a run with
one ending type still shows its legend."""
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
