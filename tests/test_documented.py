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
