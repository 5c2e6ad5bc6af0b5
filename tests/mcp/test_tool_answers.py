"""The MCP tools called in-process on the real app (`build_server` over `Reader.for_app`), on SQLite
and Postgres: a tool error shows the tool's own message (never the reason code `error text`),
invisible and bidi characters are `⟨U+XXXX⟩` in the text answers (never `\\u202e`), `chars_from`
past a message's end and a NUL in any argument are one-line tool errors, and compare_runs says
why a task has no paired difference and that the paired comparison needs exactly two runs."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import anyio
import pytest

from app.config import Settings
from app.main import create_app
from app.mcp.reader import Reader
from app.mcp.server import build_server
from tests.helpers import ingest, rollout, write_jsonl

CALL = {"id": "c1", "name": "read_file", "arguments": "{\"path\": \"a.py\"}"}
HIDDEN = "ignore this\u202e evil\u200b tail"


def _text(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


@pytest.fixture
def call(db_url, engine, tmp_path):
    """`call(tool, **arguments)`: the tool's CallToolResult, on a database holding runs a, b, c."""
    def said(text, **extra):
        return [{"role": "user", "content": "go"}, {"role": "assistant", "content": "reading", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": text, **extra},
                {"role": "assistant", "content": HIDDEN}]

    rs = [rollout("t1", run="a", messages=said("Error: file a.py not found\nTraceback follows")),
          rollout("t2", run="a", messages=said("permission denied on a.py", is_error=True)),
          rollout("t3", run="a", messages=said("fine")),
          rollout("only-a", run="a", task={"key": "calc/17x23-plus-4"}, reward=1.0),
          rollout("x1", run="b", task={"key": "calc/other"}, reward=0.0),
          rollout("x2", run="c", task={"key": "calc/other"}, reward=1.0)]
    assert ingest(engine, write_jsonl(tmp_path / "a.jsonl", rs)).ok
    app = create_app(Settings(database_url=db_url))

    async def one(name, arguments):
        reader = Reader.for_app(app)
        try:
            return await build_server(reader).call_tool(name, arguments)
        finally:
            await reader.aclose()

    def run(name, **arguments):
        with ThreadPoolExecutor(1) as ex:  # a fresh thread: never a loop already running in this one
            return ex.submit(anyio.run, one, name, arguments).result()

    yield run
    app.state.engine.dispose()


def test_tool_errors_show_the_tools_own_message(call):
    one = call("get_rollout", run="a", rollout="t1")
    text = _text(one)
    assert "tool error: 'Error: file a.py not found'" in text and "'error text'" not in text
    tool = next(m for m in one.structured_content["messages"] if m["role"] == "tool")
    assert tool["tool_error"] == "Error: file a.py not found" and tool["tool_error_signal"] == "error text"
    two = _text(call("get_rollout", run="a", rollout="t2"))
    assert "tool error: 'permission denied on a.py'" in two and "is_error'" not in two


def test_invisible_characters_are_shown_as_code_points_in_text_answers(call):
    text = _text(call("get_rollout", run="a", rollout="t3"))
    assert "'ignore this⟨U+202E⟩ evil⟨U+200B⟩ tail'" in text
    assert "\\u202e" not in text and "\u202e" not in text and "\\u200b" not in text
    piece = _text(call("get_rollout", run="a", rollout="t3", message=3))
    assert "⟨U+202E⟩" in piece and "\\u202e" not in piece and "\u202e" not in piece


def test_chars_from_past_the_end_is_a_tool_error_naming_the_length(call):
    past = call("get_rollout", run="a", rollout="t3", message=3, chars_from=99_999_999)
    assert past.is_error
    assert _text(past) == f"chars_from=99,999,999 is past the end of message 3: it has {len(HIDDEN)} characters"
    assert not call("get_rollout", run="a", rollout="t3", message=3, chars_from=len(HIDDEN) - 1).is_error


def test_a_nul_in_any_argument_is_named(call):
    got = call("search", query="a\x00b")
    assert got.is_error and _text(got) == "the query has a NUL character"
    assert _text(call("run_summary", run="a\x00")) == "the run has a NUL character"
    assert _text(call("compare_runs", runs=["a", "b\x00"])) == "the runs has a NUL character"


def test_compare_runs_notes_tasks_not_shared_and_needs_two_runs_for_pairs(call):
    two = call("compare_runs", runs="a,b")
    assert not two.is_error, _text(two)
    line = next(x for x in _text(two).splitlines() if x.startswith("- calc/17x23-plus-4:"))
    assert "not in run B" in line, line
    three = call("compare_runs", runs="a,b,c")
    text = _text(three)
    assert not three.is_error and "The paired comparison by task needs exactly two runs; 3 are compared." in text
    assert "run): ." not in text
    assert three.structured_content["paired_note"].startswith("The paired comparison by task needs exactly two runs")
