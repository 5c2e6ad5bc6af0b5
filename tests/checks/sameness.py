"""Every check on many real inputs, frozen: the findings each input gets, as a digest per input
(tests/checks/sameness.json), so a faster check (numpy arrays, issue 25) is proven to report
exactly what the one before it reported (kind, severity, node, position, message, detail).

Inputs: the demo run with its tokenizer; bench/workload.py agentic and text-only rollouts (with
and without a tokenizer) and one 5,000-turn text rollout; every real file a reader reads
(tests/fixtures/realdata); every handed case (tests/fixtures/cases) with and without the
llama3-ish tokenizer; every fault of the matrix (tests/checks/matrix) in every format, and the
clean groups. Group checks run too, on each input's groups.

    python -m tests.checks.sameness --write             # freeze today's findings (only on purpose)
    python -m tests.checks.sameness --dump ROWS.jsonl   # every finding row, and which inputs differ
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ingest.checks import CheckContext, groups_from_rollouts, run_group_checks, run_rollout_checks
from ingest.checks.context import load_context
from ingest.files import walk
from ingest.formats.registry import detect
from ingest.source import open_source
from tests.conftest import FIXTURES
from tests.helpers import bench_workload

FROZEN = Path(__file__).with_name("sameness.json")
Input = tuple[str, list, CheckContext | None]


def _native(records: list[dict], folder: Path, name: str) -> list:
    from tests.helpers import read_folder

    path = folder / f"{name}.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec) + "\n")
    return [r for _, _, r in read_folder(path)]


def inputs(folder: Path) -> Iterator[Input]:
    """(name, rollouts, context) for every input, in a fixed order."""
    from ingest.demo import write as write_demo
    from tests.checks.matrix.episode import LLAMA, QWEN, clean_group
    from tests.checks.matrix.faults import FAULTS, injected
    from tests.checks.matrix.formats import available
    from tests.checks.matrix.harness import read_back
    from tests.helpers import read_folder

    demo = folder / "demo.jsonl"
    write_demo(demo, tokenizer=folder / "demo.tokenizer.json", steps=4, groups=4, group_size=8, seed=0)
    demo_ctx = load_context(folder / "demo.tokenizer.json")
    yield "demo", [r for _, _, r in read_folder(demo)], demo_ctx

    wl = bench_workload()
    rng = np.random.default_rng(7)
    agentic = _native([wl.rollout(k, rng) for k in range(12)], folder, "agentic")
    text = _native([wl.text_rollout(k, rng) for k in range(12)], folder, "text")
    yield "workload/agentic", agentic, None
    yield "workload/agentic+qwen", agentic, QWEN.ctx
    yield "workload/text", text, None
    yield "workload/text+llama", text, LLAMA.ctx
    yield "workload/text-5000-turns", _native([wl.text_rollout(0, rng, turns=5000)], folder, "long"), None

    realdata = FIXTURES / "realdata"
    for path, _ in walk([realdata]):
        try:
            reader = detect(open_source(path))
        except Exception:  # noqa: BLE001 - a file no reader takes is not an input
            continue
        if reader is not None:
            yield f"realdata/{path.relative_to(realdata)}", [r for _, _, r in read_folder(path)], None

    cases = FIXTURES / "cases"
    for path, _ in walk([cases]):
        if path.parent != cases:
            continue
        rollouts = [r for _, _, r in read_folder(path, [])]
        if rollouts:
            yield f"cases/{path.name}", rollouts, None
            yield f"cases/{path.name}+llama", rollouts, LLAMA.ctx

    writers = available()
    for tok in (QWEN, LLAMA):
        for fmt, module in writers.items():
            sub = folder / f"clean-{tok.name}-{fmt}"
            sub.mkdir()
            yield f"matrix/clean/{tok.name}/{fmt}", read_back(module.write(clean_group(tok), sub))[0], tok.ctx
    for f in FAULTS:
        for fmt, module in writers.items():
            sub = folder / f"fault-{f.kind}-{fmt}"
            sub.mkdir()
            yield f"matrix/{f.kind}/{fmt}", read_back(module.write(injected(f), sub))[0], f.tok.ctx


def findings(rollouts: list, ctx: CheckContext | None) -> list:
    """Every finding and skipped outcome, rollout scope per rollout then group scope per group,
    as plain lists [scope, subject, kind, severity, node, position, message, detail]."""
    out = []
    for r in rollouts:
        res = run_rollout_checks(r, ctx)
        out += [["rollout", f"{r.id}#{r.attempt}", *_row(f)] for f in res.all]
    for key, g in sorted(groups_from_rollouts(rollouts).items(), key=lambda kv: repr(kv[0])):
        out += [["group", repr(key), *_row(f)] for f in run_group_checks(g, ctx).all]
    return out


def _row(f) -> list:
    return [f.kind, f.severity, f.node_idx, f.position, f.message, f.detail]


def digest(rows: list) -> str:
    text = json.dumps(rows, sort_keys=True, default=repr, allow_nan=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def collect(dump: Path | None = None) -> dict[str, dict]:
    """name → {"rollouts": how many, "findings": how many rows (skipped outcomes included),
    "digest": of every row}. `dump`: also write every row there, one JSON line per input (to
    see what changed where a digest differs)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = {}
        rows_file = dump.open("w", encoding="utf-8") if dump else None
        for name, rollouts, ctx in inputs(Path(tmp)):
            rows = findings(rollouts, ctx)
            if rows_file:
                for row in rows:
                    rows_file.write(json.dumps([name, *row], sort_keys=True, default=repr) + "\n")
            assert name not in out, name
            out[name] = {"rollouts": len(rollouts), "findings": len(rows), "digest": digest(rows)}
        if rows_file:
            rows_file.close()
        return out


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        got = collect()
        FROZEN.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in got.items()) + "\n}\n",
                          encoding="utf-8")
        print(f"wrote {FROZEN}: {len(got)} inputs, {sum(v['findings'] for v in got.values())} findings")
    elif sys.argv[1:2] == ["--dump"] and len(sys.argv) == 3:
        got = collect(Path(sys.argv[2]))
        frozen = json.loads(FROZEN.read_text(encoding="utf-8"))
        print("differ:", [k for k in got if frozen.get(k) != got[k]])
    else:
        sys.exit("usage: python -m tests.checks.sameness --write | --dump ROWS.jsonl")
