"""The failure signatures page as a person sees it, in Debian's chromium against a live uvicorn
server: at 390 px wide the page never overflows, a long template wraps, each signature draws its
sparkline with the "new at" step apart, and hostile text stays text."""
from __future__ import annotations

import pytest

from tests.browser import served_rollouts
from tests.helpers import rollout

pytestmark = pytest.mark.browser

LONG = "E" * 400 + " /very/long/path/" + "x" * 300


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    rs = []
    for step in range(8):
        n = 6 if step == 5 else 1  # a crash that surges at step 5
        rs += [rollout(f"s{step}-{i}", run="fail", step=step, ending="error", reward=None,
                       errors=[{"type": "SandboxCrash", "message": f"sandbox exited with code {i} (host lost)"}])
               for i in range(n)]
    rs.append(rollout("long", run="fail", step=7, ending="error", reward=None,
                      errors=[{"type": "<img src=x onerror=alert(1)>", "message": LONG}]))
    with served_rollouts(tmp_path_factory.mktemp("failures"), rs) as base:
        yield base


def test_failures_page_fits_390px_with_sparklines_and_the_new_mark(server, browser):
    page = browser.new_page(viewport={"width": 390, "height": 800})
    page.goto(f"{server}/runs/fail/failures")
    page.wait_for_load_state("networkidle")
    assert page.locator("li.signature").count() == 2
    top = page.locator("li.signature").first
    assert "new at step 5" in top.inner_text()
    assert top.locator("svg.sparkline rect.new").count() == 1 and top.locator("svg.sparkline rect.bar").count() == 7
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, overflow
    assert page.locator("img").count() == 0  # the hostile type is shown as text
    assert "<img src=x" in page.locator("li.signature").nth(1).inner_text()
    page.locator("a.new-at").first.click()
    page.wait_for_load_state("networkidle")
    assert page.url.endswith("/runs/fail/steps/5")
    assert page.locator("#new-signatures").count() == 1
    page.close()
