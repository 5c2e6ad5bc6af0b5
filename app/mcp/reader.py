"""Where the MCP tools read from: the pages' JSON twins, fetched in-process (through
`httpx.ASGITransport` on `create_app(settings)`, no server needed) or over HTTP from a running
Rollscope (`--url`, with a read token when reading is locked). Read-only: GET and nothing else.

Every failure becomes one `ReadError` with a one-line message: the app's own error message for a
4xx (`no run 'nope'`, `ending must be one of ...`), a short line for a 5xx or a server that
cannot be reached. Links handed to people are page links (the twin's `.json` dropped), absolute
when the server's address is known (`--url`, or ROLLSCOPE_URL).
"""
from __future__ import annotations

import re
from typing import Any

import httpx

TIMEOUT_SECONDS = 60.0  # one twin; the largest (a rollout page) is bounded by the app (TWIN_TOKEN_BUDGET)
_TWIN = re.compile(r"\.json(?=$|[?#])")


class ReadError(Exception):
    """A twin that could not be read: `status` (the app's HTTP status, or None when it could not
    be reached) and `message` (one line, for the agent)."""

    def __init__(self, status: int | None, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def one_line(text: str, limit: int = 300) -> str:
    """`text` on one line (whitespace runs folded), cut at `limit` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def error_message(status: int, body: Any, path: str) -> str:
    """The one line an app error becomes: its JSON error's message for a 4xx (the one error
    shape, `{"error": {"message"}}`), a short line naming the status for anything else."""
    message = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
    if status >= 500:
        return f"Rollscope failed on this request (HTTP {status}); try again, or see the server's log"
    if status == 401:
        return one_line(f"Rollscope refused the read: {message or 'a read token is needed'} "
                        "(give `rollscope mcp` a read token: --token or ROLLSCOPE_TOKEN)")
    return one_line(message or f"HTTP {status} for {path.split('?')[0]}")


class Reader:
    """Reads JSON twins with one `httpx.AsyncClient`. `base_url`: the server's address as people
    reach it (for links), or None (links stay paths)."""

    def __init__(self, client: httpx.AsyncClient, *, base_url: str | None, where: str):
        self.client, self.base_url, self.where = client, base_url.rstrip("/") if base_url else None, where

    @classmethod
    def in_process(cls, settings, *, token: str | None = None, base_url: str | None = None) -> "Reader":
        """The app itself, built for `settings` (`create_app`) and called through ASGI: no port."""
        from app.main import create_app

        return cls.for_app(create_app(settings), token=token, base_url=base_url)

    @classmethod
    def for_app(cls, app, *, token: str | None = None, base_url: str | None = None) -> "Reader":
        """An ASGI app (a `create_app`) called in-process. An exception in the app is its 500
        response, as a server would answer (not raised into the tool)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        client = httpx.AsyncClient(transport=transport, base_url="http://rollscope.local", headers=headers,
                                   timeout=TIMEOUT_SECONDS)
        return cls(client, base_url=base_url, where="the database")

    @classmethod
    def over_http(cls, url: str, *, token: str | None = None) -> "Reader":
        """A running Rollscope at `url` (`http://host:port`), with `token` as its Bearer token."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        client = httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=TIMEOUT_SECONDS)
        return cls(client, base_url=url, where=url)

    async def _get(self, path: str, accept: str) -> httpx.Response:
        try:
            resp = await self.client.get(path, headers={"Accept": accept})
        except httpx.HTTPError as exc:
            raise ReadError(None, one_line(f"cannot reach Rollscope at {self.where}: "
                                           f"{type(exc).__name__} {exc}")) from None
        if resp.status_code >= 400:
            try:
                body = resp.json()
            except ValueError:
                body = None
            raise ReadError(resp.status_code, error_message(resp.status_code, body, path))
        return resp

    async def get(self, path: str) -> dict[str, Any]:
        """The JSON twin at `path` (a path with its query, as app.urls builds it with `json=True`).
        Raises ReadError."""
        resp = await self._get(path, "application/json")
        try:
            data = resp.json()
        except ValueError:
            raise ReadError(resp.status_code, f"Rollscope answered {path.split('?')[0]} with no JSON") from None
        if not isinstance(data, dict):
            raise ReadError(resp.status_code, f"Rollscope answered {path.split('?')[0]} with unexpected JSON")
        return data

    async def text(self, path: str) -> str:
        """A text/plain resource (a message's full text, `/runs/{run}/nodes/{pk}/{idx}.txt`)."""
        return (await self._get(path, "text/plain")).text

    def link(self, url: str | None) -> str | None:
        """The page a twin's `url` stands for, for a person: `.json` dropped from the path (the query
        and fragment kept), absolute when the server's address is known. None stays None."""
        if not url:
            return None
        if url.startswith(("http://", "https://")):
            return url
        page = _TWIN.sub("", url, count=1) if "?" not in url else _TWIN.sub("", url.split("?")[0]) + "?" + \
            url.split("?", 1)[1]
        return f"{self.base_url}{page}" if self.base_url else page

    async def aclose(self) -> None:
        await self.client.aclose()
