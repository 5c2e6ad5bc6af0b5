"""Docs as a contract: every path of this repository that a docstring (app/, ingest/, rollscope/,
bench/, scripts/) or a document (docs/*.md, README.md) cites exists, and none points outside the
repository (`../shared/...`).

A path is checked when it starts with one of the repository's top-level folders (`app/`,
`ingest/`, `tests/`, `docs/`, `templates/`, ...) and is not part of a longer path: `app/main.py`
is ours, `src/phoenix/db/insertion/types.py` or `backend/app/api/` name upstream files and are
left alone. `*` in a path is a glob; `tests/x.py::test_name` also needs the test to be there.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCSTRING_TREES = ("app", "ingest", "rollscope", "bench", "scripts")


def _top_level_folders() -> list[str]:
    """The repository's own folders (not .venv, build output or egg-info)."""
    return sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
                  and p.name != "build" and not p.name.endswith(".egg-info"))


FOLDERS = _top_level_folders()
# not after a word character, `/`, `.` or `-` (then it is the tail of a longer, upstream path)
PATH = re.compile(r"(?<![\w/.\-])((?:\.\./)*)((?:" + "|".join(map(re.escape, FOLDERS)) + r")/[\w./*\-]*)(::\w+)?")
OUTSIDE = re.compile(r"(?<![\w/.\-])\.\./[\w.\-]+")


def _docstrings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((node.body[0].lineno, doc))
    return out


def cited_texts() -> list[tuple[str, int, str]]:
    """(file, first line, text) for every docstring of the code and every line of a document."""
    texts = []
    for tree in DOCSTRING_TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            rel = path.relative_to(ROOT)
            texts += [(str(rel), line, doc) for line, doc in _docstrings(path)]
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        rel = path.relative_to(ROOT)
        texts += [(str(rel), i, line) for i, line in enumerate(path.read_text().splitlines(), 1)]
    return texts


def _exists(path: str, test: str | None) -> bool:
    hits = list(ROOT.glob(path)) if "*" in path else [ROOT / path] if (ROOT / path).exists() else []
    if not hits:
        return False
    if test:
        return any(p.is_file() and re.search(rf"^\s*(async )?def {test[2:]}\(", p.read_text(), re.M) for p in hits)
    return True


# `owner/repo ` right before a path: the path is that repository's (open-telemetry/semantic-conventions
# `docs/gen-ai/gen-ai-spans.md`), and so is one after "the same repository's"
UPSTREAM = re.compile(r"(?:(?<![\w/.\-])([\w.\-]+)/[\w.\-]+|the same (repository)'s)\s+`?$")
# a file (an extension), a folder (a trailing `/`) or a glob; `rollscope/1` (the schema's name) is none
CHECKED = re.compile(r"(\.[a-z0-9]{1,5}|/|\*[\w.*]*)$")


def cited_paths() -> list[tuple[str, str, str | None]]:
    """(where, path, `::test` or None) for every path of this repository cited in a text."""
    out = []
    for file, line, text in cited_texts():
        for m in PATH.finditer(text):
            path = m.group(2).rstrip(".")
            upstream = UPSTREAM.search(text[:m.start()])
            if m.group(1) or not CHECKED.search(path) or (upstream and upstream.group(1) not in FOLDERS):
                continue
            out.append((f"{file}:{line + text.count(chr(10), 0, m.start())}", path, m.group(3)))
    return out


def test_every_cited_repository_path_exists():
    missing = [f"{where}: {path}{test or ''}" for where, path, test in cited_paths() if not _exists(path, test)]
    assert not missing, "cited paths that do not exist:\n" + "\n".join(missing)


def test_nothing_points_outside_the_repository():
    outside = [f"{file}:{line + text.count(chr(10), 0, m.start())}: {m.group(0)}"
               for file, line, text in cited_texts() for m in OUTSIDE.finditer(text)]
    assert not outside, "references outside the repository:\n" + "\n".join(outside)
