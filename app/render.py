"""Content negotiation, in one place: one page model rendered as HTML, as an htmx block, or as its
JSON twin.

A request wants JSON when its path ends in `.json` (the twin), or when its Accept header names
`application/json` explicitly and does not name `text/html` with at least the same quality.
Everything else, `Accept: */*` and browsers included, gets HTML. Pages and their errors use the
same rule (app.errors). A download (a path ending in `.csv` or `.txt`, and `/metrics`) is read by
programs (pandas, curl, a scraper), which send `*/*` or nothing: its errors are never an HTML
page but the JSON error shape, as the API's are (`is_download`). An htmx request (`HX-Request: true`) for a page with a `block` gets only
that named block of the page template (jinja2-fragments).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import Response
from jinja2_fragments.fastapi import Jinja2Blocks
from markupsafe import Markup, escape
from pydantic import BaseModel

from app import urls
from app.text import reveal_invisible
from ingest.jsonio import dumps

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
templates = Jinja2Blocks(directory=str(TEMPLATES))  # autoescape on for .html (Starlette default)
# Templates ship with the code and change only with a restart (`serve --reload` restarts): do not
# stat every template file on every render (measured under bench/load.py).
templates.env.auto_reload = False


def compile_templates() -> None:
    """Compile every page template now (Jinja caches them per process). Compiling on first use
    put ~0.3 s (rollout.html) and ~0.15 s (run.html) into the first requests each server worker
    answered, several times that under load; `create_app` calls this, so a worker pays at start."""
    for path in sorted(TEMPLATES.glob("*.html")):
        templates.env.get_template(path.name)


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


def _finalize(value: Any) -> Any:
    """Every value a template prints: trace text shows its bidirectional controls and invisible
    characters (app.text.reveal_invisible). Markup (our own, already escaped) passes unchanged;
    the result is still escaped by autoescape, so no trace text is ever marked safe."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return reveal_invisible(value)
    return value


def verbatim(value: Any) -> Markup:
    """Escaped exactly as autoescape would, without revealing invisible characters: for a form
    field's `value`, which must send back what it was given (`{{ d.filters.task | verbatim }}`)."""
    return escape(value)


templates.env.finalize = _finalize  # before any template compiles: Jinja bakes finalize into the code
templates.env.filters["verbatim"] = verbatim
templates.env.filters["compact"] = compact_number
templates.env.filters["plural"] = plural
templates.env.globals["urls"] = urls


def _chip(t):
    from app.chips import chip  # imports compact_number from here

    return chip(t)


templates.env.filters["chip"] = _chip


def split_twin(value: str) -> tuple[str, bool]:
    """`"abc.json"` → `("abc", True)`; anything else → `(value, False)`."""
    if value.endswith(".json"):
        return value[: -len(".json")], True
    return value, False


def _accept_quality(accept: str) -> dict[str, float]:
    """Media type → quality, for the types listed in an Accept header (`q` defaults to 1)."""
    out: dict[str, float] = {}
    for item in accept.split(","):
        media, *params = (p.strip() for p in item.split(";"))
        q = 1.0
        for p in params:
            k, _, v = p.partition("=")
            if k.strip().lower() == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
        if media:
            out[media.lower()] = max(q, out.get(media.lower(), 0.0))
    return out


def accepts_json(request: Request) -> bool:
    """True when the Accept header asks for JSON over HTML (see the module docstring)."""
    quality = _accept_quality(request.headers.get("accept", ""))
    js = quality.get("application/json", 0.0)
    return js > 0 and quality.get("text/html", 0.0) < js


def wants_json(request: Request, suffix_json: bool | None = None) -> bool:
    """Whether to answer with JSON. `suffix_json` says whether the route saw the `.json` twin
    suffix (routes with ids decide it themselves; default: the path ends in `.json`)."""
    if suffix_json is None:
        suffix_json = request.url.path.endswith(".json") or request.url.path.startswith("/api/")
    return suffix_json or accepts_json(request)


DOWNLOAD_SUFFIXES = (".csv", ".txt")  # data files served beside the pages: rollouts, charts, task changes, a message


def is_download(request: Request) -> bool:
    """Whether the request asks for a data file rather than a page (`.csv`, `.txt`, `/metrics`):
    its errors answer in the JSON error shape whatever the Accept header says."""
    path = request.url.path
    return path.endswith(DOWNLOAD_SUFFIXES) or path == "/metrics"


def json_body(data: BaseModel | dict) -> bytes:
    """A page model (or plain data) as strict JSON bytes: NaN/inf → null, integers past 64 bits
    with every digit (`ingest.jsonio.dumps`: orjson, several times faster than walking the data
    in Python and encoding with the standard library, measured on the rollout twin)."""
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    return dumps(data)


def respond(request: Request, template: str, data: BaseModel | None, *, json: bool, block: str | None = None,
            alternate: str | None = None) -> Response:
    """Render page model `data` with `template`, or return it as JSON. 404 when `data` is None."""
    if data is None:
        raise HTTPException(status_code=404, detail="not found")
    if json:
        return Response(json_body(data), media_type="application/json")
    ctx = {"d": data, "alternate": alternate or urls.twin(request)}
    if block and request.headers.get("hx-request") == "true":
        return templates.TemplateResponse(request, template, ctx, block_name=block)
    return templates.TemplateResponse(request, template, ctx)


def error_page(request: Request, status: int, message: str) -> Response:
    """The HTML error page."""
    return templates.TemplateResponse(request, "error.html", {"status": status, "detail": message, "alternate": None},
                                      status_code=status)
