"""The Prometheus alert rules of docs/deploy.md ("Metrics and alerts") are valid YAML rule groups
whose expressions name only metrics that `/metrics` serves (a worker beating, a spool file read);
where `promtool` is installed (Debian's `prometheus`) it checks the rules too."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from app.worker.heartbeat import Heartbeat
from app.worker.run import run as run_worker
from tests.conftest import ROOT
from tests.helpers import rollout, write_jsonl


def _rules_block() -> str:
    doc = (ROOT / "docs" / "deploy.md").read_text()
    section = doc[doc.index("## Metrics and alerts"):]
    return re.search(r"```yaml\n(.*?)```", section, flags=re.S).group(1)


def test_the_documented_alert_rules_parse_and_name_served_metrics(client, engine, tmp_path):
    rules = yaml.safe_load(_rules_block())
    exprs = {r["alert"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    assert {"RollscopeWorkerHeartbeatStale", "RollscopeIngestLagGrowing"} <= set(exprs)
    for name, expr in exprs.items():
        assert expr.count("(") == expr.count(")") and expr.count("[") == expr.count("]"), name
    spool = tmp_path / "spool"
    spool.mkdir()
    write_jsonl(spool / "a.jsonl", [rollout("a")])
    run_worker(engine, [spool], once=True, log=lambda _m: None)
    assert Heartbeat(engine, [spool], interval=2.0, worker_id=lambda: "h:1:s1", files=list).beat()
    served = set(re.findall(r"^(rollscope_[a-z_]+)", client.get("/metrics").text, flags=re.M))
    named = {m for e in exprs.values() for m in re.findall(r"\b(rollscope_[a-z_]+)", e)}
    assert named and named <= served, named - served


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian's prometheus)")
def test_promtool_accepts_the_documented_alert_rules(tmp_path):
    path = tmp_path / "rules.yml"
    path.write_text(_rules_block())
    out = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
