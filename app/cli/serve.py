"""`rollscope serve`: the dashboard, its JSON twins and /api/v1 with uvicorn."""
from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from app.cli.common import console, open_engine


def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.", min=1, max=65535)] = 8000,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes (each with its own connection pool, "
                                              "ROLLSCOPE_DB__POOL_SIZE connections).", min=1, max=64)] = 1,
) -> None:
    """Serve the dashboard, its JSON twins and /api/v1 with uvicorn, in `--workers` processes.
    A server that cannot start (the port is taken) is exit 1, after uvicorn's line saying why."""
    import uvicorn

    open_engine()  # migrate once, before the workers start
    try:
        uvicorn.run("app.main:create_app", factory=True, host=host, port=port, workers=workers, log_level="info",
                    proxy_headers=True)
    except SystemExit as exc:  # uvicorn exits 3 when it cannot start: 3 is ours for an unreachable database
        if exc.code in (0, None):
            raise
        console.print(Text.assemble(("error: ", "red"), f"the server could not start on {host}:{port} "
                                    "(uvicorn's reason is above)"), soft_wrap=True)
        raise typer.Exit(1) from None
