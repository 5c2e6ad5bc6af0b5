"""`rollscope export` round trips (issue 7): ingest, export to a format, ingest the export into a
fresh database, and the stored content is the same. One test per export format, on the real
files of every format Rollscope reads (the RL formats and the agent harnesses: text-action
SWE-agent and mini-swe-agent, OpenHands, Inspect)."""
from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from app.db.engine import make_engine
from app.queries.rollout_list import RolloutFilters
from app.store.load import iter_rollouts
from ingest import export
from ingest.formats.samples import training_samples
from tests.conftest import DIALECTS, FIXTURES, _database
from tests.helpers import ingest, stored

REAL = FIXTURES / "realdata"
SOURCES = {  # run → files (real data of each format read)
    "vf": [REAL / "verifiers/train_group_with_advantages.jsonl", REAL / "verifiers/train_max_turns.jsonl"],
    "atif": [REAL / "atif/multi_tool.trajectory.json", REAL / "atif/max_turns.part1.trajectory.json",
             REAL / "atif/tunix_sample_atif_v1_7.json"],
    "ng": [REAL / "nemo-gym"],
    "at": [REAL / "atropos"],
    "tx": [REAL / "tunix/v0.1.7/submitted.Trajectory.json", REAL / "tunix/v0.1.7/env_timeout.Token.json"],
    "tau": [REAL / "tau-bench"],
    "swe": [REAL / "swe-agent"],
    "mini": [REAL / "mini-swe-agent"],
    "oh": [REAL / "openhands"],
    "insp": [REAL / "inspect_ai"],
}


@pytest.fixture
def fresh(tmp_path, _sqlite_template):
    """A writer engine on a second, fresh SQLite file at the latest schema (a copy of the migrated template)."""
    shutil.copyfile(_sqlite_template, tmp_path / "fresh.db")
    eng = make_engine(f"sqlite:///{tmp_path / 'fresh.db'}", writer=True)
    yield eng
    eng.dispose()


TUNIX_TOKENIZER = (FIXTURES / "tokenizers" / "mistral-v1-tokenizer.model",
                   {32000: "<pad>", 32001: "<start_of_turn>", 32002: "<end_of_turn>"})
VF_TOKENIZER = REAL / "verifiers/tokenizer"
# the real files with tokens, with their tokenizers (every Tunix collect mode, verifiers with its
# chat template), and without: runs "t-<name>" of the `sources` database
TOKEN_RUNS = {"tx": ([REAL / "tunix/v0.1.7"], TUNIX_TOKENIZER), "vf": ([REAL / "verifiers"], (VF_TOKENIZER, None)),
              "ng": ([REAL / "nemo-gym"], None), "at": ([REAL / "atropos"], None),
              "atif": (SOURCES["atif"], None), "tau": ([REAL / "tau-bench"], None),
              "insp": ([REAL / "inspect_ai"], None)}


@pytest.fixture(scope="module", params=DIALECTS)
def sources(request, tmp_path_factory):
    """A writer engine on one database per dialect holding every run of `SOURCES` and of
    `TOKEN_RUNS` (as "t-<run>"), ingested once for the module: the round-trip tests only read it
    (each exports from it into its own `fresh` database)."""
    from app.worker.sync import register_tokenizer
    from ingest.checks.context import load_context

    made = _database(request, tmp_path_factory.mktemp("sources"), migrated=True)
    eng = make_engine(next(made), writer=True)
    try:
        for run, paths in SOURCES.items():
            assert ingest(eng, *paths, run=run).ok, run
        for run, (paths, tok) in TOKEN_RUNS.items():
            key = register_tokenizer(eng, *tok) if tok else None
            ctx = load_context(VF_TOKENIZER) if run == "vf" else None
            assert ingest(eng, *paths, run=f"t-{run}", tokenizer_key=key, check_context=ctx).ok, run
        yield eng
    finally:
        eng.dispose()
        made.close()


@pytest.mark.parametrize("fmt", ["native", "verifiers", "atif", "otlp", "nemo_gym"])
def test_round_trip_gives_the_same_content(sources, fresh, tmp_path, fmt):
    engine = sources
    for run, paths in SOURCES.items():
        before = stored(engine, run)
        assert before, run
        out = tmp_path / f"{run}.{fmt}.jsonl"
        n = export.write(iter_rollouts(engine, run, RolloutFilters()), fmt, out)
        assert n == len(before)
        report = ingest(fresh, out, run=run)
        assert report.ok, [str(e) for e in report.errors]
        assert {f.format for f in report.files} == {{"nemo_gym": "nemo-gym"}.get(fmt, fmt)}
        after = stored(fresh, run)
        assert set(after) == set(before), run
        for key in before:
            assert after[key] == before[key], (run, key)
        assert findings_of(fresh, run) == findings_of(engine, run), run  # e.g. no unanswered_tool_call gained


