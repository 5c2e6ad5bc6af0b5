"""Writes a Trackio project with the real `trackio` package, offline, in local mode, then dumps
what trackio itself reads back. Run in its own process (trackio reads TRACKIO_DIR at import):

    TRACKIO_DIR=DIR python tests/producers/trackio_writer.py OUT.json

With TRACKIO_STORAGE_MODE=jsonl (what trackio picks on a network filesystem) trackio writes
append-only JSONL fragments (`inbox/<writer>/*.jsonl`) instead of SQLite: they are copied to
`DIR/../inbox-snapshot` and then imported by trackio itself (`fragments.import_inbox_dir`, which
deletes them), so the project database and what trackio reads back are the same as in SQLite mode.

Every socket connection to anything but the loopback is refused and recorded in OUT.json
(`connections`), so a test can assert that nothing went to the network.
"""
from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

CONNECTIONS: list[str] = []
_connect = socket.socket.connect


def _guard(self, address):  # noqa: ANN001
    host = address[0] if isinstance(address, tuple) else str(address)
    if self.family in (socket.AF_INET, socket.AF_INET6) and host not in ("127.0.0.1", "::1", "localhost"):
        CONNECTIONS.append(repr(address))
        raise OSError(f"network refused in a producer test: {address!r}")
    return _connect(self, address)


socket.socket.connect = _guard  # type: ignore[method-assign]

PROJECT, RUN = "rl-project", "grpo-run"
STEPS = 3
GROUP = 4


def _iso(step: int, i: int, k: int) -> str:
    return f"2026-12-01T10:{step:02d}:{i * 10 + k:02d}.250000+00:00"


