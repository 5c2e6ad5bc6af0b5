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
