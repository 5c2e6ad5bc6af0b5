"""Pyflakes' rules (ruff `F`) and the import order (ruff `I`) over every Python file of the
project: an undefined name (a missing import that fails only when its line runs, as `INT32_MIN`
did on the rollout page), an unused import or variable, a redefinition. Such faults hide from
tests that do not reach the line, so the whole tree is checked, not only what the tests cover.
And the line length (ruff `E501`, 120 characters, pyproject.toml `[tool.ruff]`)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


TREE = ("app", "ingest", "rollscope", "bench", "examples", "scripts", "tests")


def _ruff(*rules: str) -> subprocess.CompletedProcess:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is a test dependency (pyproject.toml [test])"
    return subprocess.run([ruff, "check", "--select", ",".join(rules), "--output-format", "concise", "--no-cache",
                           *TREE], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_no_pyflakes_findings():
    out = _ruff("F")
    assert out.returncode == 0, out.stdout + out.stderr


def test_imports_are_sorted():
    """One import order everywhere (ruff `I`, isort's rules; `ruff check --select I --fix` applies
    it). Where the order is meaningful (the check registry's registration order) an
    `# isort: off` block says so."""
    out = _ruff("I")
    assert out.returncode == 0, out.stdout + out.stderr


def test_lines_fit():
    """Every line within 120 characters (ruff `E501`, `line-length` in pyproject.toml): wrapped
    inside brackets, long strings split by implicit concatenation, long comments on their own
    lines. A line that cannot wrap (a Markdown table row in a docstring) says so with a `noqa`."""
    out = _ruff("E501")
    assert out.returncode == 0, out.stdout + out.stderr
