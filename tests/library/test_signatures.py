"""ingest/signatures.py without a database: what is mined from a rollout, the masks, the failed
rule, the cap, restoring a miner from stored templates, and `new_at_step`."""
from __future__ import annotations

import pytest

from ingest.signatures import (
    OTHER,
    Miner,
    clean,
    failed,
    has_literal,
    is_parameter,
    new_at_step,
    signature_texts,
)
from tests.helpers import rollout

TOOL_CALL = {"role": "assistant", "content": "let me look",
             "tool_calls": [{"id": "c1", "name": "read_file", "arguments": "{\"path\": \"a.py\"}"}]}


def test_masks_make_parameters_of_numbers_paths_files_ids_uuids_hex_and_strings():
    m = Miner()
    text = clean("FileNotFoundError: [Errno 2] no file '/tmp/x/y.py' in /srv/job/7/run at cleanup.py line 12, "
                 "request req_8f3a2c9 trace 123e4567-e89b-12d3-a456-426614174000 at 0xdeadbeef from 10.0.0.1:8080")
    assert m.mask(text) == ("FileNotFoundError: [Errno <NUM>] no file <STR> in <PATH> at <FILE> line <NUM>, "
                            "request <ID> trace <UUID> at <HEX> from <IP>")
    assert all(is_parameter(t) for t in ("<NUM>", "<PATH>", "<*>")) and not is_parameter("Errno")


def test_messages_differing_in_parameters_share_one_template_and_its_number():
    m = Miner()
    a = m.mine(clean("SandboxCrash: sandbox exited with code 137 (host lost) while running run_tests"))
    b = m.mine(clean("SandboxCrash: sandbox exited with code 1 (host lost) while running read_file"))
    c = m.mine(clean("ToolServerError: tool server returned 503 Service Unavailable for edit_file"))
    assert a.new and not b.new and b.changed and a.number == b.number != c.number
    assert b.template == "SandboxCrash: sandbox exited with code <NUM> (host lost) while running <*>"
    # restored from what the store keeps (number, template), the same text finds the same number
    again = Miner([(b.number, b.template), (c.number, c.template)])
    d = again.mine(clean("SandboxCrash: sandbox exited with code 9 (host lost) while running calc"))
    assert (d.number, d.new, d.changed) == (b.number, False, False)
    assert again.mine(clean("something else entirely happened here")).number == max(b.number, c.number) + 1


def test_the_cap_sends_what_fits_no_template_to_other():
    m = Miner(cap=2)
    first = m.mine("alpha failed with code 1")
    m.mine("beta broke in a very different way")
    assert len(m) == 2
    assert m.mine("alpha failed with code 7").number == first.number  # fits exactly: still counted
    assert m.mine("gamma is new and there is no room").number == OTHER
    assert len(m) == 2  # bounded


@pytest.mark.parametrize("text", ["", "\x00\x00", "\x01\x02\x03 \x7f", "\udc80\udcff binary",
                                  "<script>x</script>" * 5000,
                                  "a" * 3_000_000, "‮evil‬ \u200b", "x " * 100_000])
def test_any_text_is_mined_or_skipped_never_raises(text):
    m = Miner()
    got = m.mine(clean(text))
    assert got is None or (got.template and "\x00" not in got.template and len(got.template.split()) <= 40)


def test_failed_rollouts_and_what_is_mined_from_them():
    ok = rollout("ok", reward=1.0)
    zero = rollout("zero", reward=0.0, messages=[{"role": "user", "content": "2+2?"},
                                                {"role": "assistant", "content": "It comes to 5."}])
    trunc = rollout("t", reward=1.0, ending="truncated")
    err = rollout("e", reward=None, ending="error", messages=[{"role": "user", "content": "go"}, TOOL_CALL],
                  errors=[{"type": "SandboxCrash", "message": "sandbox exited with code 137"}])
    unscored = rollout("u", reward=None)
    assert [failed(r) for r in (ok, zero, trunc, err, unscored)] == [False, True, True, True, False]
    assert signature_texts(ok) == []
    assert signature_texts(zero) == [("final_message", "It comes to 5.")]
    # an infrastructure error is its own explanation: no final message mined
    assert signature_texts(err) == [("error", "SandboxCrash: sandbox exited with code 137")]


def test_tool_errors_are_mined_by_the_tool_error_rule():
    r = rollout("tool", reward=1.0, messages=[
        {"role": "user", "content": "read it"}, TOOL_CALL,
        {"role": "tool", "tool_call_id": "c1", "content": "Error: file a.py not found"},
        {"role": "assistant", "content": "done"}])
    assert signature_texts(r) == [("tool_error", "Error: file a.py not found")]


def test_new_at_step_is_where_a_signature_arrives_or_surges():
    steps = list(range(30))
    crash = {1: 1, 3: 3, 4: 2, 5: 2, 8: 2, 14: 3, 17: 2, 18: 20, 19: 11}
    assert new_at_step(steps, crash) == 18
    assert new_at_step(steps, {12: 6, 13: 7}) == 12  # never seen before, then 6
    assert new_at_step(steps, {0: 9, 1: 9, 2: 9}) is None  # there from the first step, steady
    assert new_at_step(steps, {4: 4}) is None  # too few to say
    # no history to be new against: 1 at step 0, then 5 at step 1 ("Try another edit.")
    assert new_at_step(steps, {0: 1, 1: 5, 2: 5}) is None
    assert new_at_step(steps, {1: 6, 2: 6}) is None and new_at_step(steps, {3: 6}) == 3  # MIN_HISTORY
    assert new_at_step([], {}) is None


@pytest.mark.parametrize("text, template", [
    # a fenced code answer (NeMo Gym's coding tasks) is its code, not three quoted strings
    ("```cpp #include <iostream> int main() { int n = 0; return 0; } ```",
     "```cpp #include <iostream> int main() { int n = <NUM>; return <NUM>; } ```"),
    ("```python print(1) ``` and `x` inline", "```python print(<NUM>) ``` and <STR> inline"),
    # apostrophes are no quotes
    ("I don't know, it's 'x' here", "I don't know, it's <STR> here"),
    # a text that would be masks alone keeps its literal text, numbers masked
    ('"It comes to 5."', '"It comes to <NUM>."'),
    ("'/srv/job/7/run'", "'/srv/job/<NUM>/run'"),
    ("`rm -rf /tmp/x/y`", "`rm -rf <PATH>`"),
    ("42", "<NUM>"),  # nothing literal to keep
])
def test_masks_keep_structure_and_a_template_keeps_a_literal_word(text, template):
    assert Miner().mask(clean(text)) == template


def test_real_nemo_gym_code_answers_have_readable_templates():
    from tests.conftest import data_path
    from tests.helpers import read_folder

    m = Miner()
    templates = {m.mine(t).template for _, _, r in read_folder(data_path("realdata", "nemo-gym"))
                 for _, t in signature_texts(r)}
    assert templates and all(has_literal(t) for t in templates), templates
    assert any(t.startswith("```cpp #include <iostream>") for t in templates), templates
