"""The collector side: hand rollouts to Rollscope from a training loop.

Standard library and httpx only (no Rollscope, no Tunix needed), so a trainer can import it
without the service's dependencies::

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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

__all__ = ["RolloutWriter", "rollout_url", "to_record"]

DEFAULT_BASE = "http://127.0.0.1:8000"


def rollout_url(base: str, run: str, rollout_id: str, *, branch: int | None = None, node: int | None = None,
                token: str | None = None, attempt: int | None = None) -> str:
    """The stable URL of a rollout's page: `{base}/runs/{run}/rollouts/{id}` (ids percent-encoded
    as one path segment, `/` included), with `?branch=`, `?attempt=`, `?token=` and `#node-N`."""
    params = {k: v for k, v in (("attempt", attempt or None), ("branch", branch), ("token", token)) if v is not None}
    url = f"{base.rstrip('/')}/runs/{quote(str(run), safe='')}/rollouts/{quote(str(rollout_id), safe='')}"
    return url + (f"?{urlencode(params)}" if params else "") + (f"#node-{node}" if node is not None else "")


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
    if isinstance(rec, dict) and (("steps" in rec and ("status" in rec or "task" in rec)) or "conversation_tokens" in rec
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
        self.base_url = (base_url or (str(target) if self.http else None) or os.environ.get("ROLLSCOPE_URL")
                         or DEFAULT_BASE).rstrip("/")
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
            out.append(rollout_url(self.base_url, self.run, rid, attempt=rec.get("attempt") if fmt == "native" else None))
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
