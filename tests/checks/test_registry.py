"""The checks registry: declared kinds, static names, documented, and what the runner does with
hits and skips."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.queries import findings as q_findings
from ingest import checks, stats
from ingest.checks.registry import REGISTRY, check
from tests.helpers import rollout

DOCS = Path(__file__).resolve().parents[2] / "docs" / "checks.md"


def documented_rows() -> dict[str, list[str]]:
    """kind → [scope, severity, ...] from the table rows of docs/checks.md."""
    out = {}
    for line in DOCS.read_text().splitlines():
        m = re.match(r"\|\s*`([a-z0-9_]+)`\s*\|(.*)", line)
        if m:
            out[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return out


def test_every_registered_kind_is_documented_with_its_scope_and_severity():
    rows = documented_rows()
    missing = [k for k in checks.kinds() if k not in rows]
    assert not missing, f"docs/checks.md lacks a row for {missing}"
    for kind, c in REGISTRY.items():
        scope, severity, rule, why, source = rows[kind][:5]
        assert (scope, severity) == (c.scope, c.severity), kind
        assert rule and why and source, f"docs/checks.md: {kind} needs a rule, why it matters and a source"
        assert c.doc, f"{kind}: the check function needs a docstring (its rule)"


def test_documented_kinds_are_registered():
    assert sorted(set(documented_rows()) - set(checks.kinds())) == []


def test_the_app_offers_exactly_the_registered_kinds():
    assert q_findings.FINDING_KINDS == checks.kinds()
    assert stats.ENDINGS == ["submitted", "task_detected", "truncated", "length_cut", "error", "unknown"]


def test_kinds_are_declared_once_with_known_severity_and_scope():
    with pytest.raises(ValueError, match="registered twice"):
        check("token_drift", "warning")(lambda r, ctx: [])
    with pytest.raises(ValueError, match="severity"):
        check("x_kind", "fatal")
    with pytest.raises(ValueError, match="scope"):
        check("x_kind", "error", scope="run")
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", k) for k in checks.kinds())
    # one kind for every per-token array: the array is in the detail
    assert not [k for k in checks.kinds() if k.endswith("_len_mismatch") and k != "array_len_mismatch"]


def test_the_runner_stamps_declared_kind_and_records_skips():
    @check("test_only_hit", "info", label="test only")
    def hit(r, ctx):
        """Fires on every rollout."""
        yield checks.Hit("fired", node=1, position=2, detail={"a": 1})

    @check("test_only_skip", "error")
    def skip(r, ctx):
        """Cannot decide."""
        raise checks.Skip("no tokenizer stored for this run")

    try:
        res = checks.run_rollout_checks(rollout("a"))
        (f,) = [f for f in res.findings if f.kind == "test_only_hit"]
        assert (f.severity, f.node_idx, f.position, f.detail, f.message) == ("info", 1, 2, {"a": 1}, "fired")
        (s,) = [s for s in res.skipped if s.kind == "test_only_skip"]
        assert s.severity == "skipped" and s.message == "no tokenizer stored for this run"
        assert "test_only_skip" not in res.kinds() and "test_only_hit" in res.kinds()
        assert checks.label("test_only_hit") == "test only"
    finally:
        REGISTRY.pop("test_only_hit")
        REGISTRY.pop("test_only_skip")


def test_legacy_len_mismatch_kinds_read_as_array_len_mismatch():
    assert checks.legacy_kind("logprob_len_mismatch") == "array_len_mismatch"
    assert checks.legacy_kind("mask_len_mismatch") == "array_len_mismatch"
    assert checks.legacy_kind("token_drift") == "token_drift"
