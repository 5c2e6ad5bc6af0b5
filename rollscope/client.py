"""Rollscope from Python: the collector's writer and the operators' client, in one package.

Standard library and httpx only (no Rollscope service, no Tunix needed), so a trainer or a
script imports it without the service's dependencies.

**Collector side**, `RolloutWriter`: hand rollouts to Rollscope from a training loop::

    from rollscope.client import RolloutWriter
    with RolloutWriter("/shared/spool", run="grpo-7") as w:        # or "http://host:8000", token=...
        url = w.write(trajectory)                                  # Tunix Trajectory, dict, or native
        print("rollout:", url)

Spool mode appends whole lines to `<spool>/<run>/<name>.<format>.jsonl` with one `write(2)` per
line on an `O_APPEND` descriptor, flushed: a crashed trainer leaves at most a torn last line,
which the worker reports and skips (and a writer reopening the file first ends that line, so the
next record is not glued to it). HTTP mode posts gzip NDJSON to `POST /api/v1/ingest` with a
write token and retries 429 / 503 / connection errors with backoff, honouring `Retry-After`;
a record the server rejects raises ValueError: nothing is dropped silently.

Accepted objects, by duck typing: native rollouts (`{"schema": "rollscope/1", ...}` or anything
with `to_json_dict()`), and Tunix's `Trajectory` / `TrajectoryItem` objects or the dicts its
`TrajectoryCollectEngine` returns (Trajectory, Token mode, TrajectoryItem), sent as Tunix JSON and
read by the worker's Tunix reader (ingest/formats/tunix.py). Every write returns the rollout's
stable URL (`rollout_url`).

**Operators' side**, `Client(url, token)`: the REST API (/api/v1, docs/api.md), typed with the
wire shapes of rollscope/schemas.py::

    from rollscope.client import Client
    with Client("http://rollscope:8000", token="rs_...") as rs:
        for r in rs.rollouts("grpo-7", step=120, ending="error"):
            print(r["rollout_id"], r["reward"], r["url"])
        rs.export("grpo-7", "grpo-7.parquet", format="parquet", step=120)

Lists are iterators over keyset pages (`next`), so a long listing costs one request per page and
sees each rollout once even while the server ingests. `export` streams the body to a file.
Errors raise `ApiError` with the server's `code`, `message` and `field`.
"""
from __future__ import annotations

import dataclasses
import enum
import gzip
import json
import os
import random
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from rollscope.paths import segment
from rollscope.schemas import BranchTokens, Rollout, RolloutRow, RunRow

if TYPE_CHECKING:
    import httpx

__all__ = ["ApiError", "BranchTokens", "Client", "ExportBrokenOff", "Rollout", "RolloutRow", "RolloutWriter", "RunRow",
           "rollout_url", "server_url", "to_record"]

DEFAULT_BASE = "http://127.0.0.1:8000"


