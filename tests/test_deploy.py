"""The deployment files: docker-compose.yml parses with Debian's docker-compose, and every
service's command is one our CLI actually has."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml
from typer.testing import CliRunner

from app.cli import app as cli

ROOT = Path(__file__).resolve().parents[1]


def test_compose_file_is_valid():
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is missing: scripts/ensure-services.sh installs it"
    out = subprocess.run([exe, "-f", str(ROOT / "docker-compose.yml"), "config", "-q"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_compose_commands_exist_in_the_cli():
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    runner = CliRunner()
    for name, svc in spec["services"].items():
        argv = (svc.get("entrypoint") or []) + (svc.get("command") or [])
        if argv and argv[0] == "rollscope":
            sub = argv[1]
            assert runner.invoke(cli, [sub, "--help"]).exit_code == 0, (name, sub)


def test_compose_runs_app_and_ingest_from_one_image_with_health_checks():
    spec = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = spec["services"]
    app_svc, ingest_svc = services["app"], services["ingest"]
    assert app_svc["image"] == ingest_svc["image"] and "build" in app_svc
    assert "--workers" in app_svc["command"] and "/readyz" in " ".join(app_svc["healthcheck"]["test"])
    assert "healthcheck" in services["postgres"]
    for svc in (app_svc, ingest_svc):  # configured by environment only
        env = svc["environment"]
        assert env["ROLLSCOPE_DATABASE_URL"].startswith("postgresql://") and "ROLLSCOPE_DB__POOL_SIZE" in env


def test_image_builds():
    import pytest

    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "info"], capture_output=True).returncode != 0:
        pytest.skip("no docker daemon on this machine: the image build is checked where docker runs")
    out = subprocess.run([docker, "build", "-q", "-t", "rollscope:test", str(ROOT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
