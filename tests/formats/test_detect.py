"""Detection by content, through the registry (ingest/formats/registry.py).

Every file under tests/fixtures/realdata/<folder>/ is detected as the format `EXPECTED` names for
its folder, and no other specific reader claims it. The generic chat reader is tried last and
knows no other format, so it may also accept a file whose records are plain chat messages (Tunix's
Conversation mode is a bare message list); the order decides, and the test checks the order.

Folders whose format has no reader yet expect None (or the reader that takes them today): when a
reader lands, its line flips.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.errors import RecordError
from ingest.formats import registry
from ingest.source import open_source
from tests.conftest import FIXTURES

REALDATA = FIXTURES / "realdata"
GENERIC = "chat"

# folder → the reader that must detect every trace file in it (None: refused today)
EXPECTED: dict[str, str | None] = {
    "tunix": "tunix",
    "tau-bench": "tau-bench",
    "verifiers": "verifiers",
    "atif": "atif",
    "nemo-gym": "nemo-gym",
    "atropos": "atropos",
    "inspect_ai": "inspect",
    "swe-agent": "swe-agent",
    "openhands": "openhands",
    "mini-swe-agent": "mini-swe-agent",
    "trackio": "trackio",
}

# Files that are not traces: sidecars that say how a fixture was made, tokenizers.
SIDECARS = ("*.meta.json", "summary.json", "tokenizer.json", "tokenizer_config.json", "MANIFEST.md")


def _files() -> list[tuple[str, Path]]:
    out = []
    for folder in sorted(p for p in REALDATA.iterdir() if p.is_dir()):
        for f in sorted(folder.rglob("*")):
            if f.is_file() and not any(f.match(pat) for pat in SIDECARS):
                out.append((folder.name, f))
    return out


def test_every_realdata_folder_is_listed():
    folders = {p.name for p in REALDATA.iterdir() if p.is_dir()}
    assert folders == set(EXPECTED), "add the new folder to EXPECTED"


@pytest.mark.parametrize("folder,path", _files(), ids=lambda x: x if isinstance(x, str) else x.name)
def test_realdata_file_is_detected_as_its_format(folder, path):
    source = open_source(path)
    expected = EXPECTED[folder]
    reader = registry.detect(source)
    assert (reader.NAME if reader else None) == expected, path
    specific = [n for n in registry.claims(source) if n != GENERIC]
    assert specific == ([expected] if expected not in (None, GENERIC) else []), f"{path}: claimed by {specific}"


@pytest.mark.parametrize("path", sorted(REALDATA.rglob("*.meta.json"))[:3] + [REALDATA / "tunix/v0.1.7/summary.json"],
                         ids=lambda p: p.name)
def test_sidecars_are_claimed_by_no_reader(path):
    assert registry.claims(open_source(path)) == []


def test_registry_order_specific_first_generic_last():
    names = registry.names()
    assert names[-1] == GENERIC and names[0] == "native"
    assert len(set(names)) == len(names)
    assert [n for n in names if n not in registry.ALIASES] == [r.NAME for r in registry.READERS]
    for reader in registry.READERS:
        assert reader.EXPECTS and callable(reader.sniff) and callable(reader.read)
    assert registry.get("tunix").NAME == "tunix"
    # export says `nemo_gym`, the reader is `nemo-gym`: `--format` takes both
    assert registry.get("nemo_gym") is registry.get("nemo-gym") and registry.get("nemo_gym").NAME == "nemo-gym"
    assert names.index("nemo_gym") == names.index("nemo-gym") + 1
    with pytest.raises(KeyError, match="formats: native"):
        registry.get("nope")


def test_zip_archive_opens_and_its_members_are_sources():
    src = open_source(REALDATA / "inspect_ai/log_read_sample.eval")
    assert src.kind == "zip" and "header.json" in src.members() and src.first == src.members()
    header = src.open_member("header.json")
    assert header.kind == "json" and header.document["status"] == "success"
    assert header.name.endswith("log_read_sample.eval!header.json")
    with pytest.raises(RecordError, match="no such member"):
        src.open_member("nope.json")


def test_broken_zip_is_a_record_error(tmp_path):
    p = tmp_path / "x.zip"
    p.write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    with pytest.raises(RecordError, match="broken zip"):
        open_source(p)


def test_explain_lists_every_format_tried(tmp_path):
    p = tmp_path / "odd.json"
    p.write_text(json.dumps({"hello": "world"}))
    src = open_source(p)
    assert registry.detect(src) is None
    text = registry.explain(src)
    for reader in registry.READERS:
        assert f"{reader.NAME}: expects" in text


# --- moved from test_chat.py: the chat reader no longer knows other formats; the order decides ---

def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_native_and_tunix_shapes_are_not_taken_for_chat(tmp_path):
    def detected(name, value, jsonl=False):
        text = json.dumps(value) + "\n" if jsonl else json.dumps(value)
        r = registry.detect(open_source(write(tmp_path, name, text)))
        return r.NAME if r else None

    native = {"schema": "rollscope/1", "id": "x", "run": {"id": "r"}, "messages": [{"role": "user"}]}
    assert detected("n.jsonl", native, jsonl=True) == "native"
    assert detected("n.json", [native]) == "native"
    tunix_conversation = [{"role": "user", "content": "2+2?"},
                          {"role": "assistant", "content": "4<end_of_turn>"}]
    assert detected("tc.json", tunix_conversation) == "tunix"
    tunix_trajectory = {"task": {"id": "t"}, "steps": [{"chat_completions": []}], "reward": 1.0, "status": "SUCCEEDED"}
    assert detected("tt.json", tunix_trajectory) == "tunix"
    tunix_token = {"conversation_text": "x", "prompt_tokens": [1], "conversation_tokens": [2],
                   "conversation_masks": [1], "status": "SUCCEEDED", "trajectory_reward": 1.0}
    assert detected("tk.json", tunix_token) == "tunix"
    tunix_steps = [{"assistant_text": "a", "env_text": "e", "done": True, "assistant_tokens": [1]}]
    assert detected("ts.json", tunix_steps) == "tunix"
    tunix_items = [[{"pair_index": 0, "group_id": 1, "start_step": 0, "traj": {"steps": []}}]]
    assert detected("ti.json", tunix_items) == "tunix"


def test_verl_text_and_token_lines_are_detected(tmp_path):
    text = tmp_path / "12.jsonl"
    text.write_text(json.dumps({"input": "q", "output": "a", "gts": "4", "score": 1.0, "step": 12}) + "\n")
    tokens = tmp_path / "dump.jsonl"
    tokens.write_text(json.dumps({"prompt_ids": [1, 2], "response_ids": [3], "response_mask": [1]}) + "\n")
    assert registry.detect(open_source(text)).NAME == "verl"
    assert registry.detect(open_source(tokens)).NAME == "verl"


def test_format_option_forces_a_reader_and_refusals_list_every_format(engine, tmp_path):
    from app.worker.sync import ingest_paths
    from ingest.formats.base import ReadContext

    tau = REALDATA / "tau-bench" / "gpt-4o-airline.sample.json"
    forced = ingest_paths(engine, [tau], ReadContext(run_id="forced", format="chat"))
    assert [f.format for f in forced.files] == ["chat"]
    odd = write(tmp_path, "odd.json", json.dumps({"hello": "world"}))
    report = ingest_paths(engine, [odd], ReadContext(run_id="x"))
    (err,) = report.errors
    assert "Formats tried" in err.message and all(f"{r.NAME}: expects" in err.message for r in registry.READERS)
