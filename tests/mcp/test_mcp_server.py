"""`rollscope mcp`, the real console script, driven by the `mcp` SDK's own client over stdio (and
streamable HTTP), on the demo run built by `rollscope demo` + `rollscope ingest`, on SQLite and
Postgres: the eight tools and their arguments, the step-18 sandbox crash in step_story, search (paged
by its cursor), failure_signatures and compare_runs' paired difference, filters and pages,
bounded rollouts, one-line tool errors, the read lock, `--url` against a real uvicorn server, and `--http`.

Every async client call runs in a fresh thread (`_call`): in a worker that also holds a
Playwright sync session the test's own thread has a running event loop, and `anyio.run` there
raises "cannot be called from a running event loop".
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest

from tests.conftest import DIALECTS, ROOT, _pg_admin, _pg_url
from tests.helpers import rollout, write_jsonl

RS = str(Path(sys.executable).with_name("rollscope"))
RUN, OTHER, LONG = "demo-grpo", "demo-grpo-b", "long-run"
TOOLS = {"list_runs", "run_summary", "step_story", "list_rollouts", "get_rollout", "search", "failure_signatures",
         "compare_runs"}
LONG_TEXT = "x" * 9_000 + " \u202eTAIL-MARKER the end"

pytestmark = pytest.mark.slow


def _call(fn, *args):
    """Run `fn(*args)` (async) with anyio in a fresh thread, never in the test's own."""
    with ThreadPoolExecutor(1) as ex:
        return ex.submit(anyio.run, fn, *args).result()


