"""HTTP semantics over real HTTP (uvicorn), on a SQLite file with a small run:

- a 405 names every method its path supports in `Allow` (RFC 9110 §15.5.6), on every `/api/v1`
  path of the OpenAPI document (Allow = the document's methods, plus HEAD where GET is), on the
  pages and their twins, the static files and the receivers;
- HEAD answers wherever GET does, with GET's status and headers and no body (RFC 9110 §9.3.2),
  on every GET route of the app (pages, JSON twins, downloads, API reads, health, docs) and on
  errors;
- a NUL anywhere in the URL is a 400 in the one error shape, and the document's patterns say so
  (every string parameter refuses NUL; a label takes what the server takes);
- a JSON body in another media type is a 415, one larger than the operation takes a 413 (RFC
  9110 §15.5.16, §15.5.14), in the error shape;
- the document's security follows the settings: a read is open (optional bearer) unless
  `require_read_token`, when it requires one; writes always require one; `POST /api/v1/ingest`
  declares its NDJSON body.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from app import auth
from app.api.v1.labels import LABEL
from app.config import Settings
from app.db.engine import make_engine
from app.db.migrate import upgrade
from app.main import create_app
from tests.helpers import ANSWER_TIMEOUT, ingest, rollout, serving, write_jsonl

# A value for each path parameter of the document that names something in the seeded run.
PARAMS = {"run": "run", "rollout": "r0", "group": "g", "branch": "0", "step": "0", "label": "reviewed"}
OTHER_METHODS = ("PATCH", "DELETE", "PUT", "POST")


def _seeded(tmp: Path) -> str:
    url = f"sqlite:///{tmp / 'rollscope.db'}"
    engine = make_engine(url, writer=True)
    upgrade(engine)
    rs = [rollout(f"r{i}", run="run", step=i % 2, group="g", index=i, reward=i / 3) for i in range(4)]
    ingest(engine, write_jsonl(tmp / "a.jsonl", rs))
    engine.dispose()
    return url


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real server on a seeded SQLite file: (base URL, its OpenAPI document, write-token headers)."""
    url = _seeded(tmp_path_factory.mktemp("http-semantics"))
    app = create_app(Settings(database_url=url))
    token, _ = auth.issue(app.state.engine, "write", name="semantics")
    with serving(app) as base:
        yield base, app.openapi(), {"Authorization": f"Bearer {token}"}


def _fill(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: PARAMS[m.group(1)], path)


def test_405_lists_every_method_of_every_api_path(server):
    base, doc, _ = server
    checked = 0
    with httpx.Client(base_url=base, timeout=ANSWER_TIMEOUT) as c:
        for path, ops in doc["paths"].items():
            methods = {m.upper() for m in ops}
            allow = methods | ({"HEAD"} if "GET" in methods else set())
            for method in OTHER_METHODS:
                if method in methods:
                    continue
                r = c.request(method, _fill(path))
                assert r.status_code == 405, (method, path, r.status_code)
                assert set(r.headers["allow"].split(", ")) == allow, (method, path, r.headers["allow"])
                assert r.json()["error"]["code"] == "method_not_allowed"
                checked += 1
    assert checked > 60


@pytest.mark.parametrize(("path", "allow"), [
    ("/api/v1/runs/run", "GET, HEAD, DELETE"),  # was `Allow: GET` alone: two routes, one path
    ("/api/v1/runs/run/rollouts/r0/labels/reviewed", "PUT, DELETE"),
    ("/api/v1/runs/run/rollouts/r0/notes", "GET, HEAD, PUT, DELETE"),
    ("/api/v1/runs/run/steps/0/notes", "GET, HEAD, PUT, DELETE"),
    ("/api/v1/ingest", "POST"),
    ("/", "GET, HEAD"),
    ("/runs", "GET, HEAD"),
    ("/runs/run", "GET, HEAD"),
    ("/runs/run.json", "GET, HEAD"),
    ("/runs/run/rollouts/r0", "GET, HEAD"),
    ("/runs/run/groups/g", "GET, HEAD"),
    ("/runs/run/charts/endings", "GET, HEAD"),
    ("/runs/run/steps/0", "GET, HEAD"),
    ("/quarantine", "GET, HEAD"),
    ("/static/app.css", "GET, HEAD"),
    ("/healthz", "GET, HEAD"),
    ("/v1/traces", "POST"),
])
def test_405_on_pages_static_and_receivers_names_every_method(server, path, allow):
    base, _, _ = server
    with httpx.Client(base_url=base, timeout=ANSWER_TIMEOUT) as c:
        for method in ("PATCH", "DELETE", "PUT"):
            if method in allow:
                continue
            r = c.request(method, path, headers={"Accept": "application/json"})
            assert (r.status_code, r.headers.get("allow")) == (405, allow), (method, path)


