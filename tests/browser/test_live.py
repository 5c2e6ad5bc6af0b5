"""Live pages in Chromium: pages open while rollouts arrive (ingested by the test through the real
store into the real SQLite file the real uvicorn server reads) update in place from the server's
change events (static/live.js, app/routes/events.py): what the reader typed, focused, opened,
scrolled to and zoomed stays; one request per change and none while idle; the tab's heap does not
grow over 200 updates."""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest

from app.db.engine import make_engine
from app.db.migrate import upgrade
from app.worker.run import run as run_worker
from tests.browser import live_server, open_page
from tests.helpers import ingest, rollout, write_jsonl

pytestmark = pytest.mark.browser
FAST = {"web": {"live_poll_seconds": 0.05}}  # the watchers read the database every 50 ms


@contextmanager
def live_run(tmp_path, steps: int = 12, per_step: int = 2):
    """A run "live" of `steps` steps on a fresh SQLite file, served with fast watchers; yields
    (base URL, add(step, n) which ingests n more rollouts of `step` through the real store)."""
    url = f"sqlite:///{tmp_path / 'live.db'}"
    engine = make_engine(url, writer=True)
    upgrade(engine)
    made = [0]

    def add(step: int, n: int, run: str = "live") -> None:
        made[0] += 1
        path = write_jsonl(tmp_path / f"in{made[0]}.jsonl",
                           [rollout(f"r{made[0]}-{i}", run=run, step=step, reward=(i % 3) / 2, group=f"g{made[0]}",
                                    index=i) for i in range(n)])  # each batch one group: the group charts have data
        assert ingest(engine, path).ok

    for s in range(steps):
        add(s, per_step)
    try:
        with live_server(url, **FAST) as base:
            yield base, add
    finally:
        engine.dispose()


class Requests:
    """Every request the page makes from now on, but the event stream's own (re)connections."""

    def __init__(self, page):
        self.urls: list[str] = []
        page.on("request", lambda r: None if "/events" in r.url else self.urls.append(r.url))

    def take(self) -> list[str]:
        got, self.urls[:] = list(self.urls), []
        return got


