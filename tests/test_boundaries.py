"""The one rule of the layout: `ingest/` is the trace library and knows no database and no web.

Parses the imports of every module under `ingest/` (not a text search: an import inside a
function counts too) and fails on the service's packages and on storage or web frameworks.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"app", "sqlalchemy", "sqlmodel", "fastapi", "starlette", "alembic", "psycopg", "typer", "rich"}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module) of every import statement in `path`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


LIBRARY = sorted((ROOT / "ingest").rglob("*.py"))


def test_the_library_has_modules():
    assert len(LIBRARY) > 10


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_ingest_imports_no_database_and_no_web(path: Path):
    bad = [(line, mod) for line, mod in imported_modules(path) if mod in FORBIDDEN]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}: ingest/ must stay free of the service"


def test_the_parser_sees_imports_inside_functions(tmp_path: Path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from app.db import models\n    import sqlalchemy as sa\n")
    assert [m for _, m in imported_modules(probe)] == ["app", "sqlalchemy"]


def test_the_client_package_needs_only_the_standard_library_and_httpx():
    """rollscope/ (the collector's writer, the operators' client) is imported by training code
    and scripts: standard library, httpx and its own modules, nothing else."""
    import sys

    for path in sorted((ROOT / "rollscope").rglob("*.py")):
        bad = [(line, mod) for line, mod in imported_modules(path)
               if mod not in sys.stdlib_module_names and mod not in ("httpx", "__future__", "rollscope")]
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
