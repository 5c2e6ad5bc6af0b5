"""Figures for the rollout view on huge traces, in a real server and headless Chromium.

Cases: the 12 MB tool output and the 5,000 tool-call turns of
`tests/fixtures/cases/15-17-make-large-cases.py`, a generated 128k-token branch (64 turns of 2,000
tokens) and a generated best-of-n tree with 2,000 branches. For each page (the first page, a deep
link to a late message, a deep link to a late token) it prints: server time (median of 5 GETs, wall
clock and the server's CPU time), HTML size, peak RSS growth of the server process, and in
Chromium: first contentful paint, time to interactive (DOMContentLoaded, or the end of the last
long task of the load when later), the longest task during load, and the longest task while
scrolling to the bottom (windows and messages filling in). Goals (issue 10): first paint < 1 s,
HTML < 1 MB, no long task > 200 ms.

The server runs in its own process (uvicorn, as deployed), so the browser driver in this one
never competes with it for the interpreter; its CPU time and peak RSS are read from /proc.

Run: `.venv/bin/python bench/views.py` (SQLite in a temporary folder; nothing is kept).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.db.engine import make_engine  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.worker.sync import ingest_paths  # noqa: E402
from ingest.formats.base import ReadContext  # noqa: E402

CASES = ROOT.parent / "shared" / "cases" / "15-17-make-large-cases.py"
CHROMIUM = "/usr/bin/chromium"
LONGTASKS = """
window.__lt = [];
try { new PerformanceObserver(l => { for (const e of l.getEntries()) window.__lt.push([e.startTime, e.duration]); })
  .observe({type: 'longtask', buffered: true}); } catch (e) {}
