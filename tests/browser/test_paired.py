"""The paired comparison as a person sees it, in Debian's chromium against a live uvicorn server:
the regressed task listed first with its interval, a click through to the side-by-side page,
two columns of rollout links, and neither page wider than the window (long task keys clip)."""
from __future__ import annotations

import pytest

from tests.browser import served_rollouts
from tests.helpers import rollout

pytestmark = pytest.mark.browser

LONG = "benchmark/" + "very_long_task_key_" * 12  # no hyphen, no space: nowhere to break


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    rs = []
    for run, rewards in (("base", {"fine": [1.0] * 8, LONG: [0.0, 1.0] * 4}),
                         ("new", {"fine": [0.0] * 7 + [1.0], LONG: [1.0, 0.0] * 4})):
        rs += [rollout(f"{run}-{t[:4]}-{i}", run=run, step=i % 2, reward=r, task={"key": t})
               for t, rs_ in rewards.items() for i, r in enumerate(rs_)]
    with served_rollouts(tmp_path_factory.mktemp("paired"), rs) as base:
        yield base


@pytest.mark.parametrize("width", [1400, 800])
def test_the_regression_comes_first_and_opens_side_by_side(server, browser, width):
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(f"{server}/compare?runs=base,new")
    first = page.locator("#compare-paired tbody tr").first
    assert first.locator("td").first.inner_text() == "fine"
    assert "regressed" in first.inner_text() and "0.875" in first.inner_text()
    assert "1 regressed, 0 improved, 1 unclear" in page.locator("#paired-summary").inner_text()
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, (width, overflow)
    first.get_by_role("link", name="side by side").click()
    page.wait_for_url("**/compare/task?**")
    sides = page.locator("section.side")
    assert sides.count() == 2
    assert sides.nth(0).locator("tbody tr").count() == 8 and sides.nth(1).locator("tbody tr").count() == 8
    assert "regressed" in page.locator("#task-paired").inner_text()
    sides.nth(1).get_by_role("link", name="new-fine-0").click()
    page.wait_for_url("**/runs/new/rollouts/new-fine-0")
    page.goto(f"{server}/compare/task?runs=base,new&task={LONG}")
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, (width, overflow)
    page.close()
