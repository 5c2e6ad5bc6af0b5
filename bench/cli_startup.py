"""The CLI's start-up: wall-clock seconds of `rollscope --help` and of `rollscope ingest` of one
small file (one workload rollout, into a SQLite database already at the migration head: the
second ingest of it), each the median of several runs in a fresh process, with their CPU time
and the load average beside them (the machine is shared: wall-clock start-up moves with its
load, CPU time much less). `PYTHONPATH=other/checkout` times another checkout's code.

Then the floors, timed the same way: an empty interpreter, `import typer.rich_utils` (what
typer's help screen imports), the libraries an ingest cannot start without (SQLAlchemy; then
SQLModel, numpy and pydantic-settings: the table models, token arrays and settings), and the
ingest path's own imports without running it (`import app.cli, app.worker.sync`): the last
line's gap to `rollscope ingest` is the command's own work.

    .venv/bin/python bench/cli_startup.py [--runs 5]

Where the time goes: `python -X importtime -m app.cli ingest FILE 2> imports.txt`.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import workload  # noqa: E402

ROLLSCOPE = Path(sys.executable).with_name("rollscope")

# (what, python -c code): the floors printed under the figures
FLOORS = (
    ("python -c pass", "pass"),
    ("import typer.rich_utils (typer's help screen)", "import typer.rich_utils"),
    ("import sqlalchemy", "import sqlalchemy"),
    ("import sqlmodel, numpy, pydantic_settings", "import sqlmodel, numpy, pydantic_settings"),
    ("the ingest path's imports (app.cli, app.worker.sync)", "import app.cli, app.worker.sync"),
)


def timed(args: list[str], env: dict, cwd: Path, runs: int) -> tuple[float, float]:
    """Median (wall-clock, CPU) seconds of `rollscope ARGS` over `runs` fresh processes. CPU (user
    + system of the child) is what a quiet machine's wall clock would be, near enough. ARGS
    starting with `-c` run `python -c ...` instead (a floor)."""
    cmd = [sys.executable, *args] if args[:1] == ["-c"] else [str(ROLLSCOPE), *args]
    times, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(times), statistics.median(cpus)


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per command (median)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        path = workload.write(work / "one.jsonl", 1)
        env = {**os.environ, "ROLLSCOPE_DATABASE_URL": f"sqlite:///{work / 'cli.db'}"}
        # as installed: bytecode cached (the first run writes it). With PYTHONDONTWRITEBYTECODE set
        # every start compiles the project's ~110 modules again (~1 s of CPU here).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([str(ROLLSCOPE), "ingest", str(path)], env=env, cwd=work, capture_output=True, check=True)
        help_s = timed(["--help"], env, work, args.runs)
        ingest_s = timed(["ingest", str(path)], env, work, args.runs)
        floors = [(what, timed(["-c", code], env, work, args.runs)) for what, code in FLOORS]
    print(f"rollscope --help: {help_s[0]:.2f} s (CPU {help_s[1]:.2f} s); rollscope ingest of one rollout "
          f"(database at head): {ingest_s[0]:.2f} s (CPU {ingest_s[1]:.2f} s); median of {args.runs}; {load()}")
    for what, (wall, cpu) in floors:
        print(f"  floor, {what}: {wall:.2f} s (CPU {cpu:.2f} s)")


if __name__ == "__main__":
    main()
