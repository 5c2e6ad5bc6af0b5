"""Ingest under hostile input: one bad file or record never stops the rest, nothing crashes,
nothing is lost silently, and two writers at once both succeed (SQLite and Postgres)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa

from app.db import models
from tests.helpers import ingest, rollout

ROOT = Path(__file__).resolve().parents[2]


def count(engine, table) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar()


def chat_line(rid: str, content: str = "hi") -> str:
    return json.dumps({"rollout_id": rid, "reward": 1.0,
                       "messages": [{"role": "user", "content": content}, {"role": "assistant", "content": "ok"}]})


def test_one_bad_file_does_not_stop_the_others(engine, tmp_path):
    tmp_path = tmp_path / "in"
    tmp_path.mkdir()
    (tmp_path / "a-deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "b-binary.json").write_bytes(b"{\x00\x01\x02")
    (tmp_path / "c-empty.jsonl").write_text("")
    (tmp_path / "d-good.jsonl").write_text(chat_line("good-1") + "\n")
    files = sorted(tmp_path.iterdir())
    report = ingest(engine, *files, run="h")
    assert report.total.inserted == 1
    bad = {Path(e.file).name: e.message for e in report.errors}
    assert set(bad) == {"a-deep.json", "b-binary.json", "c-empty.jsonl"}
    assert "nested too deeply" in bad["a-deep.json"] or "not JSON" in bad["a-deep.json"]
    # whole-file rejections are quarantined too (line unknown)
    with engine.connect() as conn:
        q = conn.execute(sa.select(models.Quarantine.__table__)).all()
    assert {Path(r.source_file).name for r in q} == set(bad) and all(r.line is None for r in q)


def test_fifo_is_refused_not_read(engine, tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    report = ingest(engine, fifo, run="h")
    assert "not a regular file" in report.errors[0].message


def test_surrogates_nul_and_bom_are_stored(engine, client, tmp_path):
    path = tmp_path / "odd.jsonl"
    lone = ('{"rollout_id": "s1", "messages": [{"role": "user", "content": "a\\ud800b"}, '
            '{"role": "assistant", "content": "x"}]}')
    nul = chat_line("n1", "before\u0000after")
    path.write_bytes(b"\xef\xbb\xbf" + (lone + "\n" + nul + "\n").encode())
    report = ingest(engine, path, run="odd")
    assert report.ok and report.total.inserted == 2, [str(e) for e in report.errors]
    s1 = client.get("/runs/odd/rollouts/s1.json").json()["messages"][0]["content"]
    assert s1 == "a\ufffdb"
    n1 = client.get("/runs/odd/rollouts/n1.json").json()["messages"][0]["content"]
    assert n1 == "before\ufffdafter"  # one rule on both databases: NUL → U+FFFD


def test_lone_surrogate_in_an_id_is_rejected_with_the_field(engine, client, tmp_path):
    """An id must be valid Unicode: `sur\\ud800` is refused (not stored as `sur\ufffd`), in a native
    line, a group id and a chat record, each error naming the field."""
    base = rollout("ok").to_json_dict()
    native = json.dumps(dict(base, id="PLACE")).replace('"PLACE"', '"sur\\ud800"')
    group = json.dumps(dict(base, id="g1", group={"id": "PLACE"})).replace('"PLACE"', '"grp\\udfff"')
    chat = '{"rollout_id": "chat\\ud800", "messages": [{"role": "user", "content": "a\\ud800b"}]}'
    path = tmp_path / "lone.jsonl"
    path.write_text("\n".join([json.dumps(base), native, group]) + "\n")
    (tmp_path / "chat.jsonl").write_text(chat + "\n" + chat_line("chat-ok") + "\n")
    report = ingest(engine, path, tmp_path / "chat.jsonl", run="lone")
    assert report.total.inserted == 2, [str(e) for e in report.errors]
    errors = {(Path(e.file).name, e.line): (e.field, e.message) for e in report.errors}
    assert set(errors) == {("lone.jsonl", 2), ("lone.jsonl", 3), ("chat.jsonl", 1)}
    assert errors["lone.jsonl", 2][0] == "id" and "valid Unicode" in errors["lone.jsonl", 2][1]
    assert errors["lone.jsonl", 3][0] == "group.id" and "valid Unicode" in errors["lone.jsonl", 3][1]
    assert errors["chat.jsonl", 1][0] == "id" and "valid Unicode" in errors["chat.jsonl", 1][1]
    ids = sorted(r["rollout_id"] for r in client.get("/runs/lone/rollouts.json").json()["rollouts"])
    assert ids == ["chat-ok", "ok"]


def test_broken_first_line_costs_one_record(engine, tmp_path):
    good = [json.dumps(rollout(f"g{i}").to_json_dict()) for i in range(3)]
    path = tmp_path / "first-bad.jsonl"
    path.write_text("\n".join(['{"schema": "rollscope/1", "id": ', *good]) + "\n")
    report = ingest(engine, path)
    assert report.total.inserted == 3
    assert [e.line for e in report.errors] == [1]


def test_invalid_graphs_and_counters_are_rejected_with_the_field(engine, tmp_path):
    base = rollout("ok").to_json_dict()
    bad = [dict(base, id="cycle", nodes=[dict(base["nodes"][0], parent=0)]),
           dict(base, id="far", nodes=[base["nodes"][0], dict(base["nodes"][1], parent=99)]),
           dict(base, id="call", calls=[{"node": 7}]),
           dict(base, id=""),
           dict(base, id="boolstep", step=True),
           dict(base, id="neg", attempt=-1)]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [base, *bad]) + "\n")
    report = ingest(engine, path)
    assert report.total.inserted == 1
    msgs = {e.line: (e.field, e.message) for e in report.errors}
    assert len(msgs) == 6
    assert msgs[2] == ("nodes[0].parent", "the parent must be null (it is the first node) (got 0)")
    assert msgs[3] == ("nodes[1].parent", "the parent must be an earlier node (0..0) or null (got 99)")
    assert msgs[4] == ("calls[0].node", "no such node (2 nodes) (got 7)")
    assert msgs[5][0] == "id" and msgs[6][0] == "step" and msgs[7][0] == "attempt"
    with engine.connect() as conn:
        raws = [r.raw for r in conn.execute(sa.select(models.Quarantine.__table__))]
    assert all(raw and raw.startswith("{") for raw in raws)  # the record itself is kept


def test_strings_and_booleans_in_masks_logprobs_and_parents_are_field_errors(engine, tmp_path):
    """No lax coercion (pydantic's would read "yes" and "1" as a mask bit, "-0.1" and true as
    logprobs, "0" as a parent): each is a field error naming the node, the array and the
    position; the record is quarantined, its neighbours kept, and a re-ingest adds nothing.
    The numbers 0 and 1 are a mask (1.0 and 0.0 too: a float loss-mask tensor's `tolist()`)."""
    base = rollout("ok").to_json_dict()

    def node1(**change):
        return [base["nodes"][0], {**base["nodes"][1], **change}]

    good = [dict(base, id="ints", nodes=node1(mask=[1, 0, 1])),
            dict(base, id="floats", nodes=node1(mask=[1.0, 0.0, 1.0], sampled=1))]
    bad = {"yes": (node1(mask=[True, "yes", True]), "nodes[1].mask[1]", "true or false"),
           "one": (node1(mask=["1", True, True]), "nodes[1].mask[0]", "true or false"),
           "half": (node1(mask=[True, True, 0.5]), "nodes[1].mask[2]", "true or false"),
           "text-lp": (node1(logprobs=[-0.5, "-0.1", -0.5]), "nodes[1].logprobs[1]", "valid number"),
           "bool-lp": (node1(logprobs=[True, -0.5, -0.5]), "nodes[1].logprobs[0]", "valid number"),
           "text-parent": (node1(parent="0"), "nodes[1].parent", "valid integer"),
           "text-sampled": (node1(sampled="yes"), "nodes[1].sampled", "true or false")}
    path = tmp_path / "lax.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [base, *good, *(dict(base, id=k, nodes=v[0])
                                                                     for k, v in bad.items())]) + "\n")
    report = ingest(engine, path)
    assert report.total.inserted == 3, [str(e) for e in report.errors]
    by_line = {e.line: e for e in report.errors}
    for line, (rid, (_, field, words)) in enumerate(bad.items(), start=4):
        err = by_line[line]
        assert err.field == field and words in err.message, (rid, str(err))
        assert str(err).startswith(f"{path}:{line}: {field}"), str(err)
    assert count(engine, models.Quarantine.__table__) == len(bad)
    with engine.connect() as conn:
        masks = dict(conn.execute(sa.select(models.Rollout.rollout_id, models.Rollout.n_trained_tokens)).all())
    assert masks == {"ok": 3, "ints": 2, "floats": 2}
    again = ingest(engine, path)
    assert (again.total.inserted, again.total.replaced, again.total.unchanged) == (0, 0, 3)
    assert count(engine, models.Quarantine.__table__) == len(bad)


