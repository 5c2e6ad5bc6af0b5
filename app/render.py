"""One view, two faces: the same data rendered as HTML or returned as its JSON twin.

A request wants JSON when its last path segment ends in `.json` or its Accept header asks for
`application/json` (and not HTML). An htmx request (`HX-Request: true`) with a `block` gets only
that named block of the page template (jinja2-fragments).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse, Response
from jinja2_fragments.fastapi import Jinja2Blocks

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
templates = Jinja2Blocks(directory=str(TEMPLATES))  # autoescape on for .html (Starlette default)


def compact_number(x, fmt: str = "%.3f") -> str:
    """`fmt % x`, except magnitudes ≥ 1e6 or below 1e-3 (and not 0), which print as "%.4g"
    ("%+.4g" when `fmt` shows the sign): a reward of 1e308 is `1e+308`, not 309 digits."""
    if isinstance(x, int | float) and not isinstance(x, bool):
        ax = abs(x)
        if ax >= 1e6 or 0 < ax < 1e-3:
            return ("%+.4g" if fmt.startswith("%+") else "%.4g") % x
    return fmt % x


def plural(n, one: str, many: str | None = None) -> str:
    """`1 turn`, `2 turns`; `many` for irregular plurals (`branch`, `branches`)."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


templates.env.filters["compact"] = compact_number
templates.env.filters["plural"] = plural


def _chip(t):
    from app.chips import chip  # imports compact_number from here

    return chip(t)


templates.env.filters["chip"] = _chip


def split_twin(value: str) -> tuple[str, bool]:
    """`"abc.json"` → `("abc", True)`; anything else → `(value, False)`."""
    if value.endswith(".json"):
        return value[: -len(".json")], True
    return value, False


def wants_json(request: Request, suffix_json: bool) -> bool:
    if suffix_json:
        return True
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def twin_url(request: Request) -> str:
    """This page's JSON twin: the path as the client sent it (ids keep their escapes), + `.json`."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if raw else quote(request.url.path)
    return path + ".json" + (("?" + request.url.query) if request.url.query else "")


def _strict(value: Any) -> Any:
    """Replace NaN/inf with None so the JSON twin is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def respond(request: Request, template: str, data: dict | None, *, json: bool, block: str | None = None,
            alternate: str | None = None) -> Response:
    """Render `data` with `template`, or return it as JSON. 404 when `data` is None."""
    if data is None:
        raise HTTPException(status_code=404, detail="not found")
    if json:
        return JSONResponse(_strict(data))
    ctx = {"d": data, "alternate": alternate or twin_url(request)}
    if block and request.headers.get("hx-request") == "true":
        return templates.TemplateResponse(request, template, ctx, block_name=block)
    return templates.TemplateResponse(request, template, ctx)
