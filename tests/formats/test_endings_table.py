"""The one endings table (ingest/endings.py `WORDS`) against the domain's list of how the common
source reasons read (docs/formats.md, "Endings"): who or what ended the episode decides."""
from __future__ import annotations

import pytest

from ingest import endings
from ingest.schema import Ending

DOMAIN = {
    # the agent ended it with an answer: verifiers, tau2, SWE-agent, OpenHands
    "agent_completed": Ending.submitted, "agent_stop": Ending.submitted, "submitted": Ending.submitted,
    "finish": Ending.submitted,
    # the environment or a simulated user ended it: tau2, gym, rLLM
    "user_stop": Ending.task_detected, "terminated": Ending.task_detected, "env_done": Ending.task_detected,
    # a budget ran out: turns, steps, gym truncated, Inspect limits
    "max_turns": Ending.truncated, "max_steps": Ending.truncated, "truncated": Ending.truncated,
    "message_limit": Ending.truncated, "token_limit": Ending.truncated, "time_limit": Ending.truncated,
    # one generation hit its token limit
    "length": Ending.length_cut, "max_output_tokens": Ending.length_cut,
    # infrastructure failed
    "abort": Ending.error, "aborted": Ending.error, "failed": Ending.error, "too_many_errors": Ending.error,
    "agent_error": Ending.error, "user_error": Ending.error,
}


@pytest.mark.parametrize("word,ending", sorted(DOMAIN.items()))
def test_the_table_reads_the_domains_words(word, ending):
    assert endings.from_reason(word) == ending
    assert endings.from_reason(word.upper()) == ending  # lower-cased


def test_first_known_a_word_not_in_the_table_never_hides_a_later_known_one():
    assert endings.first_known([("a", "weird"), ("b", "user_stop")]) == (Ending.task_detected, "b")
    assert endings.first_known([("a", "weird"), ("b", None), ("c", "")]) == (Ending.unknown, "a")
    assert endings.first_known([("a", None)]) == (Ending.unknown, None)
    assert endings.first_known([(None, "max_steps"), ("b", "agent_stop")]) == (Ending.truncated, "max_steps")


def test_derive_reads_stop_condition_through_the_table():
    from ingest.schema import Rollout, RunRef

    r = Rollout(id="r", run=RunRef(id="x"), stop_condition="Max_Turns")
    assert endings.derive(r).type == Ending.truncated and r.ending.detail == "Max_Turns"
