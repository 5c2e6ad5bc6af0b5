"""A tool result that failed, by each harness's own signal (ingest/metrics.py `tool_result_failed`)."""
from __future__ import annotations

import pytest

from ingest.metrics import tool_errors, tool_result_failed
from ingest.schema import Message, Node, Rollout, RunRef


@pytest.mark.parametrize("text,failed", [
    ("Error: division by zero", True),      # the OpenAI / Anthropic tool-result habit
    ("error: 'path' is required", True),    # verifiers v1 harness tools (harnesses/utils/core.py)
    ("ERROR boom", True),
    ("  error: leading space", True),
    ("errors found: 0", False),             # a word that merely begins with "error"
    ("Errorless run", False),
    ("no error here", False),
    ("42", False),
])
def test_text_that_opens_with_the_word_error(text, failed):
    assert tool_result_failed(Message(role="tool", content=text)) is failed


@pytest.mark.parametrize("extra", [{"is_error": True}, {"error": {"message": "timeout"}}, {"observation": "error"}])
def test_recorded_failure_signals(extra):
    assert tool_result_failed(Message(role="tool", content="", extra=extra))


def test_counted_per_rollout():
    nodes = [Node(message=Message(role="user", content="go")),
             Node(parent=0, message=Message(role="tool", content="error: x not found")),
             Node(parent=1, message=Message(role="tool", content="ok")),
             Node(parent=2, message=Message(role="tool", content="Error: boom"))]
    assert tool_errors(Rollout(id="r", run=RunRef(id="run"), nodes=nodes)) == 2
