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
