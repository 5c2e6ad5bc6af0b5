"""A notebook that reads files with `ingest` alone (no database, no `app`) gets the endings and
findings the dashboard shows for the same files: a reader's output is final (its ending
normalised by ingest/endings.py `normalise`), and the checks run through ingest's registry.

The dashboard side is the real store writing a real SQLite file (`ingest_paths`); the two are
compared rollout by rollout, and group by group, over every real file in tests/fixtures/realdata
and one real verifiers file whose harness cap makes its "agent_completed" a silent truncation.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import sqlalchemy as sa

from app.db import models
from app.db.engine import make_engine
from app.db.migrate import upgrade
from ingest.checks import groups_from_rollouts, run_group_checks, run_rollout_checks
from ingest.schema import Rollout
from tests.conftest import FIXTURES
from tests.helpers import ingest, read_folder

REALDATA = FIXTURES / "realdata"
VERIFIERS = REALDATA / "verifiers" / "train_multi_tool.jsonl"


def read_like_a_notebook(folder: Path) -> dict[tuple, Rollout]:
    """Every rollout under `folder` by (run, id, attempt), read with `ingest` only; of two
    records with one identity the later file's is kept, as the store keeps it."""
    out: dict[tuple, Rollout] = {}
    for _, _, item in read_folder(folder):
        out[(item.run.id, item.id, item.attempt)] = item
    return out


def findings_of(results) -> list[tuple]:
    return [(f.kind, f.severity, f.node_idx, f.position, f.message) for f in results.all]


def groups_of(rollouts: dict[tuple, Rollout]) -> dict[tuple[str, str], list]:
    """Group findings computed from the notebook's rollouts: `ingest.checks.groups_from_rollouts`
    builds the groups as the store's group pass does (members, estimator, step, prompt key and the
    sibling groups of each step that `split_group` reads)."""
    return {key: findings_of(run_group_checks(g)) for key, g in groups_from_rollouts(rollouts.values()).items()}


def dashboard(engine) -> tuple[dict[tuple, dict], dict[tuple[str, str], list]]:
    """What the store wrote: each rollout's ending, flags and findings, and each group's findings."""
    R, F = models.Rollout.__table__, models.Finding.__table__
    with engine.connect() as conn:
        rows = conn.execute(sa.select(R.c.pk, R.c.run_id, R.c.rollout_id, R.c.attempt, R.c.ending, R.c.ending_detail,
                                      R.c.flags)).all()
        found = conn.execute(sa.select(F.c.rollout_pk, F.c.run_id, F.c.group_id, F.c.kind, F.c.severity, F.c.node_idx,
                                       F.c.position, F.c.message).order_by(F.c.pk)).all()
    by_pk: dict[int, list] = defaultdict(list)
    by_group: dict[tuple[str, str], list] = defaultdict(list)
    for f in found:
        row = (f.kind, f.severity, f.node_idx, f.position, f.message)
        (by_pk[f.rollout_pk] if f.rollout_pk is not None else by_group[(f.run_id, f.group_id)]).append(row)
    rollouts = {(r.run_id, r.rollout_id, r.attempt): {"ending": r.ending, "detail": r.ending_detail,
                                                       "flags": sorted(r.flags), "findings": by_pk[r.pk]}
                for r in rows}
    return rollouts, dict(by_group)


def notebook(rollouts: dict[tuple, Rollout]) -> dict[tuple, dict]:
    out = {}
    for key, r in rollouts.items():
        checked = run_rollout_checks(r)
        out[key] = {"ending": r.ending.type.value, "detail": r.ending.detail, "flags": checked.kinds(),
                    "findings": findings_of(checked)}
    return out


def same_as_the_dashboard(folder: Path, db: Path) -> tuple[dict[tuple, Rollout], dict[tuple, dict]]:
    """Ingest `folder` with the real store into the SQLite file `db`, read it again with `ingest`
    alone, and assert both give the same endings and findings, rollout by rollout and group by
    group. Returns what the notebook read and what the dashboard shows."""
    engine = make_engine(f"sqlite:///{db}", writer=True)
    upgrade(engine)
    try:
        report = ingest(engine, folder)
        assert report.total.inserted > 0
        shown, shown_groups = dashboard(engine)
    finally:
        engine.dispose()
    read = read_like_a_notebook(folder)
    mine = notebook(read)
    assert mine.keys() == shown.keys()
    for key in shown:
        assert mine[key] == shown[key], key
    assert {k: v for k, v in groups_of(read).items() if v} == shown_groups
    return read, shown


def test_every_real_file_gives_the_dashboards_endings_and_findings(tmp_path):
    read, shown = same_as_the_dashboard(REALDATA, tmp_path / "dashboard.db")
    assert len(read) > 50 and any(v["findings"] for v in shown.values())


def test_a_silent_truncation_is_corrected_by_the_library(tmp_path):
    silent = tmp_path / "silent"
    silent.mkdir()
    # the real file, its harness's output cap lowered to the 32 tokens its last generation used:
    # the source still says agent_completed, its own evidence says the answer was cut off
    text = VERIFIERS.read_text()
    assert text.count('"max_output_tokens": 256') == 1
    (silent / VERIFIERS.name).write_text(text.replace('"max_output_tokens": 256', '"max_output_tokens": 32'))
    read, shown = same_as_the_dashboard(silent, tmp_path / "dashboard.db")
    ((key, cut),) = read.items()
    assert cut.ending.type.value == "length_cut" and cut.ending.detail == "agent_completed"
    assert cut.ending.extra["silent_truncation"]["claimed"] == "submitted"
    assert shown[key]["ending"] == "length_cut" and "silent_truncation" in shown[key]["flags"]
