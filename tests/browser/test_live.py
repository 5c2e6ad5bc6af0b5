"""Live pages: a run page open while rollouts arrive (through the worker's spool) shows the new
step without a reload, and marks the newest step "in progress"."""
from __future__ import annotations

import pytest

from app.db.engine import make_engine
from app.db.migrate import upgrade
from app.worker.run import run as run_worker
from tests.browser import live_server, open_page
from tests.helpers import rollout, write_jsonl

pytestmark = pytest.mark.browser


def test_run_page_shows_a_new_step_without_reload(browser, tmp_path):
    url = f"sqlite:///{tmp_path / 'live.db'}"
    engine = make_engine(url, writer=True)
    upgrade(engine)
    spool = tmp_path / "spool"
    spool.mkdir()

    def collect(name, rollouts):  # a collector writes a file into the spool; the worker takes it
        write_jsonl(spool / name, rollouts)
        assert run_worker(engine, [spool], once=True, poll=0.05, log=lambda _m: None).commits >= 1

    collect("s0.jsonl", [rollout(f"a{i}", run="live", step=0) for i in range(4)])
    with live_server(url) as base:
        page, problems = open_page(browser, f"{base}/runs/live")
        page.evaluate("window.__stillHere = true")
        steps = page.locator("table.grid").first  # the training steps table
        rows = steps.locator("tbody tr")
        assert rows.count() == 1 and "in progress" in rows.first.inner_text()
        assert page.locator(".badge.live").count() == 1
        # the collector writes the next step while the page is open
        collect("s1.jsonl", [rollout(f"b{i}", run="live", step=1) for i in range(3)])
        page.locator("table.grid").first.locator("tbody tr").nth(1).wait_for(timeout=10_000)  # polled in, ≤ 2 s
        assert page.evaluate("window.__stillHere === true")  # updated in place, not reloaded
        newest = page.locator("table.grid").first.locator("tbody tr").nth(1)
        assert newest.locator("td").first.inner_text().startswith("1") and "in progress" in newest.inner_text()
        assert "in progress" not in page.locator("table.grid").first.locator("tbody tr").first.inner_text()
        page.locator("figure .plot .main-svg").nth(1).wait_for(timeout=10_000)  # charts redrawn after the swap
        assert not problems, problems
        page.close()
    engine.dispose()