def test_two_writers_at_once_both_succeed(db_url, tmp_path):
    from ingest.demo import write

    full = tmp_path / "demo.jsonl"
    write(full, steps=4, groups=4, group_size=8)
    lines = full.read_text().splitlines(keepends=True)
    half_a, half_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    half_a.write_text("".join(lines[::2]))
    half_b.write_text("".join(lines[1::2]))
    env = {**os.environ, "ROLLSCOPE_DATABASE_URL": db_url}
    cli = [sys.executable, "-m", "app.cli", "ingest"]
    # warm the schema first so the two writers race on data, not on migrations
    subprocess.run([*cli, str(tmp_path / "nothing")], env=env, capture_output=True, cwd=ROOT)
    procs = [subprocess.Popen([*cli, str(p)], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for p in (half_a, half_b, full)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1].decode()[-2000:] for o in outs]
    from app.db.engine import make_engine

    eng = make_engine(db_url)
    assert count(eng, models.Rollout.__table__) == len(lines) == 128
    assert count(eng, models.Run.__table__) == 1
    eng.dispose()


def test_a_record_no_column_can_hold_costs_only_itself(engine, tmp_path):
    base = rollout("ok").to_json_dict()
    deep: dict = {}
    cur = deep
    for _ in range(300):  # deeper than the JSON serializer allows
        cur["x"] = {}
        cur = cur["x"]
    big_id = dict(base, id="bigtok", nodes=[dict(base["nodes"][0], token_ids=[1, 2**31, 3])])
    path = tmp_path / "mixed.jsonl"
    lines = [json.dumps(base), json.dumps(big_id), json.dumps(dict(base, id="deep", task={"data": deep})),
             json.dumps(dict(base, id="ok2"))]
    path.write_text("\n".join(lines) + "\n")
    report = ingest(engine, path)
    assert report.total.inserted == 2
    errs = {e.line: e for e in report.errors}
    assert set(errs) == {2, 3}
    assert errs[2].field == "nodes[0].token_ids[1]" and "int32" in errs[2].message
    assert "cannot store rollout 'deep'" in errs[3].message
    assert count(engine, models.Quarantine.__table__) == 2


