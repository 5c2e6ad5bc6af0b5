"""What the trace checks cost: milliseconds per rollout on the demo run, without and with a
tokenizer and chat template (the template checks then re-render every request), and per group.

    .venv/bin/python bench/checks.py [--rollouts 400]

Prints one line per configuration: rollouts, total seconds, ms per rollout, and which kinds fired.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ingest import demo  # noqa: E402
from ingest.advantages import recorded_advantage  # noqa: E402
from ingest.checks import Group, GroupMember, run_group_checks, run_rollout_checks  # noqa: E402
from ingest.checks.context import load_context  # noqa: E402
from ingest.files import read_records  # noqa: E402
from ingest.formats.base import ReadContext  # noqa: E402
from ingest.formats.registry import detect  # noqa: E402
from ingest.source import open_source  # noqa: E402

TEMPLATE_FOLDER = ROOT / "tests" / "fixtures" / "tokenizers" / "tiny-qwen3"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rollouts", type=int, default=400)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "demo.jsonl"
        demo.write(path, tokenizer=False)
        source = open_source(path)
        rollouts = []
        for r in read_records(detect(source), source, ReadContext(), []):  # final: endings normalised
            rollouts.append(r)
            if len(rollouts) >= args.rollouts:
                break
    n_tokens = sum(len(n.token_ids) for r in rollouts for n in r.nodes)
    for name, ctx in (("no tokenizer", None), ("tokenizer + chat template", load_context(TEMPLATE_FOLDER))):
        fired: Counter = Counter()
        t0 = time.perf_counter()
        for r in rollouts:
            fired.update(f.kind for f in run_rollout_checks(r, ctx).findings)
        dt = time.perf_counter() - t0
        print(f"rollout checks, {name}: {len(rollouts)} rollouts ({n_tokens} tokens) in {dt:.2f} s = "
              f"{1000 * dt / len(rollouts):.2f} ms/rollout; fired {dict(fired)}")
    groups = defaultdict(list)
    for r in rollouts:
        if r.group is not None:
            groups[(r.run.id, r.group.id)].append(r)
    t0 = time.perf_counter()
    fired = Counter()
    for (run, gid), rs in groups.items():
        g = Group(run, gid, [GroupMember(x.id, x.attempt, x.group.index, x.group.size, x.total_reward(),
                                         x.reward_status(), x.ending.type.value, x.step, recorded_advantage(x))
                             for x in rs])
        fired.update(f.kind for f in run_group_checks(g).findings)
    dt = time.perf_counter() - t0
    print(f"group checks: {len(groups)} groups in {dt:.3f} s = {1000 * dt / max(1, len(groups)):.2f} ms/group; "
          f"fired {dict(fired)}")


if __name__ == "__main__":
    main()
