"""Figures for the shared tool-call markup detector (ingest/tool_markup.py, issue 20 `unparsed_tool_call`).

A looping assistant message (`'<tool_call>\\n{"nam' * N`: an opening and a cut-off JSON key, over
and over, with no call in it) made the old Hermes pattern (`<tool_call>\\s*\\{.*?"name"`, re.S)
quadratic: 0.84 s at 68 KB, 14 s at 272 KB, and it ran twice per rollout (the check and the
ending's evidence). Prints, for 68 KB / 272 KB / 1 MB, the seconds `find_markup` takes before
(the detector as committed on `main` before this change, loaded from git) and after, and the
ratio; then one rollout through `normalise` + the checks (one scan per message now).
Run: `.venv/bin/python bench/tool_markup.py` (the old detector at 1 MB takes minutes: it runs
only with `--full`; without it that figure is extrapolated from 272 KB, quadratic, and marked so).
"""
from __future__ import annotations

import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ingest import tool_markup  # noqa: E402
from ingest.checks import run_rollout_checks  # noqa: E402
from ingest.endings import normalise  # noqa: E402
from ingest.schema import Rollout  # noqa: E402

OLD_COMMIT = "d96c6e0"  # main before the linear detector
SIZES = {"68 KB": 68 * 1024, "272 KB": 272 * 1024, "1 MB": 1024 * 1024}
UNIT = '<tool_call>\n{"nam'


def old_detector() -> types.ModuleType | None:
    try:
        src = subprocess.run(["git", "show", f"{OLD_COMMIT}:ingest/tool_markup.py"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType("old_tool_markup")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(src, "old_tool_markup.py", "exec"), module.__dict__)  # our own source, from our own history
    return module


def seconds(fn, text: str) -> float:
    start = time.perf_counter()
    fn(text)
    return time.perf_counter() - start


def main() -> None:
    full = "--full" in sys.argv
    old = old_detector()
    print(f"{'size':>7} {'before s':>12} {'after s':>9} {'ratio':>9}")
    before_272 = None
    for label, size in SIZES.items():
        text = UNIT * (size // len(UNIT))
        after = min(seconds(tool_markup.find_markup, text) for _ in range(3))
        assert tool_markup.find_markup(text) is None
        if old is None:
            before, mark = float("nan"), " (no git history)"
        elif label == "1 MB" and not full and before_272 is not None:
            before, mark = before_272 * (size / SIZES["272 KB"]) ** 2, " (extrapolated; --full runs it)"
        else:
            before, mark = seconds(old.find_markup, text), ""
        if label == "272 KB":
            before_272 = before
        print(f"{label:>7} {before:12.3f} {after:9.4f} {before / after:8.0f}x{mark}")
    text = UNIT * (SIZES["1 MB"] // len(UNIT))
    r = Rollout.model_validate({"id": "loop", "run": {"id": "b"}, "step": 0, "reward": 0.0,
                                "tools": [{"type": "function", "function": {"name": "f"}}],
                                "nodes": [{"message": {"role": "user", "content": "go"}},
                                          {"parent": 0, "sampled": True,
                                           "message": {"role": "assistant", "content": text}}]})
    start = time.perf_counter()
    normalise(r)
    run_rollout_checks(r)
    took = time.perf_counter() - start
    print(f"one rollout with a 1 MB looping answer, normalise + all rollout checks: {took:.3f} s")


if __name__ == "__main__":
    main()
