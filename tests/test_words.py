"""ingest.words.plural: the one counted-noun helper of finding messages, pages and MCP answers."""
from app.mcp.answers import plural as answer_plural
from app.render import templates
from ingest.words import plural


def test_plural_forms():
    assert plural(1, "turn") == "1 turn"
    assert plural(0, "turn") == "0 turns"
    assert plural(None, "hit") == "0 hits"
    assert plural(3, "branch", "branches") == "3 branches"
    assert plural(1234, "token") == "1234 tokens"  # finding messages: frozen by tests/checks/sameness.json
    assert plural(1920, "rollout", thousands=True) == "1,920 rollouts"


def test_pages_and_answers_use_it():
    assert answer_plural(1920, "rollout") == "1,920 rollouts"
    assert templates.env.filters["plural"] is plural
