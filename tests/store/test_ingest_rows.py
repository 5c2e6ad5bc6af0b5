"""The ingest summary's rows and the run's type do not depend on how files are batched or ordered
(app/worker/sync.py `_credit`, app/store/write.py `_ensure_runs`), on the real verifiers files."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from app.cli import app as cli
from app.db import models
from app.db.engine import make_engine
from app.worker.sync import ingest_paths
from ingest.formats.base import ReadContext
from tests.conftest import FIXTURES

VF = FIXTURES / "realdata" / "verifiers"
# the same four trace ids with other content (advantages filled in), and an unrelated file
PLAIN, WITH_ADV = VF / "train_group.jsonl", VF / "train_group_with_advantages.jsonl"
OTHER = VF / "train_max_turns.jsonl"


@pytest.fixture
def fresh(tmp_path, _sqlite_template):
    """fresh(name): a writer engine on a new SQLite file `name`.db at the latest schema (a copy of
    the migrated template)."""
    def make(name: str):
        shutil.copyfile(_sqlite_template, tmp_path / f"{name}.db")
        return make_engine(f"sqlite:///{tmp_path / name}.db", writer=True)
    return make


def rows(report) -> dict[str, tuple]:
    return {Path(f.path).name: (f.result.inserted, f.result.replaced, f.result.unchanged, f.result.rejected,
                                f.result.findings) for f in report.files}


def test_each_row_counts_what_its_file_stored(fresh, tmp_path):
    """Three real files in one ingest, forced into one run: the later file's copies of four ids win
    (`decide`), so their counts are on its row, as if it alone had been ingested; the earlier row
    keeps nothing of them and says which file took them over."""
    files = [PLAIN, WITH_ADV, OTHER]
    together = ingest_paths(fresh("all"), files, ReadContext(run_id="R"))
    alone = {}
    for i, f in enumerate(files):
        alone.update(rows(ingest_paths(fresh(f"one{i}"), [f], ReadContext(run_id="R"))))
    got = rows(together)
    assert got[WITH_ADV.name] == alone[WITH_ADV.name] and alone[WITH_ADV.name][0] == 4
    assert got[OTHER.name] == alone[OTHER.name]
    assert got[PLAIN.name] == (0, 0, 0, 0, 0)
    first = next(f for f in together.files if Path(f.path).name == PLAIN.name)
    assert first.superseded == {str(WITH_ADV): 4} and WITH_ADV.name in first.notes()
    total = together.total
    assert (total.inserted, total.replaced, total.findings) == (
        sum(r[0] for r in got.values()), sum(r[1] for r in got.values()), sum(r[4] for r in got.values()))
    assert total.inserted == 5 and total.repeated == 4
    # the same ingest again: every row unchanged where its file's records are stored
    again = rows(ingest_paths(make_engine(f"sqlite:///{tmp_path / 'all'}.db", writer=True), files,
                              ReadContext(run_id="R")))
    assert again[WITH_ADV.name][:2] == (0, 0) and again[WITH_ADV.name][2] == 4


def test_a_stored_record_taken_over_is_replaced_on_the_later_row(fresh, tmp_path):
    """The earlier file was ingested before: its records read unchanged, then the later file of the
    same ingest replaces them; the counts are the later row's, as ingesting it next on its own gives."""
    eng = fresh("before")
    ingest_paths(eng, [PLAIN], ReadContext(run_id="R"))
    got = rows(ingest_paths(eng, [PLAIN, WITH_ADV], ReadContext(run_id="R")))
    seq = fresh("seq")
    ingest_paths(seq, [PLAIN], ReadContext(run_id="R"))
    assert got[WITH_ADV.name] == rows(ingest_paths(seq, [WITH_ADV], ReadContext(run_id="R")))[WITH_ADV.name]
    assert got[WITH_ADV.name][:3] == (0, 4, 0) and got[PLAIN.name] == (0, 0, 0, 0, 0)


