"""Ingest stores exactly the rows it stored before the rows and write stages were made faster
(issue 25): every table's rows after a fixed series of ingests (tests/store/stored_rows.py: the
bench workload in small batches, an unchanged re-ingest, replacements, the demo run, images, every
real file and handed case) digest as frozen in tests/store/stored_rows.json, on SQLite and on
Postgres, the FTS5 index's answers included."""
from __future__ import annotations

import json

import pytest

from tests.store import stored_rows


@pytest.fixture
def url_for():
    yield stored_rows.database_url
    stored_rows.drop_made()


@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
@pytest.mark.filterwarnings("ignore:Skipped unsupported reflection")
def test_rows_stored_are_the_frozen_ones(dialect, url_for):
    frozen = json.loads(stored_rows.FROZEN.read_text())[dialect]
    got = stored_rows.digests(stored_rows.stored(url_for, dialect))
    differ = {t: (frozen.get(t), got.get(t)) for t in sorted(set(frozen) | set(got)) if frozen.get(t) != got.get(t)}
    assert not differ, f"tables whose rows changed (frozen, now): {differ}"
