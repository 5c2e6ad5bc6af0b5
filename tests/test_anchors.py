"""Every validating regular expression of app/ and ingest/ that is anchored at the end refuses a
trailing newline: Python's `$` matches before a final "\\n", so they end in `\\Z` or are used
with `fullmatch` (a label "a\\n" was stored once)."""
from __future__ import annotations

import pytest

from app.api.v1.labels import LABEL
from app.worker.claims import session_key
from ingest.formats._openai import _HEX_ESCAPES
from ingest.formats.swe_agent import _AUTO
from ingest.formats.tunix import _NP_ARRAY
from ingest.formats.verifiers import STEP_DIR
from ingest.formats.verl import _UID
from ingest.tokenizer import _BYTE_PIECE


@pytest.mark.parametrize(("pattern", "good"), [
    (_BYTE_PIECE, "<0x0A>"), (_UID, "prompt_3_1"), (_AUTO, "submitted (exit_cost)"),
    (_HEX_ESCAPES, "bytes:\\xe2\\x80"), (STEP_DIR, "step_12"),
])
def test_an_anchored_pattern_refuses_a_trailing_newline(pattern, good):
    assert pattern.match(good)
    assert pattern.match(good + "\n") is None


def test_a_label_and_a_session_key_refuse_a_trailing_newline():
    assert LABEL.fullmatch("reviewed") and LABEL.fullmatch("reviewed\n") is None
    assert session_key("host:1:s42") == 42 and session_key("host:1:s42\n") is None


def test_a_numpy_array_repr_still_takes_trailing_space():
    assert _NP_ARRAY.match("array([1, 2])\n")  # `\s*` before the end, as before
