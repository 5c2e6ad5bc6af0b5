"""Schemathesis against the OpenAPI document of /api/v1, on SQLite with a small seeded run:
no 5xx, and every response matches its schema (status, content type, body), for a bounded
number of generated requests per operation (`SCHEMATHESIS_EXAMPLES`, default 20)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks
from schemathesis.specs.openapi import checks as oa_checks

from app.config import Settings
from app.db.engine import make_engine
from app.db.migrate import upgrade
from app.main import create_app
from tests.helpers import ingest, rollout, write_jsonl

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "20"))


def _api_schema():
    """The app on a fresh SQLite file with a small run, and its OpenAPI document (built when the
    module is collected: schemathesis parametrizes from it)."""
    tmp = Path(tempfile.mkdtemp(prefix="rollscope-schemathesis-"))
    url = f"sqlite:///{tmp / 'rollscope.db'}"
    engine = make_engine(url, writer=True)
    upgrade(engine)
    rs = [rollout(f"r{i}", run="run", step=i % 2, group="g", index=i, reward=i / 3) for i in range(4)]
    ingest(engine, write_jsonl(tmp / "a.jsonl", rs))
    engine.dispose()
    return schemathesis.openapi.from_asgi("/api/openapi.json", create_app(Settings(database_url=url)))


schema = _api_schema()


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_conforms_to_its_schema(case):
    # DELETE needs an admin token; without one its answer must still be a documented 401.
    case.call_and_validate(checks=[checks.not_a_server_error, oa_checks.status_code_conformance,
                                   oa_checks.content_type_conformance, oa_checks.response_schema_conformance])
