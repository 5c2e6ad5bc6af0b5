"""Documentation that must keep up with the code: every setting is in the README's table."""
from __future__ import annotations

import re
from pathlib import Path

from app.config import setting_env_names

ROOT = Path(__file__).resolve().parents[1]


def test_readme_lists_every_setting():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Configuration"):]
    section = section[:section.index("\n## ", 1)]
    listed = set(re.findall(r"^\| `(ROLLSCOPE_[A-Z0-9_]+)` \|", section, flags=re.M))
    missing = [name for name in setting_env_names() if name not in listed]
    assert not missing, f"README's configuration table lacks {missing}"
    assert "ROLLSCOPE_WORKER__SPOOL_DIR" in setting_env_names()


def test_readme_lists_every_demo_run():
    """Every run `make demo` loads (the Makefile's demo-data target) is named in the README."""
    makefile = (ROOT / "Makefile").read_text()
    target = makefile[makefile.index("\ndemo-data:"):]
    target = target[:target.index("\n\n")]
    runs = set(re.findall(r"--run ([\w.-]+)", target)) | {"demo-grpo"}
    assert len(runs) == 10, runs
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## The demo data"):]
    section = section[:section.index("\n## ", 1)]
    missing = sorted(run for run in runs if f"`{run}`" not in section)
    assert not missing, f"README's demo-data section lacks {missing}"


def _route_shapes(routers) -> set[str]:
    """Each route's path with its parameters blanked (`/runs/{run_id:path}/steps/{step}` →
    `/runs/{}/steps/{}`, `.json` dropped), each included router's without its prefix."""
    out = set()
    for router in routers:
        for r in router.routes:
            if hasattr(r, "original_router"):
                out |= _route_shapes([r.original_router])
            elif getattr(r, "path", ""):
                out.add(re.sub(r"\{[^}]*\}", "{}", r.path).removesuffix(".json"))
    return out


def test_every_documented_page_url_is_a_route():
    """Every `/runs/...` URL pattern the README and docs/ name in backticks is a route of the
    pages (docs/api.md's table may leave out the `/api/v1` prefix of its own routes): a README
    once named `/runs/{run}/export?format=` where only `/api/v1/runs/{run}/export` exists."""
    from app.api.v1 import router as api_v1
    from app.routes import analytics, events, pages, status

    page_routes = _route_shapes([analytics.router, events.router, pages.router, status.router])
    api_routes = _route_shapes([api_v1])
    wrong = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for url in re.findall(r"`(/runs/[^`?#\s]*\{[^`?#\s]*)", doc.read_text()):
            shape = re.sub(r"\{[^}]*\}", "{}", url).removesuffix(".json")
            if shape not in page_routes and not (doc.name == "api.md" and shape in api_routes):
                wrong.append(f"{doc.name}: {url}")
    assert not wrong, f"documented URLs that are no route: {wrong}"


def _documented_invocations() -> list[tuple[str, str]]:
    """(file, command line) for every `rollscope ...` in backticks and every line of a fenced
    block that runs rollscope, in README.md and docs/*.md."""
    out = []
    for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = f.read_text()
        name = str(f.relative_to(ROOT))
        out += [(name, m) for m in re.findall(r"`(rollscope [^`\n]+)`", text)]
        for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S):
            for line in block.splitlines():
                line = re.sub(r"^\s*(\$\s*)?(\S+=\S+\s+)*", "", line)
                if line.startswith("rollscope "):
                    out.append((name, line.split(" #")[0].split("&&")[0].split("|")[0].strip()))
    return out


def test_documented_command_lines_match_each_commands_options():
    """Every option a documented `rollscope` command line names exists on that command, and one
    shown as optional (`[--out F]`) is not required by its `--help` (typer's own parameters)."""
    import typer

    from app.cli import app

    root = typer.main.get_command(app)
    found, bad = 0, []
    for name, text in _documented_invocations():
        cmd, words = root, text.split()[1:]
        for w in words:
            if w not in getattr(cmd, "commands", {}):
                break
            cmd = cmd.commands[w]
        if cmd is root:
            continue
        found += 1
        opts = {o: p for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        optional = set(re.findall(r"--[\w-]+", " ".join(re.findall(r"\[[^\]]*\]", text))))
        for o in re.findall(r"(?<![\w-])--[a-z][\w-]*", text):
            if o != "--help" and o not in opts:
                bad.append(f"{name}: `{text}`: {o} is not an option of `{cmd.name}`")
            elif o in optional and opts[o].required:
                bad.append(f"{name}: `{text}`: {o} is required, shown as optional")
    assert found > 20, found
    assert not bad, "\n".join(bad)
