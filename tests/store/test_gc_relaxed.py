"""The collector is relaxed while rollouts are stored, and given back as it was after."""
from __future__ import annotations

import gc

from app.store import gc_relaxed, write
from tests.helpers import ingest, rollout, write_jsonl


def test_store_relaxes_the_collector_and_restores_it(engine, tmp_path, monkeypatch):
    seen = []
    real = write.prepare_or_error

    def spy(*args, **kw):
        seen.append(gc.get_threshold()[0])
        return real(*args, **kw)

    monkeypatch.setattr(write, "prepare_or_error", spy)
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        report = ingest(engine, write_jsonl(tmp_path / "a.jsonl", [rollout("a1"), rollout("a2")]))
        assert report.total.inserted == 2 and seen == [gc_relaxed.YOUNG] * 2
        assert gc.get_threshold() == (700, 10, 10)
        gc.disable()  # collection off stays off, untouched
        with gc_relaxed.relaxed_gc():
            assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.enable()
        gc.set_threshold(*before)
