"""`rollscope serve`: the dashboard, its JSON twins and /api/v1 with uvicorn."""
from __future__ import annotations

from typing import Annotated

import typer

from app.cli.common import open_engine


def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.", min=1, max=65535)] = 8000,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes (each with its own connection pool, "
                                              "ROLLSCOPE_DB__POOL_SIZE connections).", min=1, max=64)] = 1,
) -> None:
    """Serve the dashboard, its JSON twins and /api/v1 with uvicorn, in `--workers` processes."""
    import uvicorn

    open_engine()  # migrate once, before the workers start
    uvicorn.run("app.main:create_app", factory=True, host=host, port=port, workers=workers, log_level="info",
                proxy_headers=True)
