"""Snapshot every JSON twin the app serves over the demo and every committed fixture.

A refactor that must not change behaviour is proven by diffing two snapshots:

    python scripts/twin_snapshot.py --out build/twins-before     # on the old tree
    python scripts/twin_snapshot.py --out build/twins-after      # on the new tree
    diff -r build/twins-before build/twins-after

It loads `make demo-data`'s runs plus every fixture folder into a fresh SQLite file, then walks the
dashboard from `/runs` through the links each HTML page carries (pages, charts, steps, groups,
rollouts, token windows, the API links) and writes each page's JSON twin (`Accept:
application/json`) and each `/api/v1` answer, one file per URL. Values that differ between two
loads of the same data (ingest times, file paths of the temporary folder, durations) are masked.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from collections import deque
from pathlib import Path
from urllib.parse import urldefrag, urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HREF = re.compile(r'''(?:href|hx-get|data-href|data-json|data-url)="([^"]+)"''')
VOLATILE_KEYS = {"ingested_at", "created_at", "updated_at", "first_seen", "last_seen", "started_at",
                 "heartbeat_at", "last_beat", "mtime", "elapsed_s", "duration_s", "seconds", "took_s",
                 "generated_at", "now", "checked_at", "received_at"}
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?")


def load(db: Path) -> None:
    """The demo's runs (the Makefile's demo-data target) and every fixture folder, each its own run."""
    env = dict(os.environ, ROLLSCOPE_DATABASE_URL=f"sqlite:///{db}")
    subprocess.run(["make", "-s", "demo-data"], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    rs = str(ROOT / ".venv" / "bin" / "rollscope")
    fx = ROOT / "tests" / "fixtures"
    for name in ("inspect_ai", "mini-swe-agent", "openhands", "swe-agent"):
        subprocess.run([rs, "ingest", str(fx / "realdata" / name), "--run", f"fixture-{name}"], env=env,
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cases = [str(p) for p in sorted((fx / "cases").iterdir()) if p.suffix in (".json", ".jsonl")]
    subprocess.run([rs, "ingest", *cases, "--run", "cases"], env=env, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def mask(value, tmp: str):
    if isinstance(value, dict):
        return {k: ("<volatile>" if k in VOLATILE_KEYS else mask(v, tmp)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v, tmp) for v in value]
    if isinstance(value, str):
        return ISO.sub("<time>", value.replace(tmp, "<root>"))
    return value


def _run_of(path: str) -> str | None:
    parts = path.split("/")
    if len(parts) > 2 and parts[1] == "runs":
        return parts[2].removesuffix(".json")
    if len(parts) > 4 and parts[1:3] == ["api", "v1"] and parts[3] == "runs":
        return parts[4]
    return None


def crawl(db: Path, out: Path, limit: int, per_run_limit: int) -> int:
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.main import create_app

    app = create_app(Settings(database_url=f"sqlite:///{db}"))
    seen: set[str] = set()
    written: list[str] = []
    queue = deque(["/runs", "/quarantine", "/search?q=error", "/api/v1/runs", "/ingest"])
    n = 0
    per_run: dict[str, int] = {}
    shapes: dict[tuple, int] = {}
    with TestClient(app) as c:
        while queue and n < limit:
            url = queue.popleft()
            if url in seen:
                continue
            seen.add(url)
            path = urlsplit(url).path
            query = urlsplit(url).query
            if query:  # a filter / sort / page variant: a few of each shape, not every combination
                shape = (path.removesuffix(".json"), tuple(sorted(k.split("=")[0] for k in query.split("&"))))
                if shapes.get(shape, 0) >= 3:
                    continue
                shapes[shape] = shapes.get(shape, 0) + 1
            run = _run_of(path)
            if run is not None:
                if per_run.get(run, 0) >= per_run_limit:
                    continue
                per_run[run] = per_run.get(run, 0) + 1
            if path.startswith("/static") or path.endswith((".csv", ".txt", ".npz")) or "/export" in path:
                continue
            if not path.startswith("/api/"):
                r = c.get(url, headers={"accept": "text/html"})
                if r.status_code == 200 and "html" in r.headers.get("content-type", ""):
                    for href in sorted(set(HREF.findall(r.text))):
                        href = urldefrag(href.replace("&amp;", "&"))[0]
                        if href.startswith("/") and href not in seen:
                            queue.append(href)
            r = c.get(url, headers={"accept": "application/json"})
            try:
                body = mask(r.json(), str(ROOT))
            except ValueError:
                body = {"_not_json": r.text[:200]}
            if path.startswith("/api/"):
                for v in _links(body):
                    if v not in seen:
                        queue.append(v)
            name = hashlib.sha1(url.encode()).hexdigest()[:16]
            (out / f"{name}.json").write_text(json.dumps({"url": url, "status": r.status_code, "body": body},
                                                         indent=1, sort_keys=True, default=str))
            n += 1
            written.append(url)
        n += _api(c, out, written)
    (out / "_index.txt").write_text("\n".join(sorted(written)) + "\n")
    return n


def _save(out: Path, url: str, r) -> None:
    try:
        body = mask(r.json(), str(ROOT))
    except ValueError:
        body = {"_not_json": r.text[:200]}
    name = hashlib.sha1(url.encode()).hexdigest()[:16]
    (out / f"{name}.json").write_text(json.dumps({"url": url, "status": r.status_code, "body": body},
                                                 indent=1, sort_keys=True, default=str))


def _api(c, out: Path, written: list[str]) -> int:
    """/api/v1: every run, its steps, metrics, findings, a rollouts page, and the first rollouts of
    each run with their branches' messages and tokens, labels and notes."""
    from urllib.parse import quote

    n = 0

    def get(url):
        nonlocal n
        r = c.get(url)
        _save(out, url, r)
        written.append(url)
        n += 1
        return r.json() if r.status_code == 200 else {}

    for run in get("/api/v1/runs").get("items", []):
        base = f"/api/v1/runs/{quote(run['id'], safe='')}"
        for tail in ("", "/steps", "/metrics", "/findings?limit=20"):
            get(base + tail)
        for step in get(base + "/steps").get("items", [])[:2]:
            if step.get("step") is not None:
                get(f"{base}/steps/{step['step']}/notes")
        page = get(base + "/rollouts?limit=8")
        for item in page.get("items", [])[:4]:
            rid = quote(str(item.get("rollout_id") or item.get("id")), safe="")
            detail = get(f"{base}/rollouts/{rid}")
            get(f"{base}/rollouts/{rid}/labels")
            get(f"{base}/rollouts/{rid}/notes")
            for bid in range(min(2, len(detail.get("branches") or []))):  # branches: lists of node indices
                get(f"{base}/rollouts/{rid}/branches/{bid}/messages?limit=20")
                get(f"{base}/rollouts/{rid}/branches/{bid}/tokens")
        if item := (page.get("items") or [None])[0]:
            if item.get("group_id"):
                get(f"{base}/groups/{quote(str(item['group_id']), safe='')}")
    return n


def _links(body):
    if isinstance(body, dict):
        for v in body.values():
            yield from _links(v)
    elif isinstance(body, list):
        for v in body:
            yield from _links(v)
    elif isinstance(body, str) and body.startswith("/api/v1/") and " " not in body:
        yield body


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--db", type=Path, default=ROOT / "build" / "twins.db")
    ap.add_argument("--reuse-db", action="store_true", help="crawl an existing database, do not load")
    ap.add_argument("--limit", type=int, default=6000)
    ap.add_argument("--per-run", type=int, default=500, help="at most this many URLs of one run")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    a.db.parent.mkdir(parents=True, exist_ok=True)
    if not a.reuse_db:
        for suffix in ("", "-wal", "-shm"):
            Path(str(a.db) + suffix).unlink(missing_ok=True)
        load(a.db)
    n = crawl(a.db, a.out, a.limit, a.per_run)
    print(f"{n} twins in {a.out}")


if __name__ == "__main__":
    main()