def _env(db: str, **extra: str) -> dict[str, str]:
    """The environment of a subprocess: this one without any ROLLSCOPE_ setting, plus `db` and `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLSCOPE_")}
    return {**env, "ROLLSCOPE_DATABASE_URL": db, "ROLLSCOPE_DB__RETRY_SECONDS": "0", **extra}


@pytest.fixture(scope="module")
def demo_files(tmp_path_factory) -> list[str]:
    """The demo run (`rollscope demo`), a small second run to compare with, and a run with one
    long rollout (31 messages, one of 9,000+ characters ending in a bidi control)."""
    from ingest import demo

    folder = tmp_path_factory.mktemp("mcp-demo")
    done = subprocess.run([RS, "demo", "--out", str(folder / "demo-run.jsonl")], capture_output=True, text=True,
                          timeout=120, env=_env("sqlite:///unused.db"), cwd=folder)
    assert done.returncode == 0, done.stderr
    demo.write(folder / "b.jsonl", run_id=OTHER, steps=30, groups=2, group_size=4, seed=1, tokenizer=False)
    messages = [{"role": "user", "content": "start"}]
    for i in range(30):
        messages.append({"role": "assistant" if i % 2 == 0 else "user",
                         "content": LONG_TEXT if i == 4 else f"turn {i}"})
    write_jsonl(folder / "long.jsonl", [rollout("long-1", run=LONG, step=0, messages=messages, tokens=False)])
    return [str(folder / "demo-run.jsonl"), str(folder / "b.jsonl"), str(folder / "long.jsonl"),
            "--tokenizer", str(folder / "demo-run.tokenizer.json")]


def _dialects(request) -> list[str]:
    """The dialects the selected tests of this module use (the lock, --url and --http tests: SQLite)."""
    out = []
    for item in request.session.items:
        if item.module is request.module:
            callspec = getattr(item, "callspec", None)
            dialect = callspec.params.get("demo_db", "sqlite") if callspec else "sqlite"
            out += [dialect] if dialect not in out else []
    return out or ["sqlite"]


@pytest.fixture(scope="module")
def databases(request, demo_files, tmp_path_factory):
    """Per dialect the selected tests use, a database holding the three runs, each ingested by
    `rollscope ingest`, all at once (two processes: the module's largest cost, halved)."""
    folder = tmp_path_factory.mktemp("mcp-db")
    urls, names, procs = {}, [], {}
    try:
        for dialect in _dialects(request):
            if dialect == "sqlite":
                urls[dialect] = f"sqlite:///{folder / 'demo.db'}"
            else:
                name = f"rs_mcp_{uuid.uuid4().hex[:12]}"
                with _pg_admin() as conn:
                    conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{request.getfixturevalue("_pg_template")}"')
                names.append(name)
                urls[dialect] = _pg_url(name)
            log = (folder / f"ingest-{dialect}.txt").open("w+")
            procs[dialect] = (subprocess.Popen([RS, "ingest", *demo_files], stdout=log, stderr=subprocess.STDOUT,
                                               env=_env(urls[dialect])), log)
        for dialect, (proc, log) in procs.items():
            code = proc.wait(300)
            log.seek(0)
            assert code == 0, (dialect, log.read()[-2000:])
            log.close()
        yield urls
    finally:
        for name in names:
            request.getfixturevalue("_pg_dropper")(name)


@pytest.fixture(scope="module")
def sqlite_demo(databases) -> str:
    return databases["sqlite"]


@pytest.fixture(scope="module", params=DIALECTS)
def demo_db(request, databases) -> str:
    """A database of each dialect holding the three runs."""
    return databases[request.param]


async def _session(args: list[str], env: dict, calls, errlog) -> dict:
    """Start `rollscope mcp ARGS` over stdio, list its tools, then run `calls(session, out)`."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=RS, args=["mcp", *args], env=env, cwd=str(ROOT))
    out: dict = {}
    with anyio.fail_after(120):
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                out["tools"] = {t.name: t for t in (await session.list_tools()).tools}
                await calls(session, out)
    return out


def _text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def _demo_calls(session, out: dict) -> None:
    async def call(key, name, **args):
        out[key] = await session.call_tool(name, args)
        return out[key]

    await call("runs", "list_runs")
    await call("summary", "run_summary", run=RUN)
    await call("story", "step_story", run=RUN, step=18)
    first = await call("errors_p1", "list_rollouts", run=RUN, step=18, ending="error", limit=15)
    await call("errors_p2", "list_rollouts", run=RUN, step=18, ending="error", limit=15,
               after=(first.structured_content or {}).get("after"))
    await call("task_filter", "list_rollouts", run=RUN, task="edit/*", reward_min=1, step=29)
    await call("rollout", "get_rollout", run=RUN, rollout="s018-g0-r0", limit=3)
    await call("rollout_p2", "get_rollout", run=RUN, rollout="s018-g0-r0", offset=3, limit=3)
    await call("long", "get_rollout", run=LONG, rollout="long-1")
    await call("long_p2", "get_rollout", run=LONG, rollout="long-1", offset=20)
    await call("long_msg", "get_rollout", run=LONG, rollout="long-1", message=5, chars_from=4000)
    await call("long_msg_end", "get_rollout", run=LONG, rollout="long-1", message=5, chars_from=8000)
    await call("err_run", "step_story", run="nope", step=1)
    await call("err_step", "step_story", run=RUN, step=999)
    await call("err_type", "step_story", run=RUN, step="eighteen")
    await call("err_ending", "list_rollouts", run=RUN, ending="crashed")
    await call("err_int_id", "get_rollout", run=RUN, rollout=12345)
    await call("err_compare", "compare_runs", runs=RUN)
    await call("compare", "compare_runs", runs=f"{RUN},{OTHER}")
    await call("compare_list", "compare_runs", runs=[RUN, OTHER])
    await call("search_tool", "search", query="edit_file", run=RUN, limit=3)
    await call("search", "search", query="sandbox", run=RUN)
    s1 = await call("search_p1", "search", query='"host lost" step:18', run=RUN, limit=15)
    await call("search_p2", "search", query='"host lost" step:18', run=RUN, limit=15,
               after=(s1.structured_content or {}).get("after"))
    failures = await call("failures", "failure_signatures", run=RUN)
    top = ((failures.structured_content or {}).get("signatures") or [{"id": 1}])[0]
    await call("by_signature", "list_rollouts", run=RUN, signature=top.get("id"), limit=200)


@pytest.fixture(scope="module")
def sessions(databases, tmp_path_factory) -> dict:
    """Per database, one stdio session of `rollscope mcp` on it (all at once), every call's result
    by key; or the exception the session raised, with the server's stderr."""
    folder = tmp_path_factory.mktemp("mcp-log")

    def one(dialect: str, url: str):
        with (folder / f"{dialect}.txt").open("w+") as errlog:
            try:
                return anyio.run(_session, [], _env(url), _demo_calls, errlog)
            except Exception as exc:  # noqa: BLE001 - re-raised by the test that uses this database
                errlog.seek(0)
                return RuntimeError(f"{type(exc).__name__}: {exc}; rollscope mcp said: {errlog.read()[-3000:]}")

    with ThreadPoolExecutor(len(databases)) as ex:  # fresh threads, never the test's own
        futures = {url: ex.submit(one, dialect, url) for dialect, url in databases.items()}
        return {url: f.result() for url, f in futures.items()}


@pytest.fixture
def demo_answers(demo_db, sessions) -> dict:
    got = sessions[demo_db]
    if isinstance(got, Exception):
        raise got
    return got


def test_the_eight_tools_are_listed_with_their_arguments(demo_answers):
    tools = demo_answers["tools"]
    assert set(tools) == TOOLS
    args = {name: set((t.input_schema or {}).get("properties", {})) for name, t in tools.items()}
    assert args["list_runs"] == set()
    assert {"run"} == args["run_summary"] == args["failure_signatures"]
    assert args["step_story"] == {"run", "step"}
    assert {"run", "step", "ending", "group", "task", "reward_min", "reward_max", "flag", "staleness", "signature",
            "after"} <= args["list_rollouts"]
    assert {"run", "rollout", "offset"} <= args["get_rollout"]
    assert {"query", "run"} <= args["search"]
    assert "runs" in args["compare_runs"]
    assert all(t.annotations and t.annotations.read_only_hint for t in tools.values())
    assert all(t.description for t in tools.values())


def test_list_runs_and_run_summary_name_the_step_18_alert(demo_answers):
    runs = demo_answers["runs"]
    assert not runs.is_error
    assert {r["run"] for r in runs.structured_content["runs"]} == {RUN, OTHER, LONG}
    assert "3 runs:" in _text(runs) and "/runs/demo-grpo" in _text(runs)
    summary = demo_answers["summary"]
    assert [a["step"] for a in summary.structured_content["alerts"]] == [18]
    assert "sandbox_crash 20" in _text(summary)
    assert summary.structured_content["url"] == "/runs/demo-grpo"  # no --url / ROLLSCOPE_URL: paths


def test_step_story_on_step_18_names_the_sandbox_crash(demo_answers):
    story = demo_answers["story"]
    assert not story.is_error
    text = _text(story)
    assert "Step 18 of run demo-grpo: 64 rollouts." in text
    assert "20 of 64 rollouts (31%) ended as error (sandbox_crash 20)" in text
    assert "Errors: 20 (sandbox_crash 20) — /runs/demo-grpo/rollouts?step=18&ending=error" in text
    data = story.structured_content
    error = next(e for e in data["endings"] if e["ending"] == "error")
    assert error["count"] == 20 and error["details"] == [{"detail": "sandbox_crash", "count": 20}]
    assert data["url"] == "/runs/demo-grpo/steps/18"


def test_list_rollouts_filters_and_pages(demo_answers):
    p1, p2 = demo_answers["errors_p1"].structured_content, demo_answers["errors_p2"].structured_content
    assert p1["total"] == 20 and len(p1["rollouts"]) == 15 and p1["after"]
    assert len(p2["rollouts"]) == 5 and "after" not in p2
    rows = p1["rollouts"] + p2["rollouts"]
    assert len({r["rollout"] for r in rows}) == 20
    assert all(r["step"] == 18 and r["ending"] == "error" and r["ending_detail"] == "sandbox_crash" for r in rows)
    assert rows[0]["url"] == f"/runs/demo-grpo/rollouts/{rows[0]['rollout']}"
    assert f"after={p1['after']!r}" in _text(demo_answers["errors_p1"])
    head = "20 rollouts in run demo-grpo with step=18, ending=error; 15 on this page:"
    assert head in _text(demo_answers["errors_p1"])
    tf = demo_answers["task_filter"].structured_content
    assert tf["rollouts"] and all(r["task"].startswith("edit/") and r["reward"] >= 1 and r["step"] == 29
                                  for r in tf["rollouts"])


def test_get_rollout_is_bounded_and_pages(demo_answers):
    r = demo_answers["rollout"]
    data = r.structured_content
    assert data["ending"] == {"type": "error", "detail": "sandbox_crash",
                              "message": "sandbox exited with code 137 (host lost) while running edit_file"}
    assert [m["message"] for m in data["messages"]] == [0, 1, 2] and data["next_offset"] == 3
    assert data["findings"][0]["kind"] == "unanswered_tool_call"
    assert "call get_rollout again with offset=3" in _text(r)
    p2 = demo_answers["rollout_p2"].structured_content
    assert [m["message"] for m in p2["messages"]] == [3, 4, 5]
    long = demo_answers["long"].structured_content
    assert len(long["messages"]) == 20 and long["next_offset"] == 20 and long["messages_total"] == 31
    big = next(m for m in long["messages"] if m["message"] == 5)
    shown = len(big["content"])  # the twin's own cap on a message's text, or ours (4,000), whichever is less
    assert 0 < shown <= 4000 and big["content_cut"] and big["content_chars"] == len(LONG_TEXT)
    assert f"message=5 and chars_from={shown} reads on" in _text(demo_answers["long"])
    assert len(_text(demo_answers["long"])) < 20 * 4000 // 2  # one long message, the rest short
    assert [m["message"] for m in demo_answers["long_p2"].structured_content["messages"]] == list(range(20, 31))
    piece = demo_answers["long_msg"].structured_content
    assert piece["chars_from"] == 4000 and len(piece["text"]) == 4000 and piece["next_chars_from"] == 8000
    end = demo_answers["long_msg_end"].structured_content
    assert end["text"].endswith("TAIL-MARKER the end") and "next_chars_from" not in end
    assert "⟨U+202E⟩TAIL-MARKER" in end["text"]  # the bidi control shown, not obeyed


def test_errors_are_one_line_tool_errors(demo_answers):
    expected = {"err_run": "no run 'nope'", "err_step": "no step 999 in run 'demo-grpo'",
                "err_ending": "ending must be one of submitted, task_detected, truncated, length_cut, error, unknown",
                "err_int_id": "no rollout '12345' in run 'demo-grpo'",
                "err_compare": "runs: give 2 to 8 different run ids, comma-separated (runs=a,b)"}
    for key, message in expected.items():
        result = demo_answers[key]
        assert result.is_error, key
        assert _text(result) == message, key
    bad = demo_answers["err_type"]
    assert bad.is_error and "\n" not in _text(bad) and _text(bad).startswith("invalid arguments: step: ")
    assert "Traceback" not in _text(bad) and "pydantic" not in _text(bad)


def test_compare_runs_takes_a_comma_list_or_a_list(demo_answers):
    for key in ("compare", "compare_list"):
        result = demo_answers[key]
        assert not result.is_error, _text(result)
        assert [r["run"] for r in result.structured_content["runs"]] == [RUN, OTHER]
        assert result.structured_content["url"] == "/compare?runs=demo-grpo%2Cdemo-grpo-b"


def test_search_answers_hits_with_links(demo_answers):
    result = demo_answers["search_tool"]
    assert not result.is_error, _text(result)
    hits = result.structured_content["hits"]
    assert hits and all(h["run"] == RUN and h["url"].startswith("/runs/demo-grpo/rollouts/") for h in hits)
    assert "«" in _text(result) and "edit" in _text(result)  # each match marked (the databases mark words apart)



def test_search_finds_the_sandbox_crash(demo_answers):
    result = demo_answers["search"]
    assert not result.is_error, _text(result)
    hits = result.structured_content["hits"]
    assert hits and {h["step"] for h in hits} >= {18}
    assert "sandbox" in _text(result).lower() and not re.search(r"\b0 hits", _text(result))  # "20 hits" is some


def test_search_pages_by_the_cursor_to_the_step_18_crashes(demo_answers):
    first, second = demo_answers["search_p1"], demo_answers["search_p2"]
    assert not first.is_error and not second.is_error, (_text(first), _text(second))
    assert first.structured_content["after"] and "after=" in _text(first)
    ids = [h["rollout"] for h in first.structured_content["hits"] + second.structured_content["hits"]]
    assert len(ids) == len(set(ids)) == 20 and all(h["step"] == 18 for h in second.structured_content["hits"])
    assert "after" not in second.structured_content


def test_failure_signatures_name_the_sandbox_crash_on_top(demo_answers):
    result = demo_answers["failures"]
    assert not result.is_error, _text(result)
    top = result.structured_content["signatures"][0]
    assert "sandbox" in top["template"] and top["count"] >= 20 and top["first_step"] <= 18 <= top["last_step"]
    assert "sandbox" in _text(result).splitlines()[1]


def test_list_rollouts_filters_by_the_top_signature(demo_answers):
    result = demo_answers["by_signature"]
    assert not result.is_error, _text(result)
    rows = result.structured_content["rollouts"]
    assert len(rows) >= 20 and all(r["ending"] == "error" for r in rows)
    assert sum(r["step"] == 18 for r in rows) == 20  # the incident's crashes, besides the run's usual few


def test_compare_runs_gives_the_paired_difference(demo_answers):
    data = demo_answers["compare"].structured_content
    assert data["paired"]["tasks"] and "sign_test" in data["paired"]
    assert all({"task", "diff", "ci_low", "ci_high"} <= set(t) for t in data["paired"]["tasks"])


# --- the read lock, --url, --http (SQLite) --------------------------------------------------------------

def test_a_locked_database_without_a_token_is_exit_2(sqlite_demo):
    done = subprocess.run([RS, "mcp"], input="", capture_output=True, text=True, timeout=120,
                          env=_env(sqlite_demo, ROLLSCOPE_REQUIRE_READ_TOKEN="1"))
    assert done.returncode == 2, done.stderr
    assert "reading is locked (ROLLSCOPE_REQUIRE_READ_TOKEN is set): give a read token" in done.stderr
    assert done.stdout == ""  # stdout is the protocol's: nothing else is ever written there


def test_url_against_a_real_locked_server_with_and_without_a_token(sqlite_demo, tmp_path):
    from app import auth
    from app.config import Settings
    from app.main import create_app
    from tests.helpers import serving

    app = create_app(Settings(database_url=sqlite_demo, require_read_token=True))
    token, _ = auth.issue(app.state.engine, "read", name="mcp-test")
    with serving(app) as base:
        refused = subprocess.run([RS, "mcp", "--url", base], input="", capture_output=True, text=True, timeout=120,
                                 env=_env(sqlite_demo))
        assert refused.returncode == 2, refused.stderr
        assert "Rollscope refused the read: reading needs a token" in refused.stderr

        async def calls(session, out):
            out["story"] = await session.call_tool("step_story", {"run": RUN, "step": "18"})
            out["missing"] = await session.call_tool("get_rollout", {"run": RUN, "rollout": "nope"})

        with (tmp_path / "stderr.txt").open("w+") as errlog:
            out = _call(_session, ["--url", base], _env(sqlite_demo, ROLLSCOPE_TOKEN=token), calls, errlog)
    story = out["story"]
    assert not story.is_error, _text(story)
    assert "sandbox_crash 20" in _text(story)
    assert story.structured_content["url"] == f"{base}/runs/demo-grpo/steps/18"  # absolute with --url
    assert story.structured_content["rollouts_url"] == f"{base}/runs/demo-grpo/rollouts?step=18"
    assert token not in str(story.structured_content)  # links never carry the token
    assert out["missing"].is_error and _text(out["missing"]) == "no rollout 'nope' in run 'demo-grpo'"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_speaks_streamable_http(sqlite_demo, tmp_path):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    port = _free_port()
    log = (tmp_path / "stderr.txt").open("w+")
    proc = subprocess.Popen([RS, "mcp", "--http", "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                            env=_env(sqlite_demo, ROLLSCOPE_URL="https://rollscope.example.org"))
    try:
        deadline = time.monotonic() + 90
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, log.seek(0) or log.read()
            time.sleep(0.2)

        async def run():
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    names = {t.name for t in (await session.list_tools()).tools}
                    return names, await session.call_tool("step_story", {"run": RUN, "step": 18})

        names, story = _call(run)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    assert names == TOOLS
    assert "sandbox_crash 20" in _text(story)
    assert story.structured_content["url"] == "https://rollscope.example.org/runs/demo-grpo/steps/18"  # ROLLSCOPE_URL
