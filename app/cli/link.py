"""`rollscope link`: a rollout page's stable URL, for training logs."""
from __future__ import annotations

from typing import Annotated

import typer


def link(
    run: Annotated[str, typer.Argument(help="The run id.")],
    rollout: Annotated[str, typer.Argument(help="The rollout id.")],
    node: Annotated[int | None, typer.Option(help="Jump to this message (node index): `#m-N`.", min=0)] = None,
    at: Annotated[int | None, typer.Option(help="Jump to this token (offset in the branch's token sequence): "
                                           "`#t-N`.", min=0)] = None,
    branch: Annotated[int | None, typer.Option(help="Show this branch of the rollout.", min=0)] = None,
    token: Annotated[str | None, typer.Option(help="A read token to put in the link (when reading is locked).")] = None,
    base: Annotated[str | None, typer.Option(help="Where Rollscope is served (default ROLLSCOPE_URL, else "
                                             "http://127.0.0.1:8000).")] = None,
) -> None:
    """Print the stable URL of a rollout's page (for training logs); touches no database."""
    from rich.text import Text

    from app.cli.common import console
    from rollscope.client import rollout_url

    try:
        url = rollout_url(run, rollout, base=base, branch=branch, node=node, token=token, at=at)
    except ValueError as exc:  # ROLLSCOPE_URL or --base is not an http(s) URL: one line, exit 2
        console.print(Text.assemble(("error: ", "red"), str(exc).replace("base=", "--base=", 1)), soft_wrap=True)
        raise typer.Exit(2) from None
    typer.echo(url)