def test_broken_trace_files_in_a_folder_are_rejected_sidecars_skipped(engine, tmp_path):
    folder = tmp_path / "spool"
    folder.mkdir()
    (folder / "good.jsonl").write_text(chat_line("g1") + "\n")
    (folder / "torn.json").write_text('[{"rollout_id": "a", "messages": [{"role": "us')
    (folder / "notes.meta.json").write_text('{"case": "x", "mode": "Token"}')
    (folder / "readme.txt").write_text("hello")
    report = ingest(engine, folder, run="f")
    assert report.total.inserted == 1
    assert [Path(e.file).name for e in report.errors] == ["torn.json"]
    assert sorted(Path(p).name for p, _ in report.skipped) == ["notes.meta.json", "readme.txt"]


def test_jsonl_whose_first_line_is_not_an_object(engine, tmp_path):
    path = tmp_path / "arr-first.jsonl"
    path.write_text("[1, 2]\n" + chat_line("x1") + "\n" + chat_line("x2") + "\n")
    report = ingest(engine, path, run="a")
    assert report.total.inserted == 2 and report.errors and {e.line for e in report.errors} == {1}


def test_impossible_logprobs_are_kept_and_reported(engine, client, tmp_path):
    r = rollout("lp").to_json_dict()
    r["nodes"][1]["logprobs"] = [-0.5, 1e308, 0.7]
    path = tmp_path / "lp.jsonl"
    path.write_text(json.dumps(r) + "\n")
    assert ingest(engine, path, run="lp").ok
    d = client.get("/runs/lp/rollouts/lp.json").json()
    (f,) = [f for f in d["findings"] if f["kind"] == "invalid_logprob"]
    assert f["detail"]["positions"] == [1, 2] and f["severity"] == "error"