def test_three_files_with_the_same_ids_count_once_and_again_count_nothing(fresh, tmp_path):
    """The real verifiers folder forced into one run: traces.jsonl and train_group.jsonl hold the
    same four ids with the same content, train_group_with_advantages.jsonl the same ids with
    other content. The first ingest counts four new (on the last file's row, whose copies are
    stored), not "4 new" twice plus "4 replaced"; the second counts nothing new or replaced, each
    earlier row saying which later file's copies are stored."""
    trace = VF / "run_dir" / "train_group" / "traces.jsonl"
    files = [trace, PLAIN, WITH_ADV]
    eng = fresh("three")
    first = ingest_paths(eng, files, ReadContext(run_id="R"))
    got = rows(first)
    assert got == {trace.name: (0, 0, 0, 0, 0), PLAIN.name: (0, 0, 0, 0, 0), WITH_ADV.name: (4, 0, 0, 0, 1)}
    assert (first.total.inserted, first.total.replaced, first.total.unchanged, first.total.repeated) == (4, 0, 0, 8)
    by_name = {Path(f.path).name: f for f in first.files}
    assert by_name[trace.name].superseded == {str(WITH_ADV): 4}
    plain = by_name[PLAIN.name]
    assert plain.same_as == {str(trace): 4} and "the same as an earlier file's" in plain.notes()
    second = ingest_paths(eng, files, ReadContext(run_id="R"))
    assert rows(second) == {trace.name: (0, 0, 0, 0, 0), PLAIN.name: (0, 0, 0, 0, 0), WITH_ADV.name: (0, 0, 4, 0, 0)}
    assert (second.total.inserted, second.total.replaced, second.total.unchanged) == (0, 0, 4)
    for name in (trace.name, PLAIN.name):
        f = next(f for f in second.files if Path(f.path).name == name)
        assert f.result.held == {str(WITH_ADV): 4} and f"stored from a later file: {WITH_ADV.name}" in f.notes()
    with eng.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(models.Rollout.__table__)).scalar_one() == 4


def _line(rid: str, content: str) -> str:
    import json

    from tests.helpers import rollout

    d = rollout(rid, run="o").to_json_dict()
    d["nodes"][0]["message"]["content"] = content
    return json.dumps(d)


def _counts(report) -> tuple:
    t = report.total
    return t.inserted, t.replaced, t.unchanged, t.repeated


def test_one_file_repeating_an_id_is_stored_once_and_never_rewritten(db_url, engine, tmp_path):
    """x, z, z (other content), z (the first content again): the last z is stored (the later
    record wins), counted once as new; every later ingest of the file writes nothing (it used to
    replace z twice each time, flipping it between the two contents); when the file changes so
    that z's last line no longer carries it, the z still in the file is stored."""
    from tests.helpers import ingest

    f = tmp_path / "dup.jsonl"
    f.write_text("\n".join([_line("x", "X"), _line("z", "C"), _line("z", "C2"), _line("y", "Y")]) + "\n")
    assert _counts(ingest(engine, f)) == (3, 0, 0, 1)
    for _ in range(2):
        assert _counts(ingest(engine, f)) == (0, 0, 3, 1)
    with engine.connect() as conn:
        rows = dict(conn.execute(sa.select(models.Rollout.rollout_id, models.Rollout.source_line)).all())
    assert rows == {"x": 1, "z": 3, "y": 4}
    f.write_text("\n".join([_line("x", "X"), _line("z", "D"), _line("y", "Y")]) + "\n")  # z's line 3 gone
    assert _counts(ingest(engine, f)) == (0, 1, 2, 0)
    with engine.connect() as conn:
        rows = dict(conn.execute(sa.select(models.Rollout.rollout_id, models.Rollout.source_line)).all())
    assert rows == {"x": 1, "z": 2, "y": 4}  # y is unchanged: its stored copy keeps its line
    f.write_text("\n".join([_line("z", "E"), _line("z", "E")]) + "\n")  # the same record twice
    assert _counts(ingest(engine, f)) == (0, 1, 0, 1)
    assert _counts(ingest(engine, f)) == (0, 0, 1, 1)


def test_three_files_one_id_credit_the_file_whose_copy_is_stored(fresh, tmp_path):
    """a: x=A and q; b: x=B; c: x=A. The stored x is c's; the second ingest says so (a's x is
    "stored from a later file", not unchanged on a's row)."""
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "a.jsonl").write_text(_line("x", "A") + "\n" + _line("q", "Q") + "\n")
    (folder / "b.jsonl").write_text(_line("x", "B") + "\n")
    (folder / "c.jsonl").write_text(_line("x", "A") + "\n")
    eng = fresh("f")
    first = ingest_paths(eng, [folder], ReadContext(run_id="o"))
    assert rows(first) == {"a.jsonl": (1, 0, 0, 0, 0), "b.jsonl": (0, 0, 0, 0, 0), "c.jsonl": (1, 0, 0, 0, 0)}
    second = ingest_paths(eng, [folder], ReadContext(run_id="o"))
    assert rows(second) == {"a.jsonl": (0, 0, 1, 0, 0), "b.jsonl": (0, 0, 0, 0, 0), "c.jsonl": (0, 0, 1, 0, 0)}
    by_name = {Path(f.path).name: f for f in second.files}
    assert by_name["a.jsonl"].result.held == {str(folder / "c.jsonl"): 1}
    with eng.connect() as conn:
        assert conn.execute(sa.select(models.Rollout.source_file).where(models.Rollout.rollout_id == "x")
                            ).scalar_one() == str(folder / "c.jsonl")


