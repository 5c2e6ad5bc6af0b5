"""Building native rollouts and ingesting them through the real pipeline, for tests."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from app.worker.sync import IngestReport, ingest_paths
from ingest.formats.base import ReadContext
from ingest.formats.native import write_line
from ingest.schema import Rollout


def rollout(rid: str, *, run: str = "r1", step: int | None = 0, group: str | None = None, index: int | None = None,
            reward: float | None = 1.0, ending: str = "submitted", messages=None, tokens: bool = True, **kw) -> Rollout:
    """A small native rollout: user → assistant (sampled tokens) unless `messages` is given."""
    messages = messages or [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]
    nodes = []
    for i, m in enumerate(messages):
        node = {"parent": i - 1 if i else None, "message": m, "sampled": m["role"] == "assistant"}
        if tokens:
            n = 3
            node["token_ids"] = [100 + i * 10 + k for k in range(n)]
            node["mask"] = [m["role"] == "assistant"] * n
            node["logprobs"] = [-0.5] * n if m["role"] == "assistant" else [None] * n
        nodes.append(node)
    body = {"schema": "rollscope/1", "id": rid, "run": {"id": run}, "step": step, "nodes": nodes,
            "reward": reward, "ending": {"type": ending}, **kw}
    if group is not None:
        body["group"] = {"id": group, "index": index}
    return Rollout.model_validate(body)


def write_jsonl(path: Path, rollouts: list[Rollout]) -> Path:
    path.write_bytes(b"".join(write_line(r) for r in rollouts))
    return path


def ingest(engine, *paths: Path, run: str | None = None, tokenizer_key: str | None = None,
           check_context=None) -> IngestReport:
    return ingest_paths(engine, list(paths), ReadContext(run_id=run), tokenizer_key=tokenizer_key,
                        check_context=check_context)


def stored(engine, run: str) -> dict[str, dict]:
    """What the database holds of `run` (read back as for export), by `id#attempt`, without the
    source location: what a round trip must keep."""
    from app.queries.rollout_list import RolloutFilters
    from app.store.load import iter_rollouts

    out = {}
    for r in iter_rollouts(engine, run, RolloutFilters()):
        body = r.to_json_dict()
        body.pop("source", None)
        out[f"{r.id}#{r.attempt}"] = body
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Tests check answers, not latency: a loaded CI machine has taken over httpx's default 5 s to
# answer the first request of a fresh server. Every client of a live server waits this long.
ANSWER_TIMEOUT = 30
http = httpx.Client(timeout=ANSWER_TIMEOUT)


@contextmanager
def serving(app) -> Iterator[str]:
    """Serve `app` (a real `create_app`) with uvicorn on a free port in a thread, over real TCP;
    yields its base URL, stops the server and disposes the app's engine afterwards."""
    import threading
    import time

    import uvicorn

    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(400):
        if srv.started:
            break
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(10)
        app.state.engine.dispose()


def read_folder(folder: Path, errors: list | None = None) -> Iterator[tuple[Path, str, Rollout]]:
    """Every rollout under `folder` (a file or a folder) as a notebook reads it with `ingest`
    alone: each file detected (files no reader knows are skipped), read through
    `ingest.files.read_records`, as (file, reader NAME, rollout). Rejected records go to `errors`."""
    from ingest.errors import RecordError
    from ingest.files import read_records, walk
    from ingest.formats.registry import detect
    from ingest.source import open_source

    files = [path for path, _ in walk([folder])]
    root = folder if folder.is_dir() else folder.parent
    ctx = ReadContext(root=root, files=frozenset(p.resolve() for p in files))
    for path in files:
        try:
            source = open_source(path)
            reader = detect(source)
        except RecordError:
            continue
        if reader is None:
            continue
        for item in read_records(reader, source, ctx, errors if errors is not None else []):
            if not isinstance(item, RecordError):
                yield path, reader.NAME, item


def bench_workload():
    """bench/workload.py (the benchmarks' generated rollouts), imported for a test without leaving
    bench/ on sys.path."""
    import sys

    bench = str(Path(__file__).resolve().parents[1] / "bench")
    sys.path.insert(0, bench)
    try:
        import workload
    finally:
        sys.path.remove(bench)
    return workload


def run_cli(*args: str, env: dict[str, str] | None = None):
    """`rollscope ARGS` run in this process through the console entry point (`app.cli.main`: its
    `--db` hoisting, exit codes and one-line errors), with `env` added to the environment for this
    call alone. The same answer as the installed command, without starting an interpreter (2-3 s
    of CPU each on this machine). Returns a `subprocess.CompletedProcess` (returncode, and stdout
    and stderr as text). `--debug` re-raises here rather than printing a traceback: run that one
    as a subprocess."""
    import contextlib
    import io
    import os
    import subprocess
    import sys

    from app.cli import common, main
    from app.config import get_settings

    saved_env, saved_argv, saved_source = dict(os.environ), sys.argv[:], common._db_source
    stdout, stderr = io.StringIO(), io.StringIO()
    os.environ.update(env or {})
    sys.argv = ["rollscope", *args]
    get_settings.cache_clear()
    code: int = 0
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:  # `--db` exports the URL to the environment (common.choose_database): undone
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv, common._db_source = saved_argv, saved_source
        get_settings.cache_clear()
    return subprocess.CompletedProcess(["rollscope", *args], code, stdout.getvalue(), stderr.getvalue())
