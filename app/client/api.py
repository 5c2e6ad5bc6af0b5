"""`Client(url, token)`: the operators' REST API (/api/v1) from Python, typed, on httpx.

    from app.client import Client
    rs = Client("http://rollscope:8000", token="rs_...")
    for r in rs.rollouts("grpo-7", step=120, ending="error"):
        print(r["rollout_id"], r["reward"], r["url"])

Lists are iterators over keyset pages (`next`), so a long listing costs one request per page and
sees each rollout once even while the server ingests. Errors raise `ApiError` with the server's
`code`, `message` and `field`. Dependencies: the standard library and httpx (a trainer imports it).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypedDict
from urllib.parse import quote

import httpx


class ApiError(Exception):
    """An error answer: HTTP `status`, and the body's `code`, `message` and `field`."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        super().__init__(f"{status} {code}: {message}" + (f" (field {field})" if field else ""))
        self.status, self.code, self.message, self.field = status, code, message, field


class Run(TypedDict):
    id: str
    name: str | None
    type: str
    rollouts: int
    first_step: int | None
    last_step: int | None
    steps: int
    mean_reward: float | None
    mean_reward_no_errors: float | None
    endings: dict[str, int]
    tokenizer: str | None
    created_at: str | None
    url: str


class RolloutRow(TypedDict, total=False):
    """A rollouts list item; with `fields=` only the fields asked for."""

    run_id: str
    rollout_id: str
    attempt: int
    step: int | None
    group_id: str | None
    ending: str
    reward: float | None
    reward_status: str
    n_turns: int
    n_tool_calls: int
    n_tokens: int
    n_trained_tokens: int
    flags: list[str] | None
    labels: list[str]
    url: str


class Rollout(TypedDict):
    """One rollout: summary, attempts, envelope, findings, message graph and branches."""

    rollout: dict[str, Any]
    attempts: list[dict[str, Any]]
    envelope: dict[str, Any]
    findings: list[dict[str, Any]]
    graph: list[dict[str, Any]]
    branches: list[list[int]]


class BranchTokens(TypedDict):
    branch: int
    nodes: list[int]
    node: list[int]
    token_ids: list[int]
    mask: list[bool]
    logprobs: list[float | None]
    advantages: list[float | None]


def _seg(value: str | int) -> str:
    return quote(str(value), safe="")


class Client:
    """A Rollscope server at `url` (e.g. `http://127.0.0.1:8000`), with an API token when the
    call needs one (`write` for labels and notes, `admin` to delete a run)."""

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None):
        headers = {"Accept": "application/json", "User-Agent": "rollscope-client/1"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=url.rstrip("/") + "/api/v1", headers=headers, timeout=timeout,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- plumbing ---

    def _request(self, method: str, path: str, **kw) -> httpx.Response:
        r = self._http.request(method, path, **kw)
        if r.status_code >= 400:
            try:
                err = r.json()["error"]
                raise ApiError(r.status_code, err.get("code", "error"), err.get("message", r.text), err.get("field"))
            except (ValueError, KeyError, TypeError):
                raise ApiError(r.status_code, "error", r.text[:500]) from None
        return r

    def _get(self, path: str, **params) -> Any:
        return self._request("GET", path, params={k: v for k, v in params.items() if v is not None}).json()

    def _pages(self, path: str, params: dict) -> Iterator[dict]:
        params = {k: v for k, v in params.items() if v is not None}
        while True:
            page = self._request("GET", path, params=params).json()
            yield from page["items"]
            if not page.get("next"):
                return
            params = {**params, "after": page["next"]}

    # --- reads ---

    def runs(self) -> list[Run]:
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
        params = {"attempt": attempt} if attempt is not None else {}
        return self._request("GET", f"/runs/{_seg(run)}/rollouts/{_seg(rollout_id)}/branches/{branch}/tokens",
                             params=params, headers={"Accept": "application/x-ndarray"}).content

    def group(self, run: str, group_id: str) -> dict[str, Any]:
        """A group with both baselines and each member's advantage."""
        return self._get(f"/runs/{_seg(run)}/groups/{_seg(group_id)}")

    def findings(self, run: str, *, kind: str | None = None, severity: str | None = None) -> Iterator[dict]:
        """Every finding of the run's trace checks, page after page."""
        return self._pages(f"/runs/{_seg(run)}/findings", {"kind": kind, "severity": severity})

    # --- writes (token needed) ---

    def label(self, run: str, rollout_id: str, label: str) -> None:
        """Label a rollout (`write` token)."""
        self._request("PUT", f"/runs/{_seg(run)}/rollouts/{_seg(rollout_id)}/labels/{_seg(label)}")

    def unlabel(self, run: str, rollout_id: str, label: str) -> None:
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