def until(page, js: str, timeout: float = 10.0) -> None:
    """Wait until the expression `js` is true in the page (polled from here: the pages' CSP
    forbids the eval Playwright's wait_for_function would use)."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(js):
        assert time.monotonic() < deadline, f"timed out waiting for {js}"
        page.wait_for_timeout(20)


def events(page) -> int:
    """Change events the page has received (an ingest may be more than one change: its rollouts,
    then its group findings)."""
    return page.evaluate("window.rollscopeLive.events")


def applied(page) -> int:
    return page.evaluate("window.rollscopeLive ? window.rollscopeLive.applied : -1")


def wait_applied(page, n: int) -> None:
    until(page, f"window.rollscopeLive && window.rollscopeLive.applied >= {n}")


def test_run_page_updates_in_place_and_keeps_the_readers_place(browser, tmp_path):
    with live_run(tmp_path) as (base, add):
        page, problems = open_page(browser, f"{base}/runs/live")
        page.set_viewport_size({"width": 1280, "height": 700})
        page.locator("figure[data-chart=endings] .plot .main-svg").first.wait_for(timeout=10_000)
        page.locator("figure[data-chart=reward] .plot .main-svg").first.wait_for(timeout=10_000)
        page.evaluate("window.__stillHere = true")
        assert page.locator("#live-state").inner_text() == "live"
        # the reader: opens the metadata, zooms a chart, scrolls, selects text, types in the steps box
        page.locator("#run-metadata summary").click()
        page.evaluate("""() => Plotly.relayout(document.querySelector('figure[data-chart=endings] .plot'),
                                               {'xaxis.range': [2.5, 6.5]})""")
        box = page.locator("input[name=steps]")
        box.click()
        box.type("3-")
        page.evaluate("window.scrollTo(0, 500)")
        # what the reader looks at: the element at the middle of the window, and where it is
        anchor = """() => { const a = window.__anchor = window.__anchor || document.elementFromPoint(640, 350);
                            return [a.isConnected, Math.round(a.getBoundingClientRect().top)]; }"""
        at0 = page.evaluate(anchor)
        h0 = page.evaluate("document.documentElement.scrollHeight")
        # a chart with data well below the window (the window's 700 px and the 200 px margin)
        far = page.evaluate("""() => [...document.querySelectorAll('figure[data-chart]:not(.empty-chart)')]
            .filter(f => f.getBoundingClientRect().top > window.innerHeight + 400).map(f => f.dataset.chart)[0]""")
        assert far
        requests = Requests(page)
        rows0 = page.locator("#steps-table tbody tr").count()
        seen = events(page)

        add(12, 3)  # a new step arrives
        page.locator("#steps-table tbody tr").nth(rows0).wait_for(timeout=10_000)
        wait_applied(page, 1)
        page.wait_for_timeout(300)  # let anything else the page would do happen
        assert page.evaluate("window.__stillHere === true")  # updated in place, not reloaded
        assert page.locator("#run-rollouts").inner_text() == "27 rollouts"
        assert page.locator("#steps-table tbody tr").nth(rows0).locator("td").first.inner_text().startswith("12")
        assert box.input_value() == "3-"
        assert page.evaluate("document.activeElement && document.activeElement.name") == "steps"
        assert page.evaluate("document.getElementById('run-metadata').open")
        # it stays where it was (the browser's scroll anchoring absorbs the line the metadata's
        # source files grew by above it), the same element, not a copy swapped in; within a pixel:
        # the anchoring scrolls by whole pixels, the line is 20.3 px, so a position rounded to the
        # pixel may round the other way
        at1 = page.evaluate(anchor)
        assert at1[0] and abs(at1[1] - at0[1]) <= 1, (at0, at1)
        h1 = page.evaluate("document.documentElement.scrollHeight")
        assert 0 <= h1 - h0 < 80, (h0, h1)  # a table row and a source line more, nothing swapped out and back
        # the chart got the new step and kept its zoom
        assert page.evaluate("""() => { const p = document.querySelector('figure[data-chart=endings] .plot');
                                        return [p.layout.xaxis.range[0], p.layout.xaxis.range[1],
                                                p.data[0].x.includes(12)]; }""") == [2.5, 6.5, True]
        got = requests.take()
        changes = events(page) - seen
        # the fragments and the charts: one request per change
        assert 1 <= len(got) <= changes and all("/runs/live/live/run" in u for u in got), (got, changes)
        assert "charts=endings" in got[0] and far not in got[0]  # only the charts in view
        # a chart that changed off screen is fetched (once) when it scrolls into view
        page.locator(f"figure[data-chart={far}]").scroll_into_view_if_needed()
        until(page, f"""(() => {{ const p = document.querySelector('figure[data-chart={far}] .plot');
                                return p.data && p.data.some(t => Array.from(t.x || []).includes(12)); }})()""")
        page.wait_for_timeout(300)
        got = requests.take()
        assert len(got) == 1 and "fragments=0" in got[0] and far in got[0], got

        page.evaluate("window.scrollTo(0, 500)")
        page.wait_for_timeout(300)
        requests.take()  # the charts back in view that changed while away
        seen, done = events(page), applied(page)
        # the reader selects text in a fragment that updates (a click into the box would drop it)
        page.evaluate("""() => { const r = document.createRange();
                                  r.selectNodeContents(document.querySelector('#run-steps h2'));
                                  getSelection().removeAllRanges(); getSelection().addRange(r); }""")
        add(5, 1)  # a change to an old step: one more request, still in place
        wait_applied(page, done + 1)
        page.wait_for_timeout(300)
        assert 1 <= len(requests.take()) <= events(page) - seen
        assert page.evaluate("getSelection().toString()") == "Training steps"
        assert page.locator("#run-rollouts").inner_text() == "28 rollouts"

        page.wait_for_timeout(1_000)  # idle: the server polls 20 times, the page asks nothing
        assert requests.take() == []
        assert not problems, problems
        page.close()


def test_pause_stops_updates_and_resume_catches_up(browser, tmp_path):
    with live_run(tmp_path, steps=2) as (base, add):
        page, problems = open_page(browser, f"{base}/runs/live")
        page.locator("#live-pause").check()
        assert page.locator("#live-state").inner_text() == "paused"
        requests = Requests(page)
        add(2, 2)
        page.wait_for_timeout(500)
        assert requests.take() == [] and page.locator("#run-rollouts").inner_text() == "4 rollouts"
        page.reload()
        page.wait_for_load_state("networkidle")
        assert page.locator("#live-pause").is_checked()  # kept in localStorage
        add(2, 1)
        page.wait_for_timeout(300)
        assert page.locator("#run-rollouts").inner_text() == "6 rollouts"  # the reload read it; no update since
        page.locator("#live-pause").uncheck()  # resumed: caught up at once by version, then live again
        until(page, "document.getElementById('run-rollouts').textContent === '7 rollouts'")
        add(3, 1)
        until(page, "document.getElementById('run-rollouts').textContent === '8 rollouts'")
        assert not problems, problems
        page.close()


def test_a_pause_in_one_tab_pauses_the_others_of_the_browser(browser, tmp_path):
    with live_run(tmp_path, steps=2) as (base, add):
        context = browser.new_context()  # one browser profile: its tabs share localStorage
        try:
            run, rollouts = context.new_page(), context.new_page()
            for page, url in ((run, f"{base}/runs/live"), (rollouts, f"{base}/runs/live/rollouts")):
                page.goto(url)
                page.wait_for_load_state("networkidle")
            run.locator("#live-pause").check()
            until(rollouts, "document.getElementById('live-state').textContent === 'paused'")
            assert rollouts.locator("#live-pause").is_checked()
            requests = Requests(rollouts)
            add(2, 2)
            rollouts.wait_for_timeout(500)
            assert requests.take() == []  # its stream is closed too: nothing sent, nothing asked
            run.locator("#live-pause").uncheck()
            until(rollouts, "document.getElementById('live-state').textContent !== 'paused'")
            assert not rollouts.locator("#live-pause").is_checked()
        finally:
            context.close()


def test_rollouts_list_counts_new_rows_and_shows_them_in_place(browser, tmp_path):
    with live_run(tmp_path, steps=30, per_step=2) as (base, add):
        page, problems = open_page(browser, f"{base}/runs/live/rollouts?steps=25-")
        page.set_viewport_size({"width": 1280, "height": 500})
        assert page.locator("#rows tr").count() == 10
        page.evaluate("window.scrollTo(0, 200)")
        y0 = page.evaluate("window.scrollY")
        requests = Requests(page)
        add(30, 3)
        page.locator("#live-new").wait_for(state="visible", timeout=10_000)
        assert page.locator("#live-new").inner_text() == "3 new rollouts — show"
        page.wait_for_timeout(300)
        got = requests.take()
        assert len(got) == 1 and "/live/rollouts" in got[0] and "steps=25-" in got[0], got
        assert page.locator("#rows tr").count() == 10  # nothing moves until the reader asks
        page.locator("#live-new").click()
        until(page, "document.querySelectorAll('#rows tr').length === 13")
        assert page.locator("#total strong").inner_text() == "13"
        assert page.locator("#live-new").is_hidden()
        assert page.evaluate("window.scrollY") == y0
        page.wait_for_timeout(300)
        requests.take()
        page.wait_for_timeout(1_000)
        assert requests.take() == []  # idle
        assert not problems, problems
        page.close()


def test_step_page_of_the_step_in_progress_updates(browser, tmp_path):
    with live_run(tmp_path, steps=3) as (base, add):
        page, problems = open_page(browser, f"{base}/runs/live/steps/2")
        assert "2 rollouts" in page.locator("#step-live").inner_text()
        page.evaluate("window.__stillHere = true")
        add(2, 2)
        until(page, "document.getElementById('step-live').innerText.includes('4 rollouts')")
        assert page.evaluate("window.__stillHere === true")
        old, _ = open_page(browser, f"{base}/runs/live/steps/0")  # a finished step does not listen
        assert old.locator("#live").count() == 0
        old.close()
        assert not problems, problems
        page.close()


def test_ingest_page_updates_in_place(browser, tmp_path):
    url = f"sqlite:///{tmp_path / 'live.db'}"
    engine = make_engine(url, writer=True)
    upgrade(engine)
    spool = tmp_path / "spool"
    spool.mkdir()

    def collect(name, rollouts):  # a collector writes a file into the spool; the worker takes it
        write_jsonl(spool / name, rollouts)
        assert run_worker(engine, [spool], once=True, poll=0.05, log=lambda _m: None).commits >= 1

    assert ingest(engine, write_jsonl(tmp_path / "first.jsonl", [rollout(f"a{i}", run="live") for i in range(4)])).ok
    with live_server(url, **FAST) as base:
        page, problems = open_page(browser, f"{base}/ingest")
        page.evaluate("window.__stillHere = true")
        assert "4 rollouts stored" in page.locator("#ingest-status").inner_text()
        requests = Requests(page)
        seen = events(page)
        collect("s1.jsonl", [rollout(f"b{i}", run="live", step=1) for i in range(3)])
        until(page, "document.getElementById('ingest-status').innerText.includes('7 rollouts stored')")
        assert page.locator("#ingest-status tbody tr").count() == 1  # the worker's file, its row
        assert page.evaluate("window.__stillHere === true")
        page.wait_for_timeout(300)
        got = requests.take()
        # the worker claims, stores and finishes the file: each change one request at most
        assert 1 <= len(got) <= events(page) - seen and all(u.endswith("/ingest/live") for u in got), got
        page.wait_for_timeout(1_000)
        assert requests.take() == []
        assert not problems, problems
        page.close()
    engine.dispose()


def test_heap_does_not_grow_over_200_updates(browser, tmp_path):
    with live_run(tmp_path, steps=5) as (base, add):
        page, problems = open_page(browser, f"{base}/runs/live")
        page.locator("figure[data-chart=reward] .plot .main-svg").first.wait_for(timeout=10_000)
        # a short window: the endings chart (and the findings one beside it) redraw on every update,
        # the charts below are marked stale (drawn when scrolled to): the test's time goes on updates
        page.set_viewport_size({"width": 1280, "height": 450})
        cdp = page.context.new_cdp_session(page)

        def heap() -> int:
            """The live heap once the page is quiet: no update applied for 1 s (a fetch or a
            Plotly.react in flight holds its buffers), then the least of three collected readings
            (V8 frees some garbage only on a second pass)."""
            last, quiet_since = applied(page), time.monotonic()
            while time.monotonic() - quiet_since < 1.0:
                page.wait_for_timeout(200)
                now = applied(page)
                if now != last:
                    last, quiet_since = now, time.monotonic()
            readings = []
            for _ in range(3):
                cdp.send("HeapProfiler.collectGarbage")
                readings.append(cdp.send("Runtime.getHeapUsage")["usedSize"])
            return min(readings)

        def updates(n: int) -> None:
            """At least n more updates applied by the page, while the test ingests a rollout into one
            of the last steps every few ms (the page merges what arrives during a fetch)."""
            target = applied(page) + n
            stop = threading.Event()

            def feed():
                k = 0
                while not stop.is_set():
                    add(3 + k % 2, 1)
                    k += 1
                    stop.wait(0.01)

            feeder = threading.Thread(target=feed, daemon=True)
            feeder.start()
            try:
                until(page, f"window.rollscopeLive.applied >= {target}", timeout=90)
            finally:
                stop.set()
                feeder.join(5)

        updates(20)  # warm up: every code path compiled, Plotly's caches filled
        sizes = [heap()]
        for _ in range(4):
            updates(50)
            sizes.append(heap())
        print("heap after 20, 70, 120, 170, 220 updates (MB):", [round(x / 1e6, 2) for x in sizes])
        # bounded, not growing with every update. A leak of a figure or a fragment per update is
        # 50-250 KB an update (10-50 MB over 200); V8's own noise is a few MB at any one reading,
        # so the trend is judged by the least-squares slope over the five readings (bytes per
        # update) and the whole 200 by their growth, each far under a leak and far over the noise
        xs = [20, 70, 120, 170, 220]
        mx, my = sum(xs) / len(xs), sum(sizes) / len(sizes)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, sizes)) / sum((x - mx) ** 2 for x in xs)
        print(f"heap slope: {slope / 1e3:.1f} KB an update")
        assert slope < 25_000, (slope, sizes)
        assert max(sizes[1:]) - sizes[0] < 6_000_000, sizes
        assert not problems, problems
        page.close()


def test_run_page_marks_the_step_in_progress_from_the_spool(browser, tmp_path):
    """Rollouts that come through the worker's spool (a live source) make the run "receiving" and
    its newest step "in progress"; the mark moves to a new step without a reload."""
    url = f"sqlite:///{tmp_path / 'live.db'}"
    engine = make_engine(url, writer=True)
    upgrade(engine)
    spool = tmp_path / "spool"
    spool.mkdir()

    def collect(name, rollouts):  # a collector writes a file into the spool; the worker takes it
        write_jsonl(spool / name, rollouts)
        assert run_worker(engine, [spool], once=True, poll=0.05, log=lambda _m: None).commits >= 1

    collect("s0.jsonl", [rollout(f"a{i}", run="live", step=0) for i in range(4)])
    with live_server(url, **FAST) as base:
        page, problems = open_page(browser, f"{base}/runs/live")
        page.evaluate("window.__stillHere = true")
        rows = page.locator("#steps-table tbody tr")
        assert rows.count() == 1 and "in progress" in rows.first.inner_text()
        assert page.locator(".badge.live").count() == 1
        collect("s1.jsonl", [rollout(f"b{i}", run="live", step=1) for i in range(3)])
        rows.nth(1).wait_for(timeout=10_000)
        assert page.evaluate("window.__stillHere === true")  # updated in place, not reloaded
        newest = rows.nth(1)
        assert newest.locator("td").first.inner_text().startswith("1") and "in progress" in newest.inner_text()
        until(page, "!document.querySelector('#steps-table tbody tr').innerText.includes('in progress')")
        assert not problems, problems
        page.close()
    engine.dispose()