def test_numbers_are_numbers(engine, tmp_path):
    base = rollout("ok").to_json_dict()
    loose = [dict(base, id="t1", nodes=[dict(base["nodes"][0], token_ids=[True, 2, 3])]),
             dict(base, id="t2", nodes=[dict(base["nodes"][0], token_ids=["7", 2, 3])]),
             dict(base, id="t3", reward="1.0"), dict(base, id="t4", reward=True)]
    path = tmp_path / "loose.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in [base, *loose]) + "\n")
    report = ingest(engine, path)
    assert report.total.inserted == 1
    assert {e.line: e.field for e in report.errors} == {2: "nodes[0].token_ids[0]", 3: "nodes[0].token_ids[0]",
                                                        4: "reward", 5: "reward"}


def test_cli_shows_bidi_and_zero_width_characters_visibly(db_url, tmp_path, monkeypatch):
    """A run id (or file name, or error) with a right-to-left override is printed with the
    character shown as ⟨U+202E⟩, so the terminal never reverses what follows it."""
    from typer.testing import CliRunner

    from app.cli import app as cli
    from tests.helpers import rollout, write_jsonl

    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    path = write_jsonl(tmp_path / "r.jsonl", [rollout("a")])
    res = CliRunner().invoke(cli, ["ingest", "--run", "bidi\u202erun\u200b", str(path)])
    assert res.exit_code == 0, res.output
    assert "runs: bidi⟨U+202E⟩run⟨U+200B⟩" in res.stdout and "\u202e" not in res.output


def test_a_gzip_file_cut_short_keeps_its_records_before_the_cut(engine, tmp_path):
    """A `.jsonl.gz` whose writer stopped mid-stream: every line before the cut is stored, the cut
    is one rejected line naming where the stream ended, and re-ingesting adds nothing (a plain
    torn JSONL keeps its good lines the same way)."""
    import gzip
    import zlib

    from tests.conftest import data_path

    lines = data_path("realdata", "verifiers", "train_group.jsonl").read_bytes().splitlines(keepends=True)
    whole = gzip.compress(b"".join(lines))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) * 3 // 4])
    readable = zlib.decompressobj(wbits=31).decompress(cut.read_bytes())  # what the cut stream still holds
    complete = readable.count(b"\n")
    assert 0 < complete < len(lines)
    report = ingest(engine, cut, run="cut")
    assert report.total.inserted + report.total.replaced + report.total.unchanged >= 1
    [err] = [e for e in report.errors if "gzip stream ends early" in e.message]
    assert err.line == complete + 1 and err.file.endswith("cut.jsonl.gz")
    with engine.connect() as conn:
        n = conn.execute(sa.select(sa.func.count()).select_from(models.Rollout)
                         .where(models.Rollout.run_id == "cut")).scalar()
    assert n == report.total.inserted > 0
    again = ingest(engine, cut, run="cut")
    assert again.total.inserted == 0 and again.total.replaced == 0


def test_a_value_of_the_wrong_type_is_named_with_what_was_written(engine, tmp_path):
    """A string logprob, a word as a parent, a float as a parent, a string reward: each error names
    the field and the value as the record wrote it (JSON), once."""
    base = rollout("ok").to_json_dict()
    bad = [("lp", {"logprobs": ["x", -1.0, None, -1.0]}, "nodes[1].logprobs[0]", 'got "x"'),
           ("par", {"parent": "zero"}, "nodes[1].parent", 'got "zero"'),
           ("flt", {"parent": 0.0}, "nodes[1].parent", "got 0.0"),
           ("rew", {"reward": "1.0"}, "nodes[1].reward", 'got "1.0"')]
    lines = []
    for rid, change, _, _ in bad:
        d = json.loads(json.dumps(base))
        d["id"] = rid
        d["nodes"][1].update(change)
        lines.append(json.dumps(d))
    path = tmp_path / "types.jsonl"
    path.write_text("\n".join([json.dumps(base), *lines]) + "\n")
    report = ingest(engine, path)
    assert report.total.inserted == 1
    got = {e.line: (e.field, e.message) for e in report.errors}
    for k, (_, _, field, value) in enumerate(bad, start=2):
        assert got[k][0] == field and got[k][1].endswith(value) and got[k][1].count("got") == 1, got[k]