HEAD_PATHS = ["/", "/runs", "/runs.json", "/runs/run", "/runs/run.json", "/runs/run/rollouts",
              "/runs/run/rollouts.json", "/runs/run/rollouts.csv", "/runs/run/rollouts/r0",
              "/runs/run/rollouts/r0.json", "/runs/run/groups/g", "/runs/run/groups/g.json",
              "/runs/run/charts/endings", "/runs/run/charts/endings.json", "/runs/run/charts/endings.csv",
              "/runs/run/steps/0", "/runs/run/steps/0.json", "/compare?runs=run", "/search?q=four", "/quarantine",
              "/quarantine.json", "/ingest", "/ingest.json", "/api/docs", "/api/openapi.json", "/healthz", "/readyz",
              "/static/app.css", "/runs/nope", "/runs/nope.json", "/api/v1/runs/nope", "/api/v1/runs?bogus=1"]


UNCOMPARED = ("date", "transfer-encoding")
VARYING = ("/metrics",)  # its counters move between the GET and the HEAD: the length may too


# A value for each path parameter of the app's own GET routes (the pages, twins and downloads).
ROUTE_PARAMS = {**PARAMS, "run_id": "run", "rollout_id": "r0", "group_id": "g", "chart_id": "endings",
                "rollout_pk": "1", "idx": "0", "sha256": "0" * 64}


def _every_get_route() -> list[str]:
    """Every GET route of the app (pages, twins, downloads, API, health, docs), its parameters filled."""
    from fastapi.routing import iter_route_contexts

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Settings(database_url=f"sqlite:///{Path(tmp) / 'rollscope.db'}"))
        paths = [r.path for r in iter_route_contexts(app.routes) if r.methods and "GET" in r.methods]
        app.state.engine.dispose()
    return [re.sub(r"\{(\w+)(:path)?\}", lambda m: ROUTE_PARAMS[m.group(1)], p) for p in paths]


def test_head_answers_as_get_without_a_body(server):
    base, doc, _ = server
    routes = _every_get_route()
    assert len(routes) > 40 and "/runs/run/rollouts/r0" in routes
    with httpx.Client(base_url=base, timeout=ANSWER_TIMEOUT) as c:
        for path in HEAD_PATHS + routes:
            if path.endswith("/events"):  # an event stream never ends: its HEAD answers the GET's status at once
                with c.stream("GET", path) as got:
                    assert c.head(path).status_code == got.status_code, path
                continue
            got, head = c.get(path), c.head(path)
            assert head.status_code == got.status_code, path
            assert head.content == b"", path
            # framing (`Transfer-Encoding: chunked` of a streamed GET) and the clock may differ (§9.3.2)
            skip = UNCOMPARED + (("content-length",) if path in VARYING else ())
            same = {k: v for k, v in got.headers.items() if k not in skip}
            assert {k: v for k, v in head.headers.items() if k not in skip} == same, path
            assert ("content-length" in head.headers) == ("content-length" in got.headers), path


def test_nul_in_a_path_segment_or_query_is_a_400_and_the_document_says_so(server):
    base, doc, _ = server
    with httpx.Client(base_url=base, timeout=ANSWER_TIMEOUT) as c:
        for url in ("/api/v1/runs/a%00b", "/api/v1/runs/run/rollouts/r%000", "/api/v1/runs/run/rollouts?task=a%00",
                    "/runs/a%00b", "/runs/run/rollouts?task=%00"):
            r = c.get(url, headers={"Accept": "application/json"})
            assert r.status_code == 400, url
            assert r.json()["error"]["code"] == "bad_request", url
    strings = 0
    for path, ops in doc["paths"].items():
        for op in ops.values():
            assert "400" in op["responses"], path
            for param in op.get("parameters", []):
                for s in [param["schema"], *param["schema"].get("anyOf", [])]:
                    if s.get("type") != "string" or "enum" in s:
                        continue
                    strings += 1
                    assert not re.search(s["pattern"], "a\x00b"), (path, param["name"])
                    if param["in"] == "path":
                        assert s["minLength"] >= 1, (path, param["name"])
    assert strings > 40


