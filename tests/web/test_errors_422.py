"""Every 422 names the parameter or field at fault, in the one error shape (app/errors.py), and a
download (`.csv`, `.txt`) answers its errors in that JSON shape, never as an HTML page: checked
over the source (every place that raises a 422) and through the real HTTP app."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app import auth
from tests.helpers import ingest, rollout, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
RAISERS = {"HTTPException", "ApiError", "error_response"}


def _status(call: ast.Call) -> object:
    args = [a for a in call.args if not (isinstance(a, ast.Name) and a.id == "request")]
    node = next((k.value for k in call.keywords if k.arg in ("status_code", "status")), args[0] if args else None)
    return node.value if isinstance(node, ast.Constant) else None


def test_every_422_in_the_source_names_its_field():
    """A 422 made anywhere in app/ (HTTPException, ApiError, error_response) carries `field=`:
    starlette's HTTPException cannot, so a 422 must be an ApiError."""
    bare = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in RAISERS and _status(node) == 422:
                field = next((k.value for k in node.keywords if k.arg == "field"), None)
                if field is None or (isinstance(field, ast.Constant) and field.value is None):
                    bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert bare == []


@pytest.fixture
def run_g(engine, tmp_path):
    ingest(engine, write_jsonl(tmp_path / "g.jsonl", [rollout(f"r{i}", run="G", step=i % 2, group="g", index=i,
                                                                 reward=float(i % 2)) for i in range(4)]))
    return engine


# (method, url, field): each answered 422 naming `field`
CASES = [
    ("GET", "/runs/G/charts/findings.json?steps=x-y", "steps"),
    ("GET", "/runs/G/charts/findings.csv?steps=x-y", "steps"),
    ("GET", "/compare.json?runs=G", "runs"),
    ("GET", "/compare/charts/reward.csv?runs=G", "runs"),
    ("GET", "/compare.json?runs=G&paired_offset=-1", "paired_offset"),
    ("GET", "/compare/task.json?runs=G&task=t", "runs"),
    ("GET", "/runs/G/steps/x.json", "step"),
    ("GET", "/runs/G/facets.json?steps=9-1", "steps"),
    ("GET", "/runs/G/facets.json?ending=done", "ending"),
    ("GET", "/runs/G/facets.json?sort=bogus", "sort"),
    ("GET", "/runs/G/rollouts.json?flag=bogus", "flag"),
    ("GET", "/runs/G/rollouts.csv?step=-1", "step"),
    ("GET", "/runs/G/rollouts.csv?flag=bogus", "flag"),
    ("GET", "/runs/G/rollouts.csv?steps=2-1", "steps"),
    ("GET", "/api/v1/runs/G/rollouts?stepp=1", "stepp"),
    ("GET", "/runs/G/task-changes.csv?a=x&b=1", "a"),
    ("GET", "/api/v1/runs/G/rollouts?ending=done", "ending"),
]


@pytest.mark.parametrize("accept", [None, "*/*", "text/csv", "text/html,application/xhtml+xml,*/*;q=0.8"])
def test_422s_name_their_field_and_downloads_answer_json(client, run_g, accept):
    headers = {"Accept": accept} if accept else {}
    for method, url, field in CASES:
        r = client.request(method, url, headers=headers)
        assert r.status_code == 422, (url, r.text[:200])
        page = not url.split("?")[0].endswith((".json", ".csv")) and not url.startswith("/api/")
        if page:
            continue
        # a download (.csv) answers its error in the JSON error shape, whatever it accepts
        assert r.headers["content-type"].startswith("application/json"), (url, accept, r.headers["content-type"])
        err = r.json()["error"]
        assert err["code"] in ("invalid", "unknown_parameter") and err["field"] == field, (url, err)
        assert err["message"]
    # a page's error stays a page for a browser, and names the field for a JSON client
    assert client.get("/runs/G/steps/x").headers["content-type"].startswith("text/html")
    r = client.get("/runs/G/steps/x", headers={"Accept": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "step"


def test_body_422s_name_the_body_or_its_field(client, run_g):
    write, _ = auth.issue(run_g, "write")
    h = {"Authorization": f"Bearer {write}"}
    cases = [
        (dict(url="/api/v1/ingest?format=nope", content=b'{"a": 1}\n'), "format"),
        (dict(url="/api/v1/ingest", content=b""), "body"),
        (dict(url="/api/v1/ingest", content=b'{"neither": "a rollout"}\n'), "body"),
    ]
    for kw, field in cases:
        r = client.post(headers=h, **kw)
        assert r.status_code == 422, (kw, r.text)
        assert r.json()["error"]["field"] == field, (kw, r.json())
    note = "/api/v1/runs/G/rollouts/r1/notes"
    for body, field in ((b"{not json", "body"), (b'{"text": ""}', "text"), (b"{}", "text")):
        r = client.put(note, content=body, headers=h | {"Content-Type": "application/json"})
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["field"] == field, (body, r.json())
    assert "JSON" in client.put(note, content=b"{not json", headers=h | {"Content-Type": "application/json"}) \
        .json()["error"]["message"]
