"""Pyflakes' rules (ruff `F`) over every Python file of the project: an undefined name (a
missing import that fails only when its line runs, as `INT32_MIN` did on the rollout page),
an unused import or variable, a redefinition. Such faults hide from tests that do not reach the
line, so the whole tree is checked, not only what the tests cover."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_pyflakes_findings():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is a test dependency (pyproject.toml [test])"
    out = subprocess.run([ruff, "check", "--select", "F", "--output-format", "concise", "--no-cache",
                          "app", "ingest", "rollscope", "bench", "examples", "scripts", "tests"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