def test_a_label_is_declared_as_the_server_checks_it(server):
    base, doc, headers = server
    param = next(p for p in doc["paths"]["/api/v1/runs/{run}/rollouts/{rollout}/labels/{label}"]["put"]["parameters"]
                 if p["name"] == "label")
    pattern = next(s["pattern"] for s in [param["schema"]] if "pattern" in s)
    assert pattern == LABEL.pattern and param["schema"]["maxLength"] == 100
    with httpx.Client(base_url=base, headers=headers) as c:
        for label, status in (("reviewed", 204), ("team/a:b_1.2-x", 204), ("-dash-first", 422), ("a b", 422),
                              ("x" * 101, 422), ("a\n", 422), ("reviewed\n", 422), ("a\r", 422)):
            # as ECMA reads the pattern: `$` is the end of the text, not before a final newline as in Python
            assert bool(re.fullmatch(pattern, label)) == (status == 204), label
            r = c.put(f"/api/v1/runs/run/rollouts/r0/labels/{quote(label, safe='')}")
            assert r.status_code == status, (label, r.text)


def test_a_json_body_in_another_media_type_is_415_and_too_large_is_413(server):
    base, doc, headers = server
    url = "/api/v1/runs/run/rollouts/r0/notes"
    with httpx.Client(base_url=base, headers=headers) as c:
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            h = {"Content-Type": content_type} if content_type else {}
            r = c.put(url, content=b'{"text": "a note"}', headers=h)
            assert r.status_code == 415 and r.json()["error"]["field"] == "body", content_type
        r = c.put(url, content=b'{"text": "' + b"x" * 700_000 + b'"}', headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
        assert c.put(url, json={"text": ""}).json()["error"]["field"] == "text"  # then the fields: 422
        assert c.put(url, json={"text": "a note"}).status_code == 204
        assert c.put(url, content=b"x", headers={"Content-Type": "text/plain", "Authorization": ""}).status_code == 401
    for path in (url, "/api/v1/runs/{run}/steps/{step}/notes"):
        op = doc["paths"][path.replace("run/rollouts/r0", "{run}/rollouts/{rollout}")]["put"]
        assert {"413", "415", "422"} <= set(op["responses"])


def _security(**settings):
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Settings(database_url=f"sqlite:///{Path(tmp) / 'rollscope.db'}", **settings))
        doc = app.openapi()
        app.state.engine.dispose()
    return {(m.upper(), p): op for p, ops in doc["paths"].items() for m, op in ops.items()}


def test_the_document_says_who_may_do_what_as_the_settings_say():
    bearer, optional = [{"HTTPBearer": []}], [{}, {"HTTPBearer": []}]
    writes = {("DELETE", "/api/v1/runs/{run}"), ("POST", "/api/v1/ingest")}
    for locked in (False, True):
        ops = _security(require_read_token=locked)
        for (method, path), op in ops.items():
            if path == "/healthz":
                assert "security" not in op and "401" not in op["responses"]
            elif method != "GET" or (method, path) in writes:
                assert op["security"] == bearer and {"401", "403"} <= set(op["responses"]), (method, path)
            elif path.startswith("/api/v1") or locked:
                assert op["security"] == (bearer if locked else optional), (method, path)
                assert "401" in op["responses"] and "403" not in op["responses"], (method, path)
                assert op["responses"]["401"]["headers"]["WWW-Authenticate"]["required"]
            else:  # /readyz, open
                assert "security" not in op, path
            if path == "/readyz":  # a load balancer's probe: its 503 says why, with no Retry-After
                assert "headers" not in op["responses"]["503"]
            assert ("404" in op["responses"]) == ("{" in path), (method, path)
        ingest_op = ops[("POST", "/api/v1/ingest")]
        assert ingest_op["requestBody"]["required"] is False  # empty with `format=`: zero records
        assert list(ingest_op["requestBody"]["content"]) == ["application/x-ndjson"]
        assert {"413", "415", "429", "503"} <= set(ingest_op["responses"])
        assert ingest_op["responses"]["429"]["headers"]["Retry-After"]["required"]


def test_every_reader_named_by_format_refuses_a_body_it_cannot_read(server):
    """`POST /api/v1/ingest?format=X` with lines that are not objects (schemathesis found
    `format=trackio` answering 500 for `""`), or an object of no format's shape: a 4xx or a 200
    with each line rejected, never a 5xx and never a line silently dropped (`format=trackio`
    answered `{"accepted": 0, "rejected": 0}` for `{"a": 1}`)."""
    from ingest.formats.registry import names

    base, _, headers = server
    silent = []
    with httpx.Client(base_url=base, headers=headers) as c:
        for fmt in names():
            for body in (b'""\n', b"[1]\n", b"not json\n", b'{"a": 1}\n', b'{"a": 1}\n{"b": 2}\n', b""):
                r = c.post("/api/v1/ingest", params={"format": fmt}, content=body)
                assert r.status_code < 500, (fmt, body, r.text)
                lines = body.count(b"\n")
                if r.status_code == 200 and lines:
                    got = r.json()
                    if (got["accepted"], got["rejected"]) != (0, lines):
                        silent.append((fmt, body, got))
    assert silent == []
