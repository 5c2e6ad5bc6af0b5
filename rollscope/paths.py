"""One path segment of a Rollscope URL, shared by the app's links (app/urls.py) and the client's
(rollscope/client.py `rollout_url`), so a link printed by training code is the app's own. The
standard library only: the client is imported without the service's dependencies."""
from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*\Z")  # what quote() leaves as it is


def segment(value: Any) -> str:
    """`value` as one path segment: every reserved character encoded, `/` included, and the dot
    of a trailing `.json` (`a.json` → `a%2Ejson`), which would otherwise read as the JSON twin's
    suffix (app.render.by_id)."""
    text = str(value)
    out = text if UNRESERVED.match(text) else quote(text, safe="")
    return out[:-5] + "%2Ejson" if out.endswith(".json") else out