"""


def native(rid: str, nodes: list[dict]) -> str:
    return json.dumps({"schema": "rollscope/1", "id": rid, "run": {"id": "bench"}, "nodes": nodes,
                       "reward": 1.0, "ending": {"type": "submitted"}})


def long_branch(turns: int = 64, per_turn: int = 2000) -> str:
    """One branch of turns × per_turn tokens (128k by default), alternating user/assistant."""
    nodes = []
    for i in range(turns):
        sampled = i % 2 == 1
        nodes.append({"parent": i - 1 if i else None, "sampled": sampled,
                      "message": {"role": "assistant" if sampled else "user", "content": f"turn {i}"},
                      "token_ids": [(i * per_turn + k) % 30000 for k in range(per_turn)],
                      "mask": [sampled] * per_turn, "logprobs": [-0.3] * per_turn if sampled else [None] * per_turn})
    return native("long-branch", nodes)


def best_of_n(n: int = 2000, tokens: int = 64) -> str:
    """A prompt with n sampled answers: n branches."""
    nodes = [{"parent": None, "message": {"role": "user", "content": "solve"}, "token_ids": list(range(50)),
              "mask": [False] * 50}]
    for k in range(n):
        nodes.append({"parent": 0, "sampled": True, "message": {"role": "assistant", "content": f"answer {k}"},
                      "token_ids": [(k + j) % 30000 for j in range(tokens)], "mask": [True] * tokens,
                      "logprobs": [-0.2] * tokens})
    return native("best-of-2000", nodes)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVE = ("import sys, uvicorn; from app.config import Settings; from app.main import create_app; "
         "uvicorn.run(create_app(Settings(database_url=sys.argv[1])), host='127.0.0.1', port=int(sys.argv[2]), "
         "log_level='warning')")


def peak_rss_mb(pid: int) -> float:
    """Peak resident set of a process (VmHWM), MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_ms(pid: int) -> float:
    """User + system CPU time a process has used, ms (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as r:
        return r.read()


def chromium(browser, url: str) -> dict:
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.add_init_script(LONGTASKS)
    t = time.perf_counter()
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    load_wall = time.perf_counter() - t
    m = page.evaluate("""() => {
      const fcp = performance.getEntriesByName('first-contentful-paint')[0];
      const nav = performance.getEntriesByType('navigation')[0];
      const lt = window.__lt;
      const dcl = nav ? nav.domContentLoadedEventEnd : null;
      const lastEnd = lt.length ? Math.max(...lt.map(x => x[0] + x[1])) : 0;
      return {fcp: fcp ? fcp.startTime : null, dcl, tti: Math.max(dcl || 0, lastEnd),
              longest: lt.length ? Math.max(...lt.map(x => x[1])) : 0, n: lt.length};
    }""")
    before = len(page.evaluate("window.__lt"))
    for _ in range(12):  # scroll through: windows and further messages fill in
        page.mouse.wheel(0, 3000)
        page.evaluate("""() => document.querySelectorAll('.tokens').forEach(e => { e.scrollTop += 4000; })""")
        page.wait_for_timeout(150)
    page.wait_for_load_state("networkidle")
    scroll_tasks = page.evaluate("window.__lt").copy()[before:]
    m["scroll_longest"] = max((d for _, d in scroll_tasks), default=0)
    m["chips"] = page.evaluate("document.querySelectorAll('.tok').length")
    m["load_wall"] = load_wall
    page.close()
    return m


def main() -> None:
    from playwright.sync_api import sync_playwright

    print(f"load average (1, 5, 15 min) at start: {os.getloadavg()} on {os.cpu_count()} cores")
    work = Path(tempfile.mkdtemp(prefix="rollscope-bench-views-"))
    subprocess.run([sys.executable, str(CASES), str(work), "12", "5000"], check=True, capture_output=True)
    (work / "gen.jsonl").write_text(long_branch() + "\n" + best_of_n() + "\n")
    url = f"sqlite:///{work / 'rollscope.db'}"
    engine = make_engine(url, writer=True)
    upgrade(engine)
    t = time.perf_counter()
    for path, run in ((work / "15-huge-tool-output.json", "big"), (work / "17-many-turns.json", "long"),
                      (work / "gen.jsonl", None)):
        rep = ingest_paths(engine, [path], ReadContext(run_id=run))
        assert rep.ok, path
    print(f"ingested the four cases in {time.perf_counter() - t:.1f} s")
    engine.dispose()

    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVE, url, str(port)], cwd=ROOT)
    for _ in range(400):
        try:
            get(f"http://127.0.0.1:{port}/runs")
            break
        except OSError:
            time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    pages = [
        ("12 MB tool output", "/runs/big/rollouts/case15"),
        ("5,000 turns, first page", "/runs/long/rollouts/case17"),
        ("5,000 turns, #m-9000", "/runs/long/rollouts/case17?focus=m-9000#m-9000"),
        ("128k-token branch", "/runs/bench/rollouts/long-branch"),
        ("128k-token branch, #t-120000", "/runs/bench/rollouts/long-branch?focus=t-120000#t-120000"),
        ("2,000 branches", "/runs/bench/rollouts/best-of-2000"),
        ("2,000 branches, branch 1500", "/runs/bench/rollouts/best-of-2000?branch=1500"),
    ]
    print(f"{'page':32} {'server ms':>9} {'CPU ms':>7} {'HTML KB':>8} {'RSS +MB':>8} {'FCP ms':>7} {'TTI ms':>7} "
          f"{'long load':>9} {'long scroll':>11} {'chips':>7}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        for label, path in pages:
            u = base + path.split("#")[0]
            rss0 = peak_rss_mb(server.pid)
            get(u)  # warm: the first request of a page compiles its template
            times, cpu, size = [], [], 0
            for _ in range(5):
                t, c = time.perf_counter(), cpu_ms(server.pid)
                size = len(get(u))
                times.append((time.perf_counter() - t) * 1000)
                cpu.append(cpu_ms(server.pid) - c)
            grow = peak_rss_mb(server.pid) - rss0
            m = chromium(browser, base + path)
            print(f"{label:32} {statistics.median(times):9.0f} {statistics.median(cpu):7.0f} "
                  f"{size / 1024:8.0f} {grow:8.1f} "
                  f"{(m['fcp'] or 0):7.0f} {m['tti']:7.0f} {m['longest']:9.0f} {m['scroll_longest']:11.0f} "
                  f"{m['chips']:7d}")
        browser.close()
    print(f"peak RSS of the server process: {peak_rss_mb(server.pid):.0f} MB")
    server.terminate()
    server.wait(10)
    print(f"load average (1, 5, 15 min) at end: {os.getloadavg()}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
