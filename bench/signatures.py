"""Failure-signature mining throughput (issue 24 item 2): messages/s through
`ingest.signatures.Miner` (clean, mask, Drain3), on a deterministic mix of error messages drawn
from 40 templates with numbers, paths, file names, ids, uuids, hex and quoted strings in them
(plus 10% one-off texts), mined once into a fresh miner and once into a miner already at the cap
of 200 templates; and the per-rollout cost of taking the texts (`signature_texts`) on the demo's
rollouts. Prints `os.getloadavg()` beside the figures.

Run: `.venv/bin/python bench/signatures.py [--messages N]`. Not part of the tests.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ingest import demo  # noqa: E402
from ingest.signatures import MAX_TEMPLATES, Miner, clean, signature_texts  # noqa: E402

WORDS = ("sandbox", "tool", "server", "timeout", "refused", "connection", "reset", "permission", "denied",
         "missing", "module", "import", "syntax", "assertion", "failed", "expected", "got", "while", "running",
         "reading", "writing", "parsing", "invalid", "argument", "unknown", "key", "index", "out", "of", "range")


def _template(rng: random.Random, k: int) -> str:
    head = f"{rng.choice(['RuntimeError', 'ValueError', 'KeyError', 'SandboxCrash', 'ToolError'])}{k}:"
    return " ".join([head, *rng.sample(WORDS, rng.randint(4, 9)), "{}"])


def _param(rng: random.Random) -> str:
    return rng.choice([
        str(rng.randint(0, 10**6)), f"/srv/job/{rng.randint(0, 99)}/run_{rng.randint(0, 9)}.py",
        f"file{rng.randint(0, 99)}.json", f"req_{rng.getrandbits(32):08x}", f"0x{rng.getrandbits(32):x}",
        f"'{rng.choice(WORDS)} {rng.randint(0, 9)}'",
        f"{rng.getrandbits(32):08x}-1234-4abc-8def-{rng.getrandbits(48):012x}",
    ])


def messages(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    templates = [_template(rng, k) for k in range(40)]
    out = []
    for _ in range(n):
        if rng.random() < 0.1:
            out.append(" ".join(rng.choices(WORDS, k=rng.randint(3, 12))) + f" {rng.random()}")
        else:
            out.append(rng.choice(templates).format(" ".join(_param(rng) for _ in range(rng.randint(1, 3)))))
    return [clean(m) for m in out]


def rate(miner: Miner, texts: list[str]) -> float:
    t = time.perf_counter()
    for text in texts:
        miner.mine(text)
    return len(texts) / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=50_000)
    args = ap.parse_args()
    texts = messages(args.messages)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    fresh = Miner()
    print(f"mining, fresh miner: {rate(fresh, texts):,.0f} messages/s ({len(texts):,} messages, "
          f"{len(fresh)} templates)")
    full = Miner((i + 1, f"Filler{i} template number {i} <*>") for i in range(MAX_TEMPLATES))
    print(f"mining, miner at the cap ({MAX_TEMPLATES}): {rate(full, texts):,.0f} messages/s")
    rollouts = list(demo.generate(steps=10, groups=8, group_size=8))
    t = time.perf_counter()
    n = sum(len(signature_texts(r)) for r in rollouts)
    dt = time.perf_counter() - t
    print(f"texts taken: {len(rollouts):,} demo rollouts, {n:,} texts, {1e6 * dt / max(1, len(rollouts)):.0f} µs "
          "a rollout")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