def test_the_cli_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    out = CliRunner().invoke(cli, ["ingest", "--run", "R", str(PLAIN), str(WITH_ADV)], terminal_width=300)
    assert out.exit_code == 0, out.output
    flat = re.sub(r"[\s│]", "", out.stdout)  # the table folds a long name over several lines
    assert "takenoverbyalaterfile" in flat
    assert "4 new, 0 replaced, 0 unchanged" in out.stdout


def run_type(engine, run: str) -> str:
    with engine.connect() as conn:
        return conn.execute(sa.select(models.Run.type).where(models.Run.id == run)).scalar_one()


def test_the_run_type_does_not_follow_the_file_order(fresh, tmp_path):
    """An eval file and a train file of one run: `train`, whichever is read first (and across
    separate ingests); `eval` while every rollout of the run says eval."""
    ev, tr = VF / "eval_multi_tool.jsonl", WITH_ADV
    for k, order in enumerate(([ev, tr], [tr, ev])):
        eng = fresh(f"order{k}")
        ingest_paths(eng, order, ReadContext(run_id="R"))
        assert run_type(eng, "R") == "train", order
    eng = fresh("apart")
    ingest_paths(eng, [ev], ReadContext(run_id="R"))
    assert run_type(eng, "R") == "eval"
    ingest_paths(eng, [tr], ReadContext(run_id="R"))
    assert run_type(eng, "R") == "train"
    ingest_paths(eng, [ev], ReadContext(run_id="R"))
    assert run_type(eng, "R") == "train"


TUNIX = FIXTURES / "realdata" / "tunix" / "v0.1.7"
MODES = ("Trajectory", "Steps", "Token", "Conversation")


def test_renderings_of_the_same_episodes_are_named_with_their_count(fresh, tmp_path, monkeypatch):
    """Tunix's collector renders one episode in four modes: a folder of them stores each episode
    four times (each a rollout), and the ingest says which files and how many."""
    folder = tmp_path / "dumps"
    folder.mkdir()
    for mode in MODES:
        shutil.copy(TUNIX / f"submitted_gamma09_final_bonus.{mode}.json", folder)
    shutil.copy(TUNIX / "single_turn.Token.json", folder)  # another episode, one rendering
    report = ingest_paths(fresh("t"), [folder], ReadContext())
    assert report.total.inserted == 5
    [found] = report.renderings
    assert (found.episodes, found.rollouts, found.modes) == (1, 4, tuple(sorted(MODES)))
    assert sorted(Path(f).name for f in found.files) == sorted(f"submitted_gamma09_final_bonus.{m}.json" for m in MODES)
    renders = {Path(f.path).name: f.renders for f in report.files}
    assert renders.pop("single_turn.Token.json") == 0 and set(renders.values()) == {3}
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    out = CliRunner().invoke(cli, ["ingest", str(folder)])
    assert out.exit_code == 0, out.output
    flat = " ".join(out.output.split())
    assert "4 tunix files of run dumps hold the same 1 episode in 4 renderings" in flat
    assert "4 rollouts stored" in flat and "submitted_gamma09_final_bonus.Steps.json" in flat


def test_the_orchestrator_and_its_learner_log(fresh, tmp_path):
    """The orchestrator's Token and Trajectory batches and the GRPO learner's CSV log of the same
    six episodes: three renderings; one mode alone is none."""
    files = [TUNIX / "orchestrator_group.Token.json", TUNIX / "orchestrator_group.Trajectory.json",
             TUNIX / "trajectory_log_orchestrator_group.csv"]
    [found] = ingest_paths(fresh("o"), files, ReadContext(run_id="R")).renderings
    assert (found.episodes, found.rollouts) == (6, 18)
    tokens = [TUNIX / f"{case}.Token.json" for case in ("submitted", "submitted_no_rollout_prompt_or_logprobs")]
    assert ingest_paths(fresh("one"), tokens, ReadContext(run_id="R")).renderings == []
