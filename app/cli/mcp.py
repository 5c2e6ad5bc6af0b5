"""`rollscope mcp`: the read-only MCP server for coding agents (app/mcp/, docs/mcp.md)."""
from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.text import Text

from app.cli.common import console


class Refused(Exception):
    """The read lock refused us at start: exit 2 with this message."""


def mcp(
    url: Annotated[str | None, typer.Option(help="Read from the Rollscope served here (http://host:port) instead "
                                            "of opening the database in-process.", show_default=False)] = None,
    token: Annotated[str | None, typer.Option(envvar="ROLLSCOPE_TOKEN", help="A read token, for a Rollscope whose "
                                              "reading is locked (ROLLSCOPE_REQUIRE_READ_TOKEN=1); also "
                                              "ROLLSCOPE_TOKEN.", show_default=False)] = None,
    http: Annotated[bool, typer.Option("--http", help="Speak streamable HTTP on --host/--port (path /mcp) "
                                       "instead of stdio.")] = False,
    host: Annotated[str, typer.Option(help="With --http: interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="With --http: TCP port.", min=1, max=65535)] = 8765,
) -> None:
    """Serve Rollscope's eight read-only tools to coding agents over the Model Context Protocol:
    stdio by default (an agent starts this command), streamable HTTP at http://HOST:PORT/mcp with
    --http. It reads the database in-process (the one every command uses: --db, ...) or, with
    --url, a running Rollscope. Links in answers are absolute when --url or ROLLSCOPE_URL is set.
    When reading is locked and no token is given (or the token is refused), it exits 2 at once."""
    import anyio

    from app.mcp.reader import Reader

    if url is not None and not url.startswith(("http://", "https://")):
        console.print(Text.assemble(("error: ", "red"), f"--url must be an http(s) URL, got {url!r}"), soft_wrap=True)
        raise typer.Exit(2)
    base = url or _rollscope_url()

    def reader() -> Reader:
        if url is not None:
            return Reader.over_http(url, token=token)
        from app.cli.common import open_engine
        from app.config import get_settings

        if get_settings().require_read_token and not token:
            raise Refused("reading is locked (ROLLSCOPE_REQUIRE_READ_TOKEN is set): give a read token with --token "
                          "or ROLLSCOPE_TOKEN (`rollscope token create --scope read`)")
        open_engine().dispose()  # says which database, waits for it, migrates (as `serve` does)
        return Reader.in_process(get_settings(), token=token, base_url=base)

    async def main() -> None:
        from app.mcp.server import build_server

        r = reader()
        try:
            await _probe(r, url)
            server = build_server(r)
            if http:
                await server.run_streamable_http_async(host=host, port=port)
            else:
                await server.run_stdio_async()
        finally:
            await r.aclose()

    try:
        anyio.run(main)
    except Refused as exc:
        console.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
        raise typer.Exit(2) from None


async def _probe(reader, url: str | None) -> None:
    """Read the runs list once before serving: a refused read (the lock, an unknown or revoked
    token) is Refused; a server that cannot be reached yet is said on stderr and served anyway
    (each tool then answers that it cannot reach it)."""
    from app.mcp.reader import ReadError

    try:
        await reader.get("/runs.json")
    except ReadError as exc:
        if exc.status in (401, 403):
            raise Refused(exc.message) from None
        if exc.status is None and url is not None:
            console.print(f"warning: {exc.message}; serving anyway", markup=False, soft_wrap=True)
            return
        raise


def _rollscope_url() -> str | None:
    """ROLLSCOPE_URL when it is an http(s) URL (the address people open, for links), else None."""
    value = os.environ.get("ROLLSCOPE_URL", "").strip()
    return value.rstrip("/") if value.startswith(("http://", "https://")) else None
