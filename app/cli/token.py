"""`rollscope token create | list | revoke`: API tokens (app/auth.py)."""
from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from app.cli.common import console, open_engine, out
from app.cli.exits import exit_codes

token_app = typer.Typer(no_args_is_help=True, help="API tokens: create, list, revoke (app/auth.py).")


@token_app.command("create", epilog=exit_codes("token create"))
def token_create(
    scope: Annotated[str, typer.Option(help="read (pages and API when reading is locked), write (ingest over "
                                            "HTTP; includes read) or admin (includes write).")] = "write",
    name: Annotated[str | None, typer.Option(help="A label to recognise the token by in `token list`.")] = None,
) -> None:
    """Create an API token. It is printed once, on the last line of stdout; only its hash is
    stored. Send it as `Authorization: Bearer <token>`."""
    from app.auth import SCOPES, issue

    if scope not in SCOPES:
        raise typer.BadParameter(f"one of {', '.join(SCOPES)}", param_hint="--scope")
    token, info = issue(open_engine(), scope, name)  # type: ignore[arg-type]
    console.print(f"created token {info.pk} ({info.scope}{', ' + info.name if info.name else ''}); "
                  "it is shown only now:", markup=False, soft_wrap=True)
    typer.echo(token)


@token_app.command("list", epilog=exit_codes("token list"))
def token_list() -> None:
    """List tokens (id, name, scope, prefix, created, last used, revoked); never the tokens."""
    from app.auth import list_tokens

    tokens = list_tokens(open_engine())
    table = Table(title="tokens")
    for col in ("id", "name", "scope", "prefix", "created", "last used", "revoked"):
        table.add_column(col)
    when = lambda t: t.strftime("%Y-%m-%d %H:%M") if t else "-"  # noqa: E731
    for t in tokens:
        table.add_row(str(t.pk), Text(t.name or "-"), t.scope, t.prefix + "…", when(t.created_at),
                      when(t.last_used_at), when(t.revoked_at))
    out.print(table if tokens else Text("no tokens (create one with `rollscope token create`)"))


@token_app.command("revoke", epilog=exit_codes("token revoke"))
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id from `token list`, or its prefix.")],
) -> None:
    """Revoke a token: it stops working at once and stays listed as revoked."""
    from app.auth import revoke

    try:
        revoked = revoke(open_engine(), token_id)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="TOKEN_ID") from None
    if not revoked:
        console.print(Text.assemble(("error: ", "red"), f"no token {token_id!r}"), soft_wrap=True)
        raise typer.Exit(1)
    for t in revoked:
        out.print(Text(f"revoked token {t.pk} ({t.scope}{', ' + t.name if t.name else ''})"))