def trace(trackio, step: int, i: int):
    """Sample i of step `step`: one tool call (i=0), two parallel calls (i=1), a tool call that
    fails (i=2), no tool at all (i=3)."""
    q = f"What is {step + 6} * {i + 7}?"
    messages: list[dict] = [{"role": "system", "content": "You are a calculator agent."},
                            {"role": "user", "content": q}]
    spans: list[dict] = []
    answer = str((step + 6) * (i + 7))
    calls = {0: [("calc", {"expr": f"{step + 6}*{i + 7}"})],
             1: [("calc", {"expr": f"{step + 6}*{i + 7}"}), ("lookup", {"key": "units"})],
             2: [("calc", {"expr": f"{step + 6}/0"})],
             3: []}[i]
    k = 0
    if calls:
        tcs = [{"id": f"call_{step}_{i}_{j}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)}} for j, (name, args) in enumerate(calls)]
        messages.append({"role": "assistant", "content": None, "tool_calls": tcs})
        spans.append({"id": f"gen-{step}-{i}-0", "name": "chat", "kind": "generation", "model": "Qwen/Qwen3-0.6B",
                      "start_time": _iso(step, i, 0), "end_time": _iso(step, i, 1), "status": "ok",
                      "usage": {"input_tokens": 40 + i, "output_tokens": 12 + i}})
        for j, tc in enumerate(tcs):
            failed = i == 2
            result = "division by zero" if failed else (answer if tc["function"]["name"] == "calc" else "none")
            messages.append({"role": "tool", "tool_call_id": tc["id"], "content": result})
            span = {"id": tc["id"], "name": tc["function"]["name"], "kind": "tool", "parent_id": f"gen-{step}-{i}-0",
                    "start_time": _iso(step, i, 2 + j), "end_time": _iso(step, i, 3 + j),
                    "input": json.loads(tc["function"]["arguments"]), "output": result,
                    "status": "error" if failed else "ok"}
            if failed:
                span["error"] = "ZeroDivisionError: division by zero"
            spans.append(span)
        k = 5
    messages.append({"role": "assistant", "content": f"The answer is {answer}."})
    spans.append({"id": f"gen-{step}-{i}-1", "name": "chat", "kind": "generation", "model": "Qwen/Qwen3-0.6B",
                  "start_time": _iso(step, i, k + 1), "end_time": _iso(step, i, k + 2), "status": "ok",
                  "usage": {"prompt_tokens": 80 + i, "completion_tokens": 6, "total_tokens": 86 + i},
                  "cost_usd": 0.0001})
    reward = 1.0 if i in (0, 3) else 0.0
    metadata = {"reward": reward, "advantage": reward - 0.5, "policy_version": step, "finish_reason": "stop",
                "task_id": f"mult-{step}", "temperature": 0.7, "env": {"name": "calc-env", "seed": step * 10 + i}}
    if step < 2:  # the last step names no group: the log() call's list is the group
        metadata["group_id"] = f"step{step}-prompt"
    return trackio.Trace(messages=messages, metadata=metadata, spans=spans)


def edge_cases(trackio) -> None:
    """Project `rl-edge`, run `edge-run`, one log() of five traces: spans and no messages (a
    generation, then a tool that fails); a generation that failed (provider error); a trace whose
    own status is `error`; a generation cut by its token limit (`stop_reason: length`); a failed
    generation retried before the answer."""
    t = "2026-12-01T11:00:0{}Z"
    spans_only = trackio.Trace(messages=[], metadata={"reward": 0.0}, spans=[
        {"id": "g1", "name": "chat", "kind": "generation", "model": "m", "input": "List the files.",
         "output": "I will call ls.", "start_time": t.format(0), "end_time": t.format(1),
         "usage": {"input_tokens": 5, "output_tokens": 4}},
        {"id": "t1", "name": "ls", "kind": "tool", "input": {"path": "/"}, "status": "error",
         "error": "PermissionError: /", "start_time": t.format(2), "end_time": t.format(3)},
        {"id": "s1", "name": "episode", "kind": "span", "start_time": t.format(0), "end_time": t.format(4)}])
    provider_error = trackio.Trace(
        messages=[{"role": "user", "content": "Hello?"}, {"role": "assistant", "content": ""}],
        spans=[{"id": "g2", "kind": "generation", "model": "m", "status": "error", "error": "upstream timeout",
                "start_time": t.format(0), "duration_ms": 1500}])
    status_error = trackio.Trace(messages=[{"role": "user", "content": "Run it."}],
                                 metadata={"status": "error", "error": "sandbox crashed", "reward": 0.0})
    length_cut = trackio.Trace(messages=[{"role": "user", "content": "Write a lot."},
                                         {"role": "assistant", "content": "word " * 20}],
                               metadata={"stop_reason": "length", "score": 0.5, "tool_errors": 3})
    retried = trackio.Trace(messages=[{"role": "user", "content": "Again?"}, {"role": "assistant", "content": "Yes."}],
                            metadata={"finish_reason": "stop"},
                            spans=[{"id": "g3", "kind": "generation", "model": "m", "status": "error",
                                    "error": "429 rate limited", "start_time": t.format(0), "end_time": t.format(1)},
                                   {"id": "g4", "kind": "generation", "model": "m", "status": "ok",
                                    "start_time": t.format(2), "end_time": t.format(3),
                                    "usage": {"input_tokens": 3, "output_tokens": 2}}])
    trackio.init(project="rl-edge", name="edge-run", embed=False, auto_log_gpu=False, auto_log_cpu=False)
    trackio.log({"samples": [spans_only, provider_error, status_error, length_cut, retried], "tool_errors": 7.0},
                step=5)
    trackio.finish()


def main(out: Path) -> None:
    import trackio
    from trackio.sqlite_storage import SQLiteStorage

    if os.environ.get("TRACKIO_WRITER_CASE") == "edge":
        edge_cases(trackio)
        traces = SQLiteStorage.get_traces("rl-edge", run="edge-run", sort="step_asc")
        out.write_text(json.dumps({"version": trackio.__version__, "project": "rl-edge", "run": "edge-run",
                                   "traces": traces, "connections": CONNECTIONS}, default=str))
        return

    trackio.init(project=PROJECT, name=RUN, config={"lr": 1e-6, "algo": "grpo"}, embed=False,
                 auto_log_gpu=False, auto_log_cpu=False)
    for step in range(STEPS):
        logged = {"rollouts": [trace(trackio, step, i) for i in range(GROUP)],
                  "reward_mean": 0.5, "kl": 0.01 * step, "train/loss": float("nan") if step == 1 else 0.1}
        if step == 2:
            logged["eval_sample"] = trackio.Trace(messages=[{"role": "user", "content": "hi"},
                                                            {"role": "assistant", "content": "hello"}],
                                                  metadata={"score": 0.25})
        trackio.log(logged, step=step)
    trackio.finish()

    trackio_dir = Path(os.environ["TRACKIO_DIR"])
    if (trackio_dir / "inbox").is_dir():
        import shutil

        from trackio import fragments

        shutil.copytree(trackio_dir / "inbox", trackio_dir.parent / "inbox-snapshot")
        fragments.import_inbox_dir()
    SQLiteStorage.export_for_static_space(PROJECT, trackio_dir.parent / "static")
    SQLiteStorage.export_to_parquet()  # the copies a Hub dataset sync keeps beside the .db
    traces = SQLiteStorage.get_traces(PROJECT, run=RUN, sort="step_asc")
    logs = SQLiteStorage.get_logs(PROJECT, RUN)
    out.write_text(json.dumps({"version": trackio.__version__, "project": PROJECT, "run": RUN, "traces": traces,
                               "logs": logs, "connections": CONNECTIONS}, default=str, allow_nan=True))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
