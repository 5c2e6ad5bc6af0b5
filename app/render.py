"""Content negotiation, in one place: one page model rendered as HTML, as an htmx block, as its
JSON twin, or as a download, chosen by the path's suffix (the RENDERERS table, datasette's
renderer registry is the model) or the Accept header.

A request wants JSON when its path ends in `.json` (the twin), or when its Accept header names
`application/json` explicitly and does not name `text/html` with at least the same quality.
Everything else, `Accept: */*` and browsers included, gets HTML. Pages and their errors use the
same rule (app.errors). A download (a suffix RENDERERS marks so: `.csv`, `.txt`, `.npz`; and
`/metrics`) is read by programs (pandas, curl, a scraper), which send `*/*` or nothing: its
errors are never an HTML page but the JSON error shape, as the API's are (`is_download`). An
htmx request (`HX-Request: true`) for a page with a `block` gets only that named block of the
page template (jinja2-fragments).

A route declares once which suffixes it offers (`page_route`, `split_suffix` for a suffix on an
id segment); `by_id` decides whether a trailing `.json` is the twin or part of the id.
"""
from __future__ import annotations

import csv
import io
import shlex
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response, StreamingResponse
from jinja2_fragments.fastapi import Jinja2Blocks
from markupsafe import Markup, escape
from pydantic import BaseModel

from app import urls
from app.text import reveal_invisible
from ingest.jsonio import dumps
from ingest.stats import gradient_tokens, own_no_gradient
from ingest.words import plural

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


def _utc(value: Any) -> datetime | None:
    """A datetime, or an ISO 8601 / RFC 3339 string (`...Z` included), as an aware UTC datetime;
    None for anything else (a value that does not parse is printed as it is)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)


def relative_time(value: Any, now: datetime | None = None) -> str:
    """How long ago `value` (a datetime or RFC 3339 string) was, for a person: `just now`,
    `42 s ago`, `3 min ago`, `5 h ago`, `12 d ago`; past 60 days the date (`2026-11-30`); a
    time ahead of the server's clock `in 3 min`. The exact time goes in `ago`'s title."""
    dt = _utc(value)
    if dt is None:
        return "" if value is None else str(value)
    seconds = ((now or datetime.now(UTC)) - dt).total_seconds()
    ahead, s = seconds < 0, abs(seconds)
    if s < 5:
        return "just now"
    if s >= 60 * 86400:
        return dt.strftime("%Y-%m-%d")
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if s >= size:
            n = int(s // size)
            return f"in {n} {unit}" if ahead else f"{n} {unit} ago"
    return "just now"  # unreachable


def exact_time(value: Any) -> str:
    """`value` to the second in UTC (`2026-11-30 13:44:22 UTC`), never with microseconds."""
    dt = _utc(value)
    return dt.strftime("%Y-%m-%d %H:%M:%S UTC") if dt else ("" if value is None else str(value))


def ago(value: Any) -> Markup:
    """The one way a page prints a time: `<time datetime="<RFC 3339 Z>" title="<exact UTC>">3 min
    ago</time>` (app.js refreshes the words as the page stays open); `–` for None. Every part is
    escaped."""
    if value is None:
        return Markup('<span class="missing">–</span>')
    dt = _utc(value)
    if dt is None:
        return escape(str(value))
    stamp = dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    return Markup('<time datetime="{}" title="{}">{}</time>').format(stamp, exact_time(dt), relative_time(dt))


def significant(x, digits: int = 4, sign: bool = False) -> str:
    """A reward, advantage or mean as it means something: `digits` significant digits, trailing
    zeros dropped (`0.8406250000000001` → `0.8406`, `-2.0000000000000004` → `-2`, 1/3 →
    `0.3333`); 1,000 and over as a whole number with separators (`12,346`), 1e6 and over or below
    1e-4 in scientific form (`1e+308`). `sign` shows `+` on positives (advantages). Not a number
    (None, text) is printed as it is."""
    if not isinstance(x, int | float) or isinstance(x, bool):
        return "" if x is None else str(x)
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    plus = "+" if sign else ""
    ax = abs(x)
    if 1000 <= ax < 1e6:
        return f"{x:{plus},.0f}"
    text = f"{x:{plus}.{digits}g}"
    return "0" if text in ("-0", "+0") else text


def percent(x, digits: int = 1) -> str:
    """A share or rate (0..1) as a percentage to 0.1 % (`0.8406` → `84.1%`); None → `–`."""
    if x is None:
        return "–"
    return f"{100 * x:.{digits}f}%"


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
templates.env.filters["ago"] = ago
templates.env.filters["gradient_tokens"] = gradient_tokens  # the "trained" count of a list row and a rollout page
templates.env.filters["no_gradient"] = own_no_gradient
templates.env.filters["sig"] = significant
templates.env.filters["pct"] = percent
templates.env.filters["exact_time"] = exact_time
templates.env.filters["shell"] = shlex.quote  # a word of a command shown to copy (a run id: `--run {{ id | shell }}`)
templates.env.globals["urls"] = urls


def _chip(t):
    from app.chips import chip  # imports compact_number from here

    return chip(t)


templates.env.filters["chip"] = _chip


@dataclass(frozen=True)
class Renderer:
    """What a path suffix asks for: its media type, and whether it is a download (a data file
    read by programs: its errors answer in the JSON error shape, see `is_download`)."""

    suffix: str
    media_type: str
    download: bool


# suffix → renderer: every suffix a page or data file may end in (a page offers some of them)
RENDERERS: dict[str, Renderer] = {r.suffix: r for r in (
    Renderer(".json", "application/json", download=False),  # the JSON twin of a page
    Renderer(".csv", "text/csv; charset=utf-8", download=True),  # rollouts, charts, task changes
    Renderer(".txt", "text/plain; charset=utf-8", download=True),  # one message's full text
    Renderer(".npz", "application/x-ndarray", download=True),  # token arrays (the API: by Accept)
)}
DOWNLOAD_SUFFIXES = tuple(r.suffix for r in RENDERERS.values() if r.download)


def split_suffix(value: str, offered: tuple[str, ...] = (".json",)) -> tuple[str, str]:
    """`"reward.csv"` → `("reward", ".csv")` for a suffix this page offers; else `(value, "")`.
    A download suffix the page does not offer is a 404 saying so, not a bad parameter
    (`/steps/3.csv` is no step "3.csv")."""
    for suffix in offered:
        if value.endswith(suffix):
            return value[: -len(suffix)], suffix
    for suffix in DOWNLOAD_SUFFIXES:
        if value.endswith(suffix):
            from app.errors import ApiError  # app.errors renders its pages with this module

            raise ApiError(404, f"this page has no {suffix[1:].upper()} download (its data: the page's .json twin)")
    return value, ""


def suffix_of(request: Request, offered: tuple[str, ...]) -> str:
    """The suffix of the request's path among `offered` ("" for none)."""
    return split_suffix(request.url.path, offered)[1]


