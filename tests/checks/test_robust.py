"""Bad input never costs a rollout or a page (issue 20, "Bad input"): every check runs on every
fixture and every handed case without an internal error, and a check that does crash is caught,
logged with the rollout, and reported as "could not decide (internal error)"."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ingest.checks import EMPTY, REGISTRY, groups_from_rollouts, run_group_checks, run_rollout_checks
from ingest.checks.context import load_context
from ingest.checks.registry import INTERNAL_ERROR, check
from tests.conftest import FIXTURES
from tests.helpers import ingest, read_folder, rollout, write_jsonl

CONTEXTS = {"none": EMPTY, "tiny-qwen3": load_context(FIXTURES / "tokenizers" / "tiny-qwen3"),
            "tok-llama3ish": load_context(FIXTURES / "cases" / "tok-llama3ish")}


def every_fixture_rollout():
    """Every rollout every reader makes of every fixture file (real data, upstream files, cases)."""
    for folder in (FIXTURES / "realdata", FIXTURES / "upstream", FIXTURES / "cases"):
        for path, _, r in read_folder(folder):
            yield path, r


@pytest.mark.parametrize("ctx", CONTEXTS, ids=str)
def test_every_check_decides_on_every_fixture_and_case_without_an_internal_error(ctx):
    seen, kinds, read = 0, set(), {}
    for path, r in every_fixture_rollout():
        res = run_rollout_checks(r, CONTEXTS[ctx])
        crashed = [(s.kind, s.message) for s in res.skipped if s.message.startswith(INTERNAL_ERROR)]
        assert not crashed, (path.name, r.id, crashed)
        kinds |= set(res.kinds())
        read[(path.parent, r.run.id, r.id, r.attempt)] = r
        seen += 1
    for (run, gid), g in groups_from_rollouts(read.values()).items():  # the groups as the store builds them
        gres = run_group_checks(g, CONTEXTS[ctx])
        assert not [s for s in gres.skipped if s.message.startswith(INTERNAL_ERROR)], (run, gid)
    assert seen > 100 and kinds  # the fixtures were read, and some checks fired on them


@pytest.fixture
def crashing_check():
    @check("zz_crashes", "warning")
    def zz_crashes(r, ctx):
        """Raises on purpose (a check with a bug)."""
        if r.id == "boom":
            raise KeyError("node 99")
        return iter(())
    yield
    del REGISTRY["zz_crashes"]


def test_a_check_that_crashes_is_caught_logged_and_reported(crashing_check, caplog):
    with caplog.at_level(logging.ERROR, logger="rollscope.checks"):
        res = run_rollout_checks(rollout("boom", run="r9"))
    (s,) = [s for s in res.skipped if s.kind == "zz_crashes"]
    assert s.message.startswith(INTERNAL_ERROR) and "KeyError" in s.message and "node 99" in s.message
    assert s.detail["subject"].startswith("rollout r9/boom#0")
    assert "zz_crashes" in caplog.text and "r9/boom" in caplog.text
    assert {f.kind for f in res.findings} == set()  # the other checks still ran: none fires on this rollout
    assert len(res.skipped) >= 1


def test_a_crashing_check_costs_neither_the_rollout_nor_its_page(crashing_check, client, engine, tmp_path: Path):
    path = write_jsonl(tmp_path / "x.jsonl", [rollout("boom", run="crash"), rollout("fine", run="crash")])
    report = ingest(engine, path)
    assert report.total.inserted == 2 and report.ok
    d = client.get("/runs/crash/rollouts/boom.json").json()
    skipped = {s["kind"]: s for s in d["checks_skipped"]}
    assert skipped["zz_crashes"]["reason"].startswith(INTERNAL_ERROR)
    page = client.get("/runs/crash/rollouts/boom")
    assert page.status_code == 200 and "internal error" in page.text
    assert client.get("/runs/crash").status_code == 200
