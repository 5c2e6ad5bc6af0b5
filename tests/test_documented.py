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
