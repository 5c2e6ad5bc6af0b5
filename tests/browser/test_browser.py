"""What a person sees, in Debian's chromium driven by Playwright: a live uvicorn server on a real
SQLite file with real Tunix traces and hostile trace text."""
from __future__ import annotations

import pytest

from tests.browser import live_server, open_page, tunix_database
from tests.helpers import rollout

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    hostile = [{"role": "user", "content": '<img src=x onerror="window.__xss=1">'},
               {"role": "assistant", "content": '<script>window.__xss=2</script>done'}]
    url = tunix_database(tmp_path_factory.mktemp("browser"), [rollout("hostile", run="h", messages=hostile)])
    with live_server(url) as base:
        yield base


def test_sampled_and_context_tokens_look_different(server, browser):
    page, problems = open_page(browser, f"{server}/runs/tunix/rollouts/submitted.Trajectory")
    trained = page.locator(".messages .tok-trained").first
    context = page.locator(".messages .tok-context").first
    trained.wait_for()
    style = "e => { const s = getComputedStyle(e); return [s.backgroundColor, s.color, s.borderBottomColor]; }"
    t, c = trained.evaluate(style), context.evaluate(style)
    assert t[0] != c[0] and t[1] != c[1], (t, c)
    # pieces come from the run's own tokenizer, and the logprob is on hover
    assert "calculator" in page.locator(".messages").inner_text()
    assert "logprob -" in trained.get_attribute("title")
    assert problems == []
    page.close()


def test_run_page_draws_charts_without_console_errors(server, browser):
    page, problems = open_page(browser, f"{server}/runs/h")  # run "h" has training step 0
    page.locator("figure.chart .plot .main-svg").first.wait_for()
    assert problems == []
    page.close()
    # the Tunix file records no training step: no empty charts, a note instead
    page, problems = open_page(browser, f"{server}/runs/tunix")
    assert page.locator("figure.chart").count() == 0
    assert "No training steps recorded" in page.locator("main").inner_text()
    assert problems == []
    page.close()


def test_hostile_trace_text_is_shown_not_run(server, browser):
    page, problems = open_page(browser, f"{server}/runs/h/rollouts/hostile")
    text = page.locator(".messages").inner_text()
    assert '<img src=x onerror="window.__xss=1">' in text
    assert "<script>window.__xss=2</script>done" in text
    assert page.evaluate("window.__xss") is None
    assert page.locator(".messages img, .messages script").count() == 0
    assert problems == []
    page.close()
