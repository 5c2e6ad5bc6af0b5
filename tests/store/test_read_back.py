"""Every stored rollout reads back (app/store/load.py), on SQLite and Postgres: values the store
made storable (a NaN or ±Infinity loss weight, stored as null; a non-finite reward weight) load
back, export, and re-ingest as `unchanged`; a row that still cannot load (a hand-edited database)
fails the export naming the rollout (the CLI writes no file; the API answers 500 before its first
byte, and breaks the body off after it, which the client reports, leaving no file), never a
shorter export that looks complete."""
from __future__ import annotations

import logging
import math

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

from app.cli import app
from app.config import Settings
from app.db import models
from app.main import create_app
from ingest.formats.base import ReadContext
from ingest.formats.native import parse_record
from ingest.jsonio import loads
from rollscope.client import ApiError, Client, ExportBrokenOff
from tests.helpers import ingest, serving, stored

N = models.Node.__table__
R = models.Rollout.__table__


def _line(rid: str, step: int, nodes: str = "", extra: str = "") -> str:
    nodes = nodes or '{"message": {"role": "user", "content": "hi"}}'
    return (f'{{"schema": "rollscope/1", "id": "{rid}", "run": {{"id": "rb"}}, "step": {step}, '
            f'"nodes": [{nodes}]{extra}}}\n')


# non-strict JSON on purpose: the lenient reader takes NaN and Infinity (cases 10 of the bug list)
NON_FINITE = _line(
    "nf", 0,
    '{"message": {"role": "user", "content": "hi"}, "token_ids": [1, 2]}, '
    '{"parent": 0, "message": {"role": "assistant", "content": "yo"}, "token_ids": [3, 4, 5], '
    '"mask": [1, 1, 1], "logprobs": [-0.123456789012345, -0.5, -1.75], '
    '"loss_weights": {"w": [1.0, NaN, Infinity], "v": [0.5, -Infinity, null]}}',
    ', "rewards": {"a": {"score": 1.0, "weight": NaN}, "b": {"score": 0.5, "weight": -Infinity}, '
    '"c": {"score": 0.25, "weight": 2.0}}')


def _cli(db_url, monkeypatch, *args):
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    return CliRunner().invoke(app, [str(a) for a in args])


def test_non_finite_loss_and_reward_weights_load_back_export_and_reingest_unchanged(engine, db_url, tmp_path,
                                                                                    monkeypatch):
    src = tmp_path / "nf.jsonl"
    src.write_text(NON_FINITE)
    assert ingest(engine, src).total.inserted == 1

    (back,) = stored(engine, "rb").values()  # read back as for export: no validation error
    assert back["nodes"][1]["loss_weights"] == {"w": [1.0, None, None], "v": [0.5, None, None]}
    rewards = back["rewards"]
    assert rewards["a"]["weight"] is None and rewards["a"]["weight_non_finite"] == "nan"
    assert rewards["b"]["weight"] is None and rewards["b"]["weight_non_finite"] == "-inf"
    assert rewards["c"] == {"score": 0.25, "weight": 2.0}

    out = tmp_path / "out.jsonl"
    res = _cli(db_url, monkeypatch, "export", "--run", "rb", "--out", out)
    assert res.exit_code == 0, res.output
    assert "wrote 1 rollouts" in res.output and out.read_text().count("\n") == 1

    exported = parse_record(loads(out.read_bytes()), "out.jsonl", 1, ReadContext())
    assert math.isnan(exported.rewards["a"].weight) and exported.rewards["b"].weight == -math.inf
    assert exported.total_reward() is not None and math.isnan(exported.total_reward())  # as read at first

    again = ingest(engine, out).total  # the export is the stored content: nothing to write
    assert (again.inserted, again.replaced, again.unchanged) == (0, 0, 1)
    again = ingest(engine, src).total  # and so is the source
    assert (again.inserted, again.replaced, again.unchanged) == (0, 0, 1)


