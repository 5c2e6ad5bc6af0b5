"""The fault × format matrix (issue 20; tests/checks/matrix): every check kind, in every format.

A cell is `fires` when the format holds every field the fault needs: the fault written in that
format's own shape is read back by the real reader and the check reports it on the right rollout,
message and position, and the clean twin gets no finding at all. Otherwise the cell is
`cannot (field)`: the written fault must not be reported as anything it is not (no finding of the
kind; the check may say it could not decide). docs/checks.md carries the table, generated from
these declarations (`python -m tests.checks.matrix.table --write`); a test fails when it drifts."""
from __future__ import annotations

import pytest

from ingest.checks import REGISTRY
from tests.checks.matrix import table
from tests.checks.matrix.episode import LLAMA, QWEN, clean_group
from tests.checks.matrix.faults import BY_KIND, FAULTS, injected
from tests.checks.matrix.formats import available, cannot
from tests.checks.matrix.harness import node_of, run

WRITERS = available()
KINDS = [f for f in FAULTS if f.kind in REGISTRY]


@pytest.mark.parametrize("fmt", WRITERS)
@pytest.mark.parametrize("tok", [QWEN, LLAMA], ids=lambda t: t.name)
def test_the_clean_group_gets_no_finding(fmt, tok, tmp_path):
    out = run(WRITERS[fmt], clean_group(tok), tmp_path, tok.ctx)
    assert out.formats == {WRITERS[fmt].NAME}, out.formats  # the reader's NAME (tau-bench, swe-agent, ...)
    assert not out.errors, out.errors
    assert set(out.rollouts) == {"ep-right", "ep-wrong"}
    assert {ep: [(f.kind, f.message) for f in fs] for ep, fs in out.findings.items() if fs} == {}


@pytest.mark.parametrize("fmt", WRITERS)
@pytest.mark.parametrize("kind", [f.kind for f in KINDS])
def test_cell(kind, fmt, tmp_path):
    f = BY_KIND[kind]
    module = WRITERS[fmt]
    out = run(module, injected(f), tmp_path, f.tok.ctx)
    hits = out.of(f.ep, kind)
    missing = cannot(module, f)
    if missing:
        assert not hits, f"{fmt} cannot carry {sorted(missing)}, yet {kind} fired: {hits[0].message}"
        return
    assert hits, (f"{kind} did not fire in {fmt}; skipped: {out.skip_reason(f.ep, kind)}; "
                  f"fired: {sorted({x.kind for x in out.findings.get(f.ep, [])})}")
    r = out.rollouts[f.ep]
    if f.turn is not None:
        ep = injected(f)[0 if f.ep == "ep-right" else 1]
        want = node_of(r, ep, f.turn)
        assert any(h.node_idx == want for h in hits), ([h.node_idx for h in hits], want)
        if f.position is not None:
            at = f.position  # a call index for kinds `at="call"`, else a token index in the node
            if REGISTRY[kind].at == "token":
                at += completion_offset(r.nodes[want].token_ids, ep.turns[f.turn].request)
            assert any(h.position == at for h in hits if h.node_idx == want), \
                ([(h.node_idx, h.position) for h in hits], at)


def completion_offset(ids: list[int], req) -> int:
    """Where the request's completion starts in its node: a format may store the generation
    prompt the server added (`<|im_start|>assistant\n`) on the assistant node (verifiers), and
    positions count from the node's first token."""
    if req is None or not req.completion_ids:
        return 0
    n = len(req.completion_ids)
    return next((k for k in range(len(ids) - n + 1) if ids[k:k + n] == req.completion_ids), 0)


def test_every_registered_kind_has_a_fault():
    assert sorted(set(REGISTRY) - set(BY_KIND)) == []


def test_the_docs_table_is_generated_from_the_matrix():
    assert table.in_docs() == table.render(), "run: python -m tests.checks.matrix.table --write"
