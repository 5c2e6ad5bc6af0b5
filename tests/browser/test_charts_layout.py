"""The charts as a person sees them, measured in Debian's chromium on the demo run (issue 23): on
the run page, every chart page and the compare page of two runs, the plot area meets its floor
(300 px on a chart page, 220 px in a grid), no legend box touches an axis title, a tick label or
the chart's title, no tick label is clipped by the figure, and every chart has its CSV beside
it; a chart this run did not record says so; compare gives each run one colour and each statistic
its dash. Then the controls: the error-policy switch shows
one policy, the smoothing slider draws TensorBoard's debiased EMA over the faint raw series, and
a reward point opens its step's story, which links its rollouts. One server, one ingest."""
from __future__ import annotations

import pytest

from app import charts
from tests.browser import live_server

pytestmark = pytest.mark.browser

RUN, OTHER = "demo-grpo", "demo-grpo-b"
MORE = ("demo-grpo-c", "demo-grpo-d")  # compare with four runs: a legend of many entries


@pytest.fixture(scope="module")
def server(tmp_path_factory, sqlite_demo_template):
    import shutil

    from app.db.engine import make_engine
    from ingest import demo
    from tests.helpers import ingest

    folder = tmp_path_factory.mktemp("charts")
    # the demo run (30 steps, the step-18 sandbox crash), ingested once per test process
    shutil.copyfile(sqlite_demo_template, folder / "rollscope.db")
    other = folder / "other.jsonl"
    demo.write(other, tokenizer=False, run_id=OTHER, seed=1, groups=2)  # a second, smaller run
    more = [folder / f"{r}.jsonl" for r in MORE]
    for seed, (r, path) in enumerate(zip(MORE, more), 2):
        demo.write(path, tokenizer=False, run_id=r, seed=seed, groups=1)
    url = f"sqlite:///{folder / 'rollscope.db'}"
    engine = make_engine(url, writer=True)
    assert ingest(engine, other, *more).ok
    engine.dispose()
    with live_server(url) as base:
        yield base


# Per drawn chart: its plot area's height (Plotly's _fullLayout._size.h), whether the figure says
# "not recorded" (layout.meta.empty), the texts a legend box intersects (axis titles, tick labels,
# the chart title) and the texts that reach outside the figure's svg.
MEASURE = """() => [...document.querySelectorAll('figure.chart .plot.js-plotly-plot')].map(gd => {
  const fig = gd.closest('figure');
  const svg = gd.querySelector('svg.main-svg').getBoundingClientRect();
  const box = e => e.getBoundingClientRect();
  const texts = s => [...gd.querySelectorAll(s)].filter(e => e.textContent.trim() && box(e).width > 0);
  const marks = texts('g.g-xtitle text, g.g-ytitle text, g.g-y2title text, g.xtick text, g.ytick text, '
                      + 'g.y2tick text, g.g-gtitle text');
  const hit = (a, b) => a.left < b.right - .5 && b.left < a.right - .5
                        && a.top < b.bottom - .5 && b.top < a.bottom - .5;
  const legends = [...gd.querySelectorAll('g.legend rect.bg')].map(box).filter(b => b.width > 0);
  return {id: fig.dataset.chart || fig.id, h: gd._fullLayout._size.h,
          empty: !!(gd.layout.meta && gd.layout.meta.empty),
          says: [...gd.querySelectorAll('g.annotation text')].map(e => e.textContent),
          csv: !!fig.querySelector('figcaption a[href*=".csv"]'),
          overlaps: legends.flatMap(l => marks.filter(m => hit(l, box(m))).map(m => m.textContent)),
          clipped: marks.filter(m => { const b = box(m); return b.left < svg.left - .5 || b.right > svg.right + .5
                                       || b.top < svg.top - .5 || b.bottom > svg.bottom + .5; })
                        .map(m => m.textContent)};
})"""

SIZED = "() => [...document.querySelectorAll('figure.chart .plot')].every(p => p.dataset.sized === '1')"


def measured(page, url: str, floor: int) -> list[str]:
    """Open `url`, wait for every chart to be drawn and sized, and say what is wrong with each."""
    page.goto(url)
    page.wait_for_function(SIZED, timeout=15_000)
    wrong = []
    for c in page.evaluate(MEASURE):
        where = f"{url} {c['id']}"
        if c["empty"]:
            wrong += [] if charts.NOT_RECORDED in c["says"] else [f"{where}: empty without saying so"]
        elif c["h"] < floor:
            wrong.append(f"{where}: plot {c['h']:.0f} px < {floor}")
        wrong += [f"{where}: legend over {t!r}" for t in c["overlaps"]]
        wrong += [f"{where}: {t!r} clipped" for t in c["clipped"]]
        wrong += [] if c["csv"] else [f"{where}: no CSV link"]
    return wrong


