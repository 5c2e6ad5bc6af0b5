"""The checks report exactly what they reported before they ran on numpy arrays (issue 25): the
findings of every input of tests/checks/sameness.py match the frozen digests."""
from __future__ import annotations

import json

from tests.checks.sameness import FROZEN, collect


def test_every_input_gets_the_frozen_findings():
    frozen = json.loads(FROZEN.read_text(encoding="utf-8"))
    got = collect()
    assert sorted(got) == sorted(frozen), "the inputs changed: python -m tests.checks.sameness --write"
    differ = {k: (frozen[k], got[k]) for k in got if got[k] != frozen[k]}
    assert not differ, f"{len(differ)} inputs get other findings (see --dump): {differ}"