def page_route(router: APIRouter, path: str, offers: tuple[str, ...] = (".json",), **kwargs):
    """Register an endpoint at `path` and at `path` + each suffix it offers (one declaration
    instead of one decorator per suffix); the endpoint reads the suffix with `suffix_of`."""
    for suffix in offers:
        if suffix not in RENDERERS:
            raise ValueError(f"{path}: no renderer for {suffix!r}")

    def register(endpoint):
        for suffix in ("", *offers):
            router.get(path + suffix, **kwargs)(endpoint)
        return endpoint

    return register


T = TypeVar("T")


def by_id(segment: str, accept_json: bool, build: Callable[[str, bool], T | None]) -> tuple[T | None, bool]:
    """The page of the id in a path's last segment, as routed (`%2F`, `%2E`, `%25` still
    encoded, app.main.routing_path), and whether it is the JSON twin.

    A trailing bare `.json` asks for the twin; an id's own trailing `.json` is written
    `%2Ejson` in links (app.urls.q), so `/rollouts/a%2Ejson` is the page of `a.json` even where
    a rollout `a` exists. A hand-typed `/rollouts/a.json` whose stripped id has no page
    (`build(stripped, True)` is None) is still the page of `a.json`. `build(id, json)` gets the
    unquoted id and returns None for an id that does not exist; nothing is looked up twice on a
    hit."""
    if segment.endswith(".json"):
        got = build(unquote(segment[: -len(".json")]), True)
        if got is not None:
            return got, True
    return build(unquote(segment), accept_json), accept_json


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
            alternate: str | None = None, missing: Callable[[], Exception] | None = None) -> Response:
    """Render page model `data` with `template`, or return it as JSON. 404 when `data` is None:
    `missing()` (app.errors.not_found, naming what is missing), else a bare "not found"."""
    if data is None:
        raise missing() if missing else HTTPException(status_code=404, detail="not found")
    if json:
        return Response(json_body(data), media_type="application/json")
    ctx = {"d": data, "alternate": alternate or urls.twin(request)}
    if block and request.headers.get("hx-request") == "true":
        return templates.TemplateResponse(request, template, ctx, block_name=block)
    return templates.TemplateResponse(request, template, ctx)


def csv_cell(v):
    """Spreadsheet-safe: text that a spreadsheet would run as a formula is prefixed with '."""
    if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + v
    return "" if v is None else v


def csv_lines(columns: list[str], rows: Iterable[dict]) -> Iterator[str]:
    """The header, then one formula-safe CSV line per row (its values of `columns`)."""
    buf = io.StringIO()
    out = csv.writer(buf)

    def line(values) -> str:
        buf.seek(0)
        buf.truncate()
        out.writerow([csv_cell(v) for v in values])
        return buf.getvalue()

    yield line(columns)
    for r in rows:
        yield line([r.get(c) for c in columns])


def csv_response(columns: list[str], rows: Iterable[dict], filename: str) -> StreamingResponse:
    """`rows` (dicts, or a generator of them: streamed) as a CSV download named `filename`
    (reduced to safe characters), header `columns`: the one CSV writer of the pages."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in filename)[:120]
    return StreamingResponse(csv_lines(columns, rows), media_type=RENDERERS[".csv"].media_type,
                             headers={"Content-Disposition": f'attachment; filename="{safe}"'})


def error_page(request: Request, status: int, message: str, back: tuple[str, str] | None = None) -> Response:
    """The HTML error page: the status, what went wrong (a 404 names what is missing), and a link
    back (`back`: label and URL; default the runs list)."""
    label, url = back or ("All runs", urls.runs())
    return templates.TemplateResponse(request, "error.html", {"status": status, "detail": message, "alternate": None,
                                                              "back_label": label, "back_url": url},
                                      status_code=status)