def test_training_samples_round_trip_through_the_verl_reader(engine, fresh, tmp_path):
    assert ingest(engine, *SOURCES["vf"], run="vf").ok
    first = tmp_path / "s1.jsonl"
    n = export.write(iter_rollouts(engine, "vf", RolloutFilters()), "samples", first)
    rows = [json.loads(x) for x in first.read_text().splitlines()]
    assert n == len(rows) == 5
    row = next(r for r in rows if r["group_id"] is not None and r["reward"] == 1.5)
    assert len(row["response_ids"]) == len(row["response_mask"]) == len(row["response_logprobs"])
    assert row["group_id"] == "group-e38ebf9a16a1" and row["step"] == 7 and row["reward"] == 1.5
    assert row["advantages"][0] == 0.75 and row["ending"] == "submitted"
    report = ingest(fresh, first, run="vf")
    assert report.ok and {f.format for f in report.files} == {"verl"}
    second = tmp_path / "s2.jsonl"
    export.write(iter_rollouts(fresh, "vf", RolloutFilters()), "samples", second)
    assert [json.loads(x) for x in second.read_text().splitlines()] == rows


def test_parquet_holds_the_same_samples(engine, tmp_path):
    assert ingest(engine, *SOURCES["at"], run="at").ok
    rows = [s for r in iter_rollouts(engine, "at", RolloutFilters()) for s in training_samples(r)]
    out = tmp_path / "s.parquet"
    assert export.write(iter_rollouts(engine, "at", RolloutFilters()), "parquet", out) == len(rows) == 4
    table = pq.read_table(out).to_pylist()
    assert [t["response_ids"] for t in table] == [r["response_ids"] for r in rows]
    assert [t["reward"] for t in table] == [r["reward"] for r in rows]
    assert [t["sample_index"] for t in table] == [0, 1, 2, 3]


def test_export_command_uses_the_rollouts_list_filters(engine, db_url, tmp_path, monkeypatch):
    from app.cli import app

    assert ingest(engine, *SOURCES["vf"], run="vf").ok
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    out = tmp_path / "e.jsonl"
    res = CliRunner().invoke(app, ["export", "--run", "vf", "--format", "verifiers", "--out", str(out),
                                   "--ending", "truncated"])
    assert res.exit_code == 0, res.output
    lines = out.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["traces"][0]["stop_condition"] == "max_turns"
    res = CliRunner().invoke(app, ["export", "--run", "vf", "--format", "nope", "--out", str(out)])
    assert res.exit_code != 0


def test_nemo_gym_round_trip_through_the_export_command(engine, db_url, fresh, tmp_path, monkeypatch):
    """The real NeMo Gym files → ingest → `rollscope export --format nemo_gym` → ingest into a
    fresh database: the same rollouts (messages, tool calls, tokens, rewards, endings, groups)."""
    from app.cli import app

    assert ingest(engine, *SOURCES["ng"], run="ng").ok
    before = stored(engine, "ng")
    assert len(before) == 8
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    out = tmp_path / "ng.jsonl"
    res = CliRunner().invoke(app, ["export", "--run", "ng", "--format", "nemo_gym", "--out", str(out)])
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 8
    sources = [json.loads(x) for f in sorted((REAL / "nemo-gym").glob("*.jsonl")) for x in f.read_text().splitlines()]
    # each line has a source line's own top-level fields, reward and output items in order; a
    # line without NeMo Gym's indices is named by `_rollscope.rollout_id`
    assert sum("_rollscope" in d for d in lines) == sum("_ng_task_index" not in d for d in sources) == 1

    def shape(d):
        return sorted(set(d) - {"_rollscope"}), d["reward"], [i.get("type", "message") for i in d["response"]["output"]]
    assert sorted(map(shape, lines)) == sorted(map(shape, sources))
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", f"sqlite:///{tmp_path / 'fresh.db'}")
    res = CliRunner().invoke(app, ["ingest", "--run", "ng", "--format", "nemo_gym", str(out)])  # export's spelling
    assert res.exit_code == 0 and "nemo-gym" in res.output, res.output
    after = stored(fresh, "ng")
    assert set(after) == set(before)
    for key in before:
        assert after[key] == before[key], key