# NaN and ±Infinity among the per-token values (non-strict JSON on purpose): stored as marked
# NaN / inf (app/db/tokenarrays.py), reported by invalid_logprob and implausible_logprob
NON_FINITE_TOKENS = _line(
    "nft", 0,
    '{"message": {"role": "user", "content": "hi"}, "token_ids": [1, 2]}, '
    '{"parent": 0, "message": {"role": "assistant", "content": "yo"}, "sampled": true, "token_ids": [3, 4, 5, 6], '
    '"mask": [1, 1, 1, 1], "logprobs": [-0.5, NaN, -Infinity, null], "advantages": [0.5, NaN, null, Infinity], '
    '"reference_logprobs": [-Infinity, -0.25, NaN, -0.5], '
    '"extra": {"trainer_logprobs": [-0.4, NaN, Infinity, null], "old_logprobs": ["x", -1.0, NaN, -0.5]}}')


def test_non_finite_token_values_export_as_strict_json_and_reingest_unchanged_with_their_findings(
        engine, db_url, tmp_path, monkeypatch):
    """A native export writes a NaN or ±Infinity logprob, advantage or reference logprob (and
    trainer logprob kept in `extra`) as null with the node's `non_finite` marker (strict JSON),
    which reads back as the same float: the
    export re-ingests `unchanged`, and a fresh database given only the export finds what the
    source's ingest found (invalid_logprob, implausible_logprob...)."""
    import json

    from ingest.schema import Rollout

    src = tmp_path / "nft.jsonl"
    src.write_text(NON_FINITE_TOKENS)
    assert ingest(engine, src).total.inserted == 1
    out = tmp_path / "out.jsonl"
    res = _cli(db_url, monkeypatch, "export", "--run", "rb", "--out", out)
    assert res.exit_code == 0, res.output

    def refuse(word):
        raise ValueError(f"bare {word} in strict JSON")

    node = json.loads(out.read_text(), parse_constant=refuse)["nodes"][1]
    assert node["logprobs"] == [-0.5, None, None, None] and node["advantages"] == [0.5, None, None, None]
    assert node["non_finite"] == {"logprobs": {"nan": [1], "-inf": [2]}, "advantages": {"nan": [1], "inf": [3]},
                                  "reference_logprobs": {"-inf": [0], "nan": [2]},
                                  "extra.trainer_logprobs": {"nan": [1], "inf": [2]},
                                  "extra.old_logprobs": {"nan": [2]}}
    assert node["extra"]["trainer_logprobs"] == [-0.4, None, None, None]
    back = Rollout.model_validate_json(out.read_bytes()).nodes[1]
    assert math.isnan(back.logprobs[1]) and back.logprobs[2:] == [-math.inf, None]
    assert math.isnan(back.advantages[1]) and back.advantages[2:] == [None, math.inf]
    trainer = back.extra["trainer_logprobs"]
    assert math.isnan(trainer[1]) and trainer[2:] == [math.inf, None] and math.isnan(back.extra["old_logprobs"][2])
    assert back.non_finite is None  # put back into the arrays, not kept

    with engine.connect() as conn:
        found = sorted(conn.execute(sa.select(models.Finding.__table__.c.kind, models.Finding.__table__.c.position)
                                    ).all())
    assert ("invalid_logprob", 1) in found
    again = ingest(engine, out).total  # the export is the stored content
    assert (again.inserted, again.replaced, again.unchanged) == (0, 0, 1), again.outcomes
    with engine.connect() as conn:
        assert sorted(conn.execute(sa.select(models.Finding.__table__.c.kind, models.Finding.__table__.c.position)
                                   ).all()) == found


def test_a_non_finite_marker_that_names_no_null_is_refused_naming_its_field(engine, tmp_path):
    import json

    line = NON_FINITE_TOKENS.replace("NaN, -Infinity, null]", "-1.0, -2.0, null]", 1).replace(
        '"sampled": true,', '"sampled": true, "non_finite": {"logprobs": {"nan": [1]}},')
    src = tmp_path / "bad.jsonl"
    src.write_text(line)
    report = ingest(engine, src)
    (err,) = report.errors
    assert (err.line, err.field) == (1, "nodes[1].non_finite.logprobs.nan[0]")
    assert err.message == "logprobs[1] is a number, not null (got 1)"
    for marker, field, message in (
            ({"logprobs": {"nan": [3, 3]}}, "nan[1]", "position 3 is listed twice (got 3)"),
            ({"logprobs": {"nan": [3], "inf": [3]}}, "inf[0]", "position 3 is listed twice (got 3)"),
            ({"logprobs": {"nan": [4]}}, "nan[0]", "must be the position of a null in logprobs (0..3) (got 4)")):
        src.write_text(NON_FINITE_TOKENS.replace('"sampled": true,',
                                                 f'"sampled": true, "non_finite": {json.dumps(marker)},'))
        (err,) = ingest(engine, src).errors
        assert (err.field, err.message) == (f"nodes[1].non_finite.logprobs.{field}", message)