def server_url(base: str | None = None) -> str:
    """Where Rollscope is served: `base`, else the `ROLLSCOPE_URL` environment variable, else
    http://127.0.0.1:8000 (without a trailing `/`). A value that is not an http(s) URL with a host
    is a ValueError naming where it came from (`ROLLSCOPE_URL` or `base`)."""
    from urllib.parse import urlsplit

    source, url = ("base", base) if base else ("ROLLSCOPE_URL", os.environ.get("ROLLSCOPE_URL") or DEFAULT_BASE)
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{source}={url!r} is not an http(s) URL (e.g. http://127.0.0.1:8000)")
    return url.strip().rstrip("/")


def rollout_url(*args: str | None, base: str | None = None, branch: int | None = None, node: int | None = None,
                token: str | None = None, attempt: int | None = None, at: int | None = None) -> str:
    """The stable URL of a rollout's page: `rollout_url(run, rollout_id)` (or, as before,
    `rollout_url(base, run, rollout_id)`) → `{base}/runs/{run}/rollouts/{id}` (ids percent-encoded
    as one path segment, `/` included; `base` None: `ROLLSCOPE_URL`, see `server_url`), with
    `?branch=`, `?attempt=`, `?token=` (a read token) and the page's anchors (docs/views.md, "Deep
    links"): `#m-N` for message `node` N, else `#t-N` for token `at` (offset N of the branch's
    token sequence)."""
    if len(args) == 3:
        if base is not None:
            raise TypeError("rollout_url: base given twice (positionally and as base=)")
        base, run, rollout_id = args
    elif len(args) == 2:
        run, rollout_id = args
    else:
        raise TypeError(f"rollout_url takes (run, rollout_id) or (base, run, rollout_id), got {len(args)} arguments")
    params = {k: v for k, v in (("attempt", attempt or None), ("branch", branch), ("token", token)) if v is not None}
    url = f"{server_url(base)}/runs/{segment(run)}/rollouts/{segment(rollout_id)}"
    anchor = f"#m-{int(node)}" if node is not None else (f"#t-{int(at)}" if at is not None else "")
    return url + (f"?{urlencode(params)}" if params else "") + anchor


def _plain(obj: Any) -> Any:
    """JSON-ready copy of dataclasses, enums, numpy values and plain containers."""
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    if isinstance(obj, enum.Enum):
        return obj.name
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy / jax arrays and scalars
        return obj.tolist()
    if hasattr(obj, "__dict__"):
        return {k: _plain(v) for k, v in vars(obj).items() if not k.startswith("_")}
    return str(obj)


def to_record(obj: Any, run: str | None = None) -> tuple[str, dict]:
    """(format, JSON record) for one rollout object. Raises TypeError for anything else."""
    if hasattr(obj, "to_json_dict"):
        obj = obj.to_json_dict()
    if isinstance(obj, Mapping) and str(obj.get("schema", "")).startswith("rollscope/"):
        rec = _plain(obj)
        if run is not None:
            rec["run"] = {**(rec.get("run") or {}), "id": run}
        return "native", rec
    rec = _plain(obj)
    if isinstance(rec, dict) and (("steps" in rec and ("status" in rec or "task" in rec))
                                  or "conversation_tokens" in rec
                                  or ("traj" in rec and ("pair_index" in rec or "group_id" in rec))):
        return "tunix", rec
    raise TypeError(f"not a rollout: {type(obj).__name__} (expected a native rollout, a Tunix Trajectory, "
                    "TrajectoryItem or collect-engine dict)")


class RolloutWriter:
    """Writes rollouts of one run to a spool folder or a Rollscope server; see the module doc.

    `target`: a folder (spool mode) or an `http(s)://` URL (HTTP mode). `base_url`: where the
    pages are served (for the URLs returned; default: the target URL, else `ROLLSCOPE_URL`, else
    http://127.0.0.1:8000). `token`: a write token for HTTP mode (default `ROLLSCOPE_TOKEN`).
    `name`: the spool file's name (default host-pid).
    """

    def __init__(self, target: str | os.PathLike, *, run: str, base_url: str | None = None,
                 token: str | None = None, name: str | None = None, max_retries: int = 10,
                 timeout: float = 60.0):
        self.run = run
        self.http = str(target).startswith(("http://", "https://"))
        self.base_url = server_url(base_url or (str(target) if self.http else None))
        self.token = token or os.environ.get("ROLLSCOPE_TOKEN")
        self.max_retries, self.timeout = max_retries, timeout
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self._files: dict[str, tuple[int, int]] = {}  # format → (fd, lines written so far)
        self._client = None
        if self.http:
            import httpx

            self._client = httpx.Client(base_url=str(target).rstrip("/"), timeout=timeout)
        else:
            self.folder = Path(target) / run
            self.folder.mkdir(parents=True, exist_ok=True)

    # --- spool mode ------------------------------------------------------------------------------

    def _fd(self, fmt: str) -> tuple[int, int]:
        if fmt not in self._files:
            path = self.folder / f"{self.name}.{fmt}.jsonl"
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            lines = 0
            if os.fstat(fd).st_size:
                with path.open("rb") as f:
                    data = f.read()
                lines = data.count(b"\n")
                if not data.endswith(b"\n"):  # a torn line from a crash: end it, alone
                    os.write(fd, b"\n")
                    lines += 1
            self._files[fmt] = (fd, lines)
        return self._files[fmt]

    def _append(self, fmt: str, rec: dict) -> int:
        """Append one line; returns its line number (1-based)."""
        fd, lines = self._fd(fmt)
        os.write(fd, json.dumps(rec, separators=(",", ":"), allow_nan=False).encode() + b"\n")
        self._files[fmt] = (fd, lines + 1)
        return lines + 1

    # --- both ------------------------------------------------------------------------------------

    def write(self, rollout: Any) -> str:
        """Hand one rollout over; returns its page URL."""
        return self.write_many([rollout])[0]

    def write_many(self, rollouts: Iterable[Any]) -> list[str]:
        """Hand several rollouts over (one request in HTTP mode); returns their URLs in order."""
        records = [to_record(r, self.run) for r in rollouts]
        if self.http:
            urls: list[str] = []
            for fmt in dict.fromkeys(f for f, _ in records):
                urls += self._post(fmt, [rec for f, rec in records if f == fmt])
            return urls
        out = []
        for fmt, rec in records:
            line = self._append(fmt, rec)
            # the Tunix reader's id: the file's path under the spool (ReadContext.source_key), its line
            rid = rec["id"] if fmt == "native" else f"{self.run}/{self.name}.{fmt}#L{line}"
            out.append(rollout_url(self.base_url, self.run, rid,
                                   attempt=rec.get("attempt") if fmt == "native" else None))
        return out

    def _post(self, fmt: str, records: list[dict]) -> list[str]:
        body = gzip.compress(b"".join(json.dumps(r, separators=(",", ":"), allow_nan=False).encode() + b"\n"
                                      for r in records))
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/x-ndjson"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        params = {"run": self.run, "format": fmt}
        delay = 0.5
        for attempt in range(self.max_retries + 1):
            try:
                resp = self._client.post("/api/v1/ingest", params=params, content=body, headers=headers)  # type: ignore[union-attr]
            except Exception as exc:  # noqa: BLE001 - connection refused, reset, timeout: retried
                if attempt == self.max_retries:
                    raise ConnectionError(f"Rollscope at {self.base_url} unreachable: {exc}") from exc
                time.sleep(delay * (1 + random.random() * 0.25))
                delay = min(delay * 2, 30.0)
                continue
            if resp.status_code in (429, 503) and attempt < self.max_retries:
                wait = float(resp.headers.get("Retry-After") or delay)
                time.sleep(max(wait, delay) * (1 + random.random() * 0.25))
                delay = min(delay * 2, 30.0)
                continue
            if resp.status_code != 200:
                raise RuntimeError(f"Rollscope refused the rollouts: HTTP {resp.status_code}: {resp.text[:500]}")
            results = resp.json()["results"]
            bad = [r for r in results if r["status"] == "rejected"]
            if bad:
                raise ValueError("rejected by Rollscope: " + "; ".join(
                    f"line {r.get('line')}: {r.get('field') or ''} {r.get('error')}".strip() for r in bad))
            return [r["url"] for r in results]
        raise RuntimeError("unreachable")

    def close(self) -> None:
        for fd, _ in self._files.values():
            os.close(fd)
        self._files.clear()
        if self._client is not None:
            self._client.close()

    def __enter__(self) -> "RolloutWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- the operators' client ---------------------------------------------------------------------

class ApiError(Exception):
    """An error answer: HTTP `status`, and the body's `code`, `message` and `field`."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        super().__init__(f"{status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status, self.code, self.message, self.field = status, code, message, field


_seg = segment  # an id in an API path, written as the app's links write it


def _params(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


class ExportBrokenOff(Exception):
    """The server began an export and broke it off before its end (a stored rollout it could
    not read back: its log names the rollout). Nothing is written to the file."""


class Client:
    """A Rollscope server at `url` (e.g. `http://127.0.0.1:8000`), with an API token when the
    call needs one (`read` where reading is locked, `write` for labels and notes, `admin` to
    delete a run). `transport`: an httpx transport (tests, proxies)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None):
        import httpx

        headers = {"Accept": "application/json", "User-Agent": "rollscope-client/1"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=url.rstrip("/") + "/api/v1", headers=headers, timeout=timeout,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- plumbing ---

    @staticmethod
    def _raise_for(r: httpx.Response) -> None:
        if r.status_code < 400:
            return
        try:
            err = r.json()["error"]
            raise ApiError(r.status_code, err.get("code", "error"), err.get("message", r.text), err.get("field"))
        except (ValueError, KeyError, TypeError):
            raise ApiError(r.status_code, "error", r.text[:500]) from None

    def _request(self, method: str, path: str, **kw) -> httpx.Response:
        r = self._http.request(method, path, **kw)
        self._raise_for(r)
        return r

    def _get(self, path: str, **params) -> Any:
        return self._request("GET", path, params=_params(params)).json()

    def _pages(self, path: str, params: dict) -> Iterator[dict]:
        params = _params(params)
        while True:
            page = self._request("GET", path, params=params).json()
            yield from page["items"]
            if not page.get("next"):
                return
            params = {**params, "after": page["next"]}

    # --- reads ---

    def runs(self) -> list[RunRow]:
        """Every run with its counts and mean rewards."""
        return self._get("/runs")["items"]

    def run(self, run: str) -> dict[str, Any]:
        """One run: header, endings, totals."""
        return self._get(f"/runs/{_seg(run)}")

    def steps(self, run: str) -> list[dict[str, Any]]:
        """The run's training steps with their rollups."""
        return self._get(f"/runs/{_seg(run)}/steps")["items"]

    def metrics(self, run: str) -> dict[str, Any]:
        """Per-step metrics as columns (`step`, `mean_reward`, `rates`, ...)."""
        return self._get(f"/runs/{_seg(run)}/metrics")

    def rollouts(self, run: str, *, fields: list[str] | None = None, page_size: int | None = None,
                 **filters: Any) -> Iterator[RolloutRow]:
        """Every rollout of `run` matching `filters` (`step`, `ending`, `group`, `task`,
        `reward_min`, `reward_max`, `flag`, `label`), page after page."""
        params = {**filters, "limit": page_size, "fields": ",".join(fields) if fields else None}
        return self._pages(f"/runs/{_seg(run)}/rollouts", params)  # type: ignore[return-value]

    def rollout(self, run: str, rollout_id: str, *, attempt: int | None = None) -> Rollout:
        """One rollout (the latest attempt unless `attempt`)."""
        return self._get(f"/runs/{_seg(run)}/rollouts/{_seg(rollout_id)}", attempt=attempt)

    def messages(self, run: str, rollout_id: str, *, branch: int = 0, attempt: int | None = None) -> Iterator[dict]:
        """The messages of one branch, root first."""
        offset: int | None = 0
        while offset is not None:
            page = self._get(f"/runs/{_seg(run)}/rollouts/{_seg(rollout_id)}/branches/{branch}/messages",
                             attempt=attempt, offset=offset)
            yield from page["items"]
            offset = page["next_offset"]

    def tokens(self, run: str, rollout_id: str, *, branch: int = 0, attempt: int | None = None) -> BranchTokens:
        """A branch's token arrays (ids, loss mask, behaviour logprobs, advantages) as lists."""
        return self._get(f"/runs/{_seg(run)}/rollouts/{_seg(rollout_id)}/branches/{branch}/tokens", attempt=attempt)

    def tokens_npz(self, run: str, rollout_id: str, *, branch: int = 0, attempt: int | None = None) -> bytes:
        """The same arrays as a NumPy .npz archive (`numpy.load(io.BytesIO(data))`), float32 as stored."""
        return self._request("GET", f"/runs/{_seg(run)}/rollouts/{_seg(rollout_id)}/branches/{branch}/tokens",
                             params=_params({"attempt": attempt}), headers={"Accept": "application/x-ndarray"}).content

    def group(self, run: str, group_id: str) -> dict[str, Any]:
        """A group with both baselines and each member's advantage."""
        return self._get(f"/runs/{_seg(run)}/groups/{_seg(group_id)}")

    def findings(self, run: str, *, kind: str | None = None, severity: str | None = None) -> Iterator[dict]:
        """Every finding of the run's trace checks, page after page."""
        return self._pages(f"/runs/{_seg(run)}/findings", {"kind": kind, "severity": severity})

    def export(self, run: str, out: str | os.PathLike, *, format: str = "native", **filters: Any) -> int:  # noqa: A002
        """Stream the run's export into the file `out`, chunk by chunk as it arrives; returns the
        bytes written. `format`: native, verifiers, atif, samples, parquet, otlp or nemo_gym (what
        `rollscope export` writes; docs/formats.md); `filters` as for `rollouts`. On an error
        answer (an unknown format is a 422) the file is not created (ApiError); an export the
        server breaks off midway raises ExportBrokenOff and leaves no file either (the body is
        written beside `out` and moved into place once whole; an existing `out` stays as it was)."""
        import httpx

        path = Path(out)
        partial = path.with_name(f".{path.name}.partial")
        try:
            with self._http.stream("GET", f"/runs/{_seg(run)}/export",
                                   params=_params({**filters, "format": format}), headers={"Accept": "*/*"}) as r:
                if r.status_code >= 400:
                    r.read()
                    self._raise_for(r)
                n = 0
                with partial.open("wb") as f:
                    try:
                        for chunk in r.iter_bytes():
                            n += f.write(chunk)
                    except httpx.RemoteProtocolError as exc:  # the body never ended
                        raise ExportBrokenOff(
                            f"the export of run {run!r} broke off after {n} bytes: the server met an error (its "
                            f"log names the rollout); nothing written to {path} ({exc})") from None
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
        return n

    # --- writes (token needed) ---

    def label(self, run: str, rollout_id: str, label: str) -> None:
        """Label a rollout (`write` token)."""
        self._request("PUT", f"/runs/{_seg(run)}/rollouts/{_seg(rollout_id)}/labels/{_seg(label)}")

    def unlabel(self, run: str, rollout_id: str, label: str) -> None:
        """Remove this token's label from a rollout (`write` token)."""
        self._request("DELETE", f"/runs/{_seg(run)}/rollouts/{_seg(rollout_id)}/labels/{_seg(label)}")

    def note(self, run: str, text: str, *, rollout_id: str | None = None, step: int | None = None) -> None:
        """Write this token's note on a rollout or on a training step (`write` token)."""
        if (rollout_id is None) == (step is None):
            raise ValueError("give rollout_id or step")
        path = f"/runs/{_seg(run)}/rollouts/{_seg(rollout_id)}/notes" if rollout_id is not None else \
            f"/runs/{_seg(run)}/steps/{step}/notes"
        self._request("PUT", path, json={"text": text})

    def delete_run(self, run: str) -> None:
        """Delete a run and everything of it (`admin` token)."""
        self._request("DELETE", f"/runs/{_seg(run)}")
