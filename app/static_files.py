"""Static files (static/): versioned URLs, long caching, gzip.

Every URL the pages emit for a static file is versioned (app.urls.static): vendored libraries
carry their version in the file name (`static/vendor/plotly-2.35.2.min.js`), our own files get
`?v=<content hash>` (`version`). A versioned URL is answered with `Cache-Control: max-age=31536000,
immutable` (a new build is a new URL, so a browser never asks again); anything else (an old or
missing `v`) with `no-cache` (revalidated by its ETag).

Text files (JS, CSS, SVG, JSON) are sent gzip-compressed to a client whose `Accept-Encoding`
names gzip, with `Vary: Accept-Encoding`: from `<file>.gz` beside the file when it is there and
not older (`make install` writes them: `python -m app.static_files`), else compressed once per
process and kept in memory (plotly's 4.5 MB is about 1.4 MB compressed). A `Range` request gets
the plain file, as before.
"""
from __future__ import annotations

import gzip
import hashlib
import threading
from pathlib import Path

from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers
from starlette.responses import FileResponse, Response

STATIC = Path(__file__).resolve().parent.parent / "static"
COMPRESSIBLE = (".js", ".css", ".svg", ".json", ".map", ".txt")
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
VERSIONED_DIR = "vendor/"  # file names that carry their version

_versions: dict[str, str] = {}
_gzipped: dict[tuple[str, float], bytes] = {}
_lock = threading.Lock()


def version(path: str) -> str:
    """The first 10 hex digits of the sha256 of `static/<path>` (computed once per process: the
    files change only with a new build), or "" for a file that does not exist."""
    v = _versions.get(path)
    if v is None:
        try:
            v = hashlib.sha256((STATIC / path).read_bytes()).hexdigest()[:10]
        except OSError:
            v = ""
        _versions[path] = v
    return v


def is_versioned(path: str, query: str) -> bool:
    """Whether the URL of `static/<path>` with this query string names one build of the file: a
    vendored file (its version is in its name), or `v=` equal to the file's current hash."""
    if path.startswith(VERSIONED_DIR):
        return True
    from urllib.parse import parse_qs

    v = parse_qs(query).get("v", [""])[0]
    return bool(v) and v == version(path)


def gzipped(full: Path, mtime: float) -> bytes:
    """The gzip bytes of `full`: its `.gz` sibling when that is not older, else compressed here
    once per process (level 6) and kept."""
    key = (str(full), mtime)
    data = _gzipped.get(key)
    if data is not None:
        return data
    with _lock:
        data = _gzipped.get(key)
        if data is None:
            gz = full.with_name(full.name + ".gz")
            try:
                data = gz.read_bytes() if gz.stat().st_mtime >= mtime else None
            except OSError:
                data = None
            if data is None:
                data = gzip.compress(full.read_bytes(), compresslevel=6, mtime=0)
            _gzipped[key] = data
    return data


class Static(StaticFiles):
    """StaticFiles with the caching and compression above."""

    async def get_response(self, path: str, scope) -> Response:
        response = await super().get_response(path, scope)
        rel = path.replace("\\", "/").lstrip("/")
        versioned = is_versioned(rel, scope.get("query_string", b"").decode("latin-1"))
        headers = Headers(scope=scope)
        if isinstance(response, FileResponse) and response.status_code == 200 and rel.endswith(COMPRESSIBLE) \
                and "gzip" in headers.get("accept-encoding", "").lower() and "range" not in headers:
            full = Path(response.path)
            data = gzipped(full, full.stat().st_mtime)
            kept = {k: v for k, v in response.headers.items()
                    if k.lower() in ("content-type", "etag", "last-modified")}
            response = Response(data, headers={**kept, "content-encoding": "gzip"})
        if response.status_code in (200, 304) and rel.endswith(COMPRESSIBLE):
            response.headers["vary"] = "Accept-Encoding"
        if response.status_code in (200, 304):
            response.headers["cache-control"] = IMMUTABLE if versioned else REVALIDATE
        return response


def precompress(folder: Path = STATIC) -> list[tuple[Path, int, int]]:
    """Write `<file>.gz` beside every compressible file under `folder` (level 9; done once at
    install or build time, so no server compresses them); returns (file, bytes, gzip bytes)."""
    out = []
    for full in sorted(folder.rglob("*")):
        if full.is_file() and full.suffix in COMPRESSIBLE:
            raw = full.read_bytes()
            data = gzip.compress(raw, compresslevel=9, mtime=0)
            full.with_name(full.name + ".gz").write_bytes(data)
            out.append((full, len(raw), len(data)))
    return out


if __name__ == "__main__":
    total_raw = total_gz = 0
    for f, raw, gz in precompress():
        total_raw, total_gz = total_raw + raw, total_gz + gz
    print(f"static: {total_raw:,} bytes, {total_gz:,} gzip-compressed")