def _three(engine, tmp_path, bad: str = "r1") -> None:
    """Three rollouts of run `rb` (steps 0, 1, 2); `bad`'s stored loss weights are then edited by
    hand into something the schema refuses."""
    src = tmp_path / "three.jsonl"
    src.write_text("".join(_line(f"r{k}", k, '{"message": {"role": "user", "content": "hi"}, "token_ids": [1], '
                                             '"loss_weights": {"w": [1.0]}}') for k in range(3)))
    assert ingest(engine, src).total.inserted == 3
    with engine.begin() as conn:
        pk = conn.execute(sa.select(R.c.pk).where(R.c.rollout_id == bad)).scalar_one()
        conn.execute(N.update().where(N.c.rollout_pk == pk).values(loss_weights={"w": ["heavy"]}))


def test_a_row_that_cannot_load_fails_the_export_command_naming_it(engine, db_url, tmp_path, monkeypatch):
    _three(engine, tmp_path)
    out = tmp_path / "out.jsonl"
    res = _cli(db_url, monkeypatch, "export", "--run", "rb", "--out", out)
    text = " ".join(res.output.split())
    assert res.exit_code == 1, res.output
    assert "stored rollout 'r1' (attempt 0) of run 'rb' cannot be read back" in text, text
    assert "nodes[0].loss_weights.w[0]" in text and "nothing written" in text, text
    assert not out.exists() and list(tmp_path.glob(".out.jsonl*")) == []


def test_the_api_export_never_ends_short(engine, db_url, tmp_path, monkeypatch, caplog):
    """Before the first byte: a 500 naming the rollout. After it (a page of one rollout, so the
    first rollout went out before the bad one is read): the server logs the rollout and breaks
    the body off; the client raises and writes no file."""
    from app.store import load

    _three(engine, tmp_path, bad="r0")
    app_ = create_app(Settings(database_url=db_url))
    with serving(app_) as base, Client(base) as rs:
        with pytest.raises(ApiError) as err:
            rs.export("rb", tmp_path / "first.jsonl")
        assert err.value.status == 500 and "stored rollout 'r0' (attempt 0) of run 'rb'" in err.value.message
        assert not (tmp_path / "first.jsonl").exists()

        with engine.begin() as conn:  # r0 good again, r1 bad
            conn.execute(N.update().values(loss_weights={"w": [1.0]}))
            pk = conn.execute(sa.select(R.c.pk).where(R.c.rollout_id == "r1")).scalar_one()
            conn.execute(N.update().where(N.c.rollout_pk == pk).values(loss_weights={"w": [True, "x"]}))
        monkeypatch.setattr(load, "PAGE", 1)
        caplog.set_level(logging.ERROR, logger="app.api.v1.export")
        with pytest.raises(ExportBrokenOff, match="broke off after"):
            rs.export("rb", tmp_path / "later.jsonl")
        assert not (tmp_path / "later.jsonl").exists() and list(tmp_path.glob(".later*")) == []
        assert any("stored rollout 'r1' (attempt 0) of run 'rb' cannot be read back" in r.getMessage()
                   for r in caplog.records), caplog.text


def test_a_reward_marker_beside_a_reward_number_is_refused(engine, tmp_path):
    """`reward_non_finite` stands for the reward (written null beside it): beside a number the
    record says two things; it is quarantined naming the field, its neighbours kept."""
    src = tmp_path / "marker.jsonl"
    src.write_text(_line("ok", 0) + _line("two", 0, extra=', "reward": 1.0, "reward_non_finite": "nan"')
                   + _line("nan", 0, extra=', "reward": null, "reward_non_finite": "nan"'))
    report = ingest(engine, src)
    (err,) = report.errors
    assert (err.line, err.field) == (2, "reward_non_finite")
    assert err.message == 'the reward must then be null, it is 1.0 (got "nan")'
    assert report.total.inserted == 2