def findings_of(engine, run: str) -> list[tuple]:
    from sqlalchemy import text
    with engine.connect() as c:
        return sorted(c.execute(text(
            "SELECT r.rollout_id, f.kind, f.node_idx, f.position FROM finding f JOIN rollout r ON r.pk = f.rollout_pk "
            "WHERE r.run_id = :r AND f.severity != 'skipped'"), {"r": run}).all())


def test_otlp_export_through_the_cli_gives_back_nodes_tool_calls_and_tokens(engine, db_url, fresh, tmp_path,
                                                                            monkeypatch):
    """`rollscope export --format otlp` of real runs with no recorded calls (tau-bench, Atropos)
    and with tokens (Atropos, verifiers, Tunix): every node's message, parent and token arrays,
    every tool call and the findings come back; the spans a GenAI viewer reads are there."""
    from app.cli import app

    for run in ("tau", "at", "vf", "tx"):
        assert ingest(engine, *SOURCES[run], run=run).ok
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    for run in ("tau", "at", "vf", "tx"):
        out = tmp_path / f"{run}.otlp.jsonl"
        res = CliRunner().invoke(app, ["export", "--run", run, "--format", "otlp", "--out", str(out)])
        assert res.exit_code == 0, res.output
        before = {r.id: r for r in iter_rollouts(engine, run, RolloutFilters())}
        assert ingest(fresh, out, run=run).ok
        after = {r.id: r for r in iter_rollouts(fresh, run, RolloutFilters())}
        assert set(after) == set(before)
        for rid, b in before.items():
            a = after[rid]
            assert [n.to_json_dict() for n in a.nodes] == [n.to_json_dict() for n in b.nodes], (run, rid)
            assert [(n.token_ids, n.mask, n.logprobs) for n in a.nodes] == [
                (n.token_ids, n.mask, n.logprobs) for n in b.nodes]
            assert [c.to_json_dict() for c in a.calls] == [c.to_json_dict() for c in b.calls]
            assert (a.reward, a.ending, a.rewards) == (b.reward, b.ending, b.rewards)
        assert findings_of(fresh, run) == findings_of(engine, run), run
        spans = [sp for line in out.read_text().splitlines()
                 for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"]]
        ops = {a["value"].get("stringValue") for sp in spans for a in sp["attributes"]
               if a["key"] == "gen_ai.operation.name"}
        assert {"invoke_agent", "chat"} <= ops, run
    tau = {r.id: r for r in iter_rollouts(fresh, "tau", RolloutFilters())}["task0-trial0"]
    assert len(tau.nodes) == 32 and sum(len(n.message.tool_calls or []) for n in tau.nodes) == 8
    assert not [f for f in findings_of(fresh, "tau") if f[1] == "unpaired_tool_result"]
    atropos = list(iter_rollouts(fresh, "at", RolloutFilters()))
    assert len(atropos) == 4 and all(len(r.nodes) == 4 for r in atropos)
    assert all(sum(len(n.token_ids) for n in r.nodes) > 1000 for r in atropos)


def test_parquet_samples_are_read_back_through_the_cli(engine, db_url, tmp_path, monkeypatch):
    """`rollscope export --format parquet` → `rollscope ingest` of that file (the verl reader
    reads Parquet samples) → export again: the same rows, and the same rollouts (tokens, mask,
    logprobs, reward, group) as ingesting the JSONL samples."""
    from app.cli import app

    assert ingest(engine, *SOURCES["at"], run="at").ok and ingest(engine, *SOURCES["vf"], run="vf").ok
    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    for run in ("at", "vf"):
        pq_out, js_out = tmp_path / f"{run}.parquet", tmp_path / f"{run}.samples.jsonl"
        for fmt, out in (("parquet", pq_out), ("samples", js_out)):
            res = CliRunner().invoke(app, ["export", "--run", run, "--format", fmt, "--out", str(out)])
            assert res.exit_code == 0, res.output
        res = CliRunner().invoke(app, ["ingest", "--run", f"{run}-pq", str(pq_out)])
        assert res.exit_code == 0 and "binary file" not in res.output, res.output
        assert "verl" in res.output
        assert ingest(engine, js_out, run=f"{run}-js").ok
        from_pq, from_js = stored(engine, f"{run}-pq"), stored(engine, f"{run}-js")
        assert from_pq and len(from_pq) == len(pq.read_table(pq_out))
        for body in (*from_pq.values(), *from_js.values()):
            body.pop("run")
        assert from_pq == from_js, run
        again = tmp_path / f"{run}.again.parquet"
        res = CliRunner().invoke(app, ["export", "--run", f"{run}-pq", "--format", "parquet", "--out", str(again)])
        assert res.exit_code == 0, res.output

        def rows(p):
            return [{k: v for k, v in r.items() if k != "run_id"} for r in pq.read_table(p).to_pylist()]
        assert rows(again) == rows(pq_out)


@pytest.mark.parametrize("fmt", ["samples", "parquet"])
def test_runs_without_tokens_have_no_training_samples(engine, db_url, tmp_path, monkeypatch, fmt):
    from app.cli import app

    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    for run in ("tau", "swe", "oh", "mini", "insp"):
        assert ingest(engine, *SOURCES[run], run=run).ok
        out = tmp_path / f"{run}.{fmt}"
        out_before = tmp_path / "kept.txt"
        out_before.write_text("an earlier file")
        for target in (out, out_before):
            res = CliRunner().invoke(app, ["export", "--run", run, "--format", fmt, "--out", str(target)])
            assert res.exit_code == 1, res.output
            errors = [x for x in res.output.splitlines() if x.startswith("error:")]
            assert len(errors) == 1 and "no token arrays" in errors[0] and "nothing written" in errors[0], res.output
            assert "wrote" not in res.output
        assert not out.exists() and out_before.read_text() == "an earlier file"
        assert not list(tmp_path.glob(".*partial"))


def test_samples_export_says_how_many_rollouts_gave_samples(engine, db_url, tmp_path, monkeypatch):
    """NeMo Gym's examples: 8 rollouts, 2 with token ids. The summary names both counts and why
    they differ, so a short training file is not a surprise."""
    from app.cli import app

    monkeypatch.setenv("ROLLSCOPE_DATABASE_URL", db_url)
    assert ingest(engine, *SOURCES["ng"], run="ng").ok
    res = CliRunner().invoke(app, ["export", "--run", "ng", "--format", "samples", "--out", str(tmp_path / "s.jsonl")])
    assert res.exit_code == 0, res.output
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    assert f"wrote {len(lines)} samples from 8 rollouts" in res.stdout and "no token ids" in res.stdout, res.stdout
    res = CliRunner().invoke(app, ["export", "--run", "ng", "--format", "native", "--out", str(tmp_path / "n.jsonl")])
    assert "wrote 8 rollouts to" in res.stdout


def _kinds_by_rollout(engine, run: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for rid, kind, *_ in findings_of(engine, run):
        out.setdefault(rid, set()).add(kind)
    return out


@pytest.mark.parametrize("fmt", sorted(__import__("ingest.formats.registry", fromlist=["WRITERS"]).WRITERS))
def test_no_round_trip_adds_a_finding(sources, fresh, tmp_path, fmt):
    """Issue 19: export → re-ingest made up findings (every Tunix `ENV_TIMEOUT` rollout gained
    `terminal_env_tokenized` through `samples`/`parquet`: its last turn has no tokens, and the
    sample's mask runs ended the branch at the tool tokens before it). For every writer and the
    real files with tokens (every Tunix collect mode with its tokenizer, verifiers with its
    tokenizer and chat template, NeMo Gym, Atropos, ATIF) and without, each re-ingested rollout's
    findings are a subset of the original's; a sample of branch b > 0 is `<id>.b<b>`."""
    from app.worker.sync import register_tokenizer
    from ingest.checks.context import load_context
    from ingest.formats.registry import WRITERS

    engine = sources
    checked = 0
    for name, (_, tok) in TOKEN_RUNS.items():
        run = f"t-{name}"
        key = register_tokenizer(fresh, *tok) if tok else None
        ctx = load_context(VF_TOKENIZER) if name == "vf" else None
        before = _kinds_by_rollout(engine, run)
        out = tmp_path / (f"{run}.parquet" if fmt == "parquet" else f"{run}.{fmt}.jsonl")
        try:
            export.write(iter_rollouts(engine, run, RolloutFilters()), fmt, out)
        except ValueError as e:  # a run without token arrays has no training samples
            assert WRITERS[fmt].samples and "no token arrays" in str(e), (run, e)
            continue
        report = ingest(fresh, out, run=run, tokenizer_key=key, check_context=ctx)
        assert report.ok, (run, [str(e) for e in report.errors])
        for rid, kinds in _kinds_by_rollout(fresh, run).items():
            base = rid.rsplit(".b", 1)[0] if rid not in before and WRITERS[fmt].samples else rid
            assert kinds <= before.get(base, set()), (fmt, run, rid, kinds - before.get(base, set()))
            checked += 1
    assert checked