def test_every_chart_is_tall_enough_and_its_legend_overlaps_nothing(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    wrong = measured(page, f"{server}/runs/{RUN}", 220)
    assert page.locator("figure.chart .plot.js-plotly-plot").count() == len(charts.REGISTRY)
    for chart_id in charts.REGISTRY:
        wrong += measured(page, f"{server}/runs/{RUN}/charts/{chart_id}", 300)
    # compare four runs: the legend's many entries whole, the plot still at its floor
    wrong += measured(page, f"{server}/compare?runs={RUN},{OTHER},{','.join(MORE)}", 220)
    scrolled = page.evaluate("""() => [...document.querySelectorAll('figure.chart .plot.js-plotly-plot')]
        .filter(gd => { const l = gd._fullLayout.legend; return l && l._height > l._effHeight + .5; })
        .map(gd => gd.closest('figure').id)""")
    assert scrolled == []
    # compare: one colour per run, the statistic by dash
    lines = page.evaluate("""() => document.querySelector('#chart-reward .plot').data
        .filter(t => t.visible !== false && !t.fill && t.line.width !== 0)
        .map(t => [t.name, t.line.color, t.line.dash])""")
    colours = {(run, c) for name, c, _ in lines for run in [name.split(": ")[0]]}
    assert len(colours) == 4 and {r for r, _ in colours} == {RUN, OTHER, *MORE}, lines
    assert {(n.split(": ")[1].split(" ")[0], d) for n, _, d in lines} == {("mean", "solid"), ("median", "dash")}
    # the demo records no trainer logprobs: its mismatch chart says so instead of bare axes
    assert page.locator("#chart-mismatch g.annotation text").text_content() == charts.NOT_RECORDED
    assert wrong == [] and problems == []
    page.close()


def test_policy_switch_smoothing_and_a_click_to_the_step(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{server}/runs/{RUN}/charts/reward")
    page.wait_for_function(SIZED)
    shown = """() => document.querySelector('figure.chart .plot').data
                 .filter(t => t.visible !== false && t.showlegend !== false).map(t => t.name)"""
    assert page.evaluate(shown) == ["p10–p90 (errors scored 0)", "median (errors scored 0)", "mean (errors scored 0)"]
    page.get_by_role("button", name="dropped").click()
    page.wait_for_function(SIZED)
    assert page.evaluate(shown) == ["p10–p90 (errors dropped)", "median (errors dropped)", "mean (errors dropped)"]
    page.get_by_role("button", name="scored 0").click()
    page.locator("input.ema").evaluate("e => { e.value = '0.6'; e.dispatchEvent(new Event('input')); }")
    page.wait_for_function(SIZED)
    mean = page.evaluate("""() => { const d = document.querySelector('figure.chart .plot').data;
        const m = d.find(t => t.name === 'mean (errors scored 0)' && t.showlegend !== false);
        const raw = d.find(t => t.name === 'mean (errors scored 0) (raw)');
        return {y: m.y, raw: raw.y, opacity: raw.opacity}; }""")
    last, ema = 0.0, []  # TensorBoard's debiased EMA, weight 0.6
    for n, y in enumerate(mean["raw"], 1):
        last = last * 0.6 + 0.4 * y
        ema.append(last / (1 - 0.6 ** n))
    assert mean["y"] == pytest.approx(ema) and mean["opacity"] < 0.5
    page.locator("input.ema").evaluate("e => { e.value = '0'; e.dispatchEvent(new Event('input')); }")
    page.wait_for_function(SIZED)
    # a click on step 18's mean opens its story, which links its rollouts
    xy = page.evaluate("""() => { const gd = document.querySelector('figure.chart .plot'), fl = gd._fullLayout;
        const t = gd.data.find(t => t.name === 'mean (errors scored 0)'), i = t.x.indexOf(18);
        const r = gd.getBoundingClientRect();
        return [r.left + fl._size.l + fl.xaxis.l2p(18), r.top + fl._size.t + fl.yaxis.l2p(t.y[i])]; }""")
    page.mouse.move(*xy)
    page.mouse.click(*xy)
    page.wait_for_url(f"**/runs/{RUN}/steps/18")
    assert page.locator(f"main a[href^='/runs/{RUN}/rollouts?step=18']").count() >= 1
    page.close()


def test_the_png_download_works_under_the_csp_and_is_named_after_the_chart(server, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if m.type in ("error", "warning") else None)
    page.goto(f"{server}/runs/{RUN}/charts/reward")
    page.wait_for_function(SIZED)
    url = page.evaluate("() => Plotly.toImage(document.querySelector('figure.chart .plot'), {format: 'png'})")
    assert url.startswith("data:image/png;base64,") and len(url) > 1000
    assert [m for m in console if "Content Security Policy" in m or "violates" in m] == []
    assert page.evaluate("() => document.querySelector('figure.chart .plot')._context.toImageButtonOptions.filename") \
        == f"{RUN}-reward"
    page.close()
