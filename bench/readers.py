"""Reading speed of every format reader, without a database: MB/s and rollouts/s.

Each reader reads ~`SIZE_MB` of its own format, built by repeating a real record
(tests/fixtures/realdata) with fresh ids, from a temporary file: open (content detection), parse,
convert, validate. The store is not involved, so these figures are the ceiling a reader puts on
live ingest (compare with `bench/ingest_and_pages.py`'s rollouts/s: a reader must not be the
bottleneck). Run: `make bench` or `.venv/bin/python bench/readers.py [SIZE_MB]`.

Then one native record holding `BIG_MB` of tool output, read as a JSON object and as a JSON list
of that one record (a list past `STREAM_BYTES` is cut into elements as it is read): the two MB/s
should be alike (a list of one 40 MB record once took 290 s where the object took 0.4 s).
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ingest.formats import registry  # noqa: E402
from ingest.formats.base import ReadContext  # noqa: E402
from ingest.formats.samples import training_samples  # noqa: E402
from ingest.schema import Rollout  # noqa: E402
from ingest.source import open_source  # noqa: E402

REAL = ROOT / "tests" / "fixtures" / "realdata"
CASES = ROOT / "tests" / "fixtures" / "cases"
SIZE_MB = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
BIG_MB = 40  # past ingest.source.STREAM_BYTES (32 MB), so the list is streamed


def first_line(path: Path) -> dict:
    return json.loads(path.read_text().splitlines()[0])


def repeat_lines(make, out: Path) -> None:
    """Write `make(i)` as JSONL lines until the file reaches SIZE_MB."""
    limit = SIZE_MB * 1e6
    with out.open("w") as f:
        i = 0
        while f.tell() < limit:
            f.write(json.dumps(make(i)) + "\n")
            i += 1


def inputs(tmp: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    vf = first_line(REAL / "verifiers/train_multi_tool.jsonl")

    def vf_line(i):
        d = json.loads(json.dumps(vf))
        d["id"] = f"ep{i}"
        d["traces"][0]["id"] = f"tr{i}"
        return d
    repeat_lines(vf_line, out.setdefault("verifiers", tmp / "vf.jsonl"))

    ng = [json.loads(x) for f in sorted((REAL / "nemo-gym").glob("*.jsonl")) for x in f.read_text().splitlines()]
    repeat_lines(lambda i: {**ng[i % len(ng)], "_ng_task_index": i, "_ng_rollout_index": 0},
                 out.setdefault("nemo-gym", tmp / "ng.jsonl"))
    at = first_line(REAL / "atropos/rubiks_process_results_32.line1.jsonl")
    repeat_lines(lambda i: at, out.setdefault("atropos", tmp / "at.jsonl"))
    atif_doc = json.loads((REAL / "atif/multi_tool.trajectory.json").read_text())
    repeat_lines(lambda i: {**atif_doc, "trajectory_id": f"t{i}"}, out.setdefault("atif", tmp / "atif.jsonl"))
    (r,) = list(registry.get("verifiers").read(open_source(REAL / "verifiers/train_multi_tool.jsonl"), ReadContext()))
    sample = training_samples(r)[0]
    repeat_lines(lambda i: {**sample, "rollout_id": f"s{i}"}, out.setdefault("verl", tmp / "verl.jsonl"))
    tx = json.loads((REAL / "tunix/v0.1.7/submitted.Trajectory.json").read_text())
    repeat_lines(lambda i: tx, out.setdefault("tunix", tmp / "tunix.jsonl"))
    case05 = json.loads((CASES / "05-duplicate-tool-call-ids.json").read_text())
    repeat_lines(lambda i: {**case05, "rollout_id": f"c{i}"}, out.setdefault("chat", tmp / "chat.jsonl"))
    tau = json.loads((REAL / "tau-bench/gpt-4o-airline.sample.json").read_text())
    repeat_lines(lambda i: {**tau[i % 3], "trial": i}, out.setdefault("tau-bench", tmp / "tau.jsonl"))
    native = r.to_json_dict()
    repeat_lines(lambda i: {**native, "id": f"n{i}"}, out.setdefault("native", tmp / "native.jsonl"))
    return out


def read_all(path: Path) -> tuple[str | None, int, int]:
    """(the reader's name, rollouts, rejected) read from `path` by the reader its content names."""
    source = open_source(path)
    reader = registry.detect(source)
    if reader is None:
        return None, 0, 0
    n = bad = 0
    for item in reader.read(source, ReadContext(run_id="bench")):
        if isinstance(item, Rollout):
            n += 1
        else:
            bad += 1
    return reader.NAME, n, bad


def shapes(tmp: Path, native: Path) -> None:
    """MB/s of one `BIG_MB` record as a JSON object and as a JSON list of it."""
    record = json.loads(native.read_text().splitlines()[0])
    line = 'tool output "quoted" \\ C:\\dir {"k": [1, 2]}\n'
    record["pad"] = line * int(BIG_MB * 1e6 / len(line))
    body = json.dumps(record).encode()
    print(f"\n{'native, one big record':<24} {'MB':>6} {'seconds':>8} {'MB/s':>7}")
    for shape, data in (("object", body), ("list of one", b"[\n" + body + b"\n]\n")):
        path = tmp / f"big-{shape.replace(' ', '-')}.json"
        path.write_bytes(data)
        start = time.perf_counter()
        _, n, bad = read_all(path)
        secs = time.perf_counter() - start
        assert (n, bad) == (1, 0), (shape, n, bad)
        print(f"{shape:<24} {len(data) / 1e6:>6.1f} {secs:>8.2f} {len(data) / 1e6 / secs:>7.1f}")
        path.unlink()


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        files = inputs(Path(d))
        print(f"{'reader':<10} {'MB':>6} {'seconds':>8} {'MB/s':>7} {'rollouts/s':>11} {'rejected':>8}")
        for name in [n for n in registry.names() if n in files]:  # the formats with an input built above
            path = files[name]
            size = path.stat().st_size / 1e6
            start = time.perf_counter()
            read_by, n, bad = read_all(path)
            secs = time.perf_counter() - start
            assert read_by == name, (name, read_by)
            print(f"{name:<10} {size:>6.1f} {secs:>8.2f} {size / secs:>7.1f} {n / secs:>11.0f} {bad:>8}")
        shapes(Path(d), files["native"])


if __name__ == "__main__":
    main()
