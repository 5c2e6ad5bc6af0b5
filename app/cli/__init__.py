"""The `rollscope` command: ingest, export, recheck, quarantine, worker, link, serve, demo,
rebuild-analytics, schema, token, mcp, db. One module per command group; this one assembles them (in the
order `rollscope --help` lists them) and holds the console entry point, `main`.

Configuration comes from the environment through `get_settings()` (`ROLLSCOPE_DATABASE_URL`,
`ROLLSCOPE_WORKER__BATCH_SIZE`, ...: app/config.py and the README's table); `--db` anywhere on
the command line overrides the database (app/cli/common.py). Each command's `--help` ends with
what its exit codes mean (app/cli/exits.py).
"""
from __future__ import annotations

import os
import sys

import typer
from rich.text import Text

from app.cli import common, db, demo, export, ingest, link, mcp, quarantine, rebuild, schema, serve, token, worker
from app.cli.common import console
from app.cli.exits import exit_codes

# The commands in the order `rollscope --help` lists them: name → its function (`token` is a group).
COMMANDS: dict[str, object] = {
    "ingest": ingest.ingest, "export": export.export, "recheck": rebuild.recheck, "quarantine": quarantine.quarantine,
    "worker": worker.worker, "link": link.link, "token": token.token_app, "serve": serve.serve, "demo": demo.demo,
    "rebuild-analytics": rebuild.rebuild_analytics, "schema": schema.schema, "mcp": mcp.mcp, "db": db.db_app,
}


def build(only: str | None = None) -> typer.Typer:
    """The `rollscope` app with every command, or with only the command `only` (a key of
    COMMANDS): typer turns each registered command into a click command, its parameters read
    from the function's signature, before it parses the command line (43 ms of CPU here for all
    of them, 8 ms for `ingest` alone), so `main` builds only the one it runs."""
    cli = typer.Typer(add_completion=False, no_args_is_help=True, help="Rollscope: a trace inspector for agentic RL.")
    cli.callback()(common.choose_database)
    for name, fn in COMMANDS.items():
        if only not in (None, name):
            continue
        if isinstance(fn, typer.Typer):
            cli.add_typer(fn, name=name)
        else:
            cli.command(name, epilog=exit_codes(name))(fn)
    return cli


def __getattr__(name: str):
    """`app`, the whole `rollscope` app (tests and `python -m app.cli` use it), built on first use
    (PEP 562) and kept: a run of the command builds only the command it runs (`main`)."""
    if name == "app":
        globals()["app"] = whole = build()
        return whole
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def command_named(args: list[str]) -> str | None:
    """The command `args` (after `hoist_db`) run, when the first word after the group's own
    options is one of COMMANDS; None otherwise (no command, `--help`, a typo: the whole app
    answers, listing the commands)."""
    i = 0
    while i < len(args) and args[i].startswith("--db"):
        i += 1 if "=" in args[i] else 2
    return args[i] if i < len(args) and args[i] in COMMANDS else None


def main() -> None:
    """The console entry point: no traceback reaches a user unless `--debug` is given."""
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    debug = "--debug" in sys.argv[1:]
    if debug:
        sys.argv.remove("--debug")
    try:
        sys.argv[1:] = hoist_db(sys.argv[1:])
        named = command_named(sys.argv[1:])
        # standalone_mode=False: click returns a command's exit code instead of exiting
        code = build(named)(standalone_mode=False)  # no command named: the whole app answers
        raise SystemExit(code if isinstance(code, int) else 0)
    except SystemExit:
        raise  # the command's exit code; before `click_exceptions()`, which imports click (70 ms)
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except click_exceptions() as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except (KeyboardInterrupt, EOFError):
        console.print("interrupted", markup=False)
        raise SystemExit(130) from None
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        if debug:
            raise
        from app.db.unusable import DatabaseUnusable, why_unusable
        from app.store.outage import database_gone, out_of_space

        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        detail = first[0][:300] if first else type(exc).__name__
        url = os.environ.get("ROLLSCOPE_DATABASE_URL") or os.environ.get("ROLLSCOPE_DB__URL")
        why = why_unusable(exc, url)
        if why:  # waiting would not help: say which database, and what is wrong with it
            shown = exc.url if isinstance(exc, DatabaseUnusable) else common.sa_url_shown(url or "")
            console.print(Text.assemble(("error: ", "red"), f"the database {shown} cannot be used: {why} "
                                        "(not retried: waiting will not fix this)"), soft_wrap=True)
            raise SystemExit(2) from None
        if database_gone(exc):
            n = getattr(exc, "rollouts_committed", None)
            done = f"{n} rollouts were committed; " if n is not None else ""
            what = "has no space left" if out_of_space(exc) else "is unreachable"
            waited = getattr(exc, "retried_seconds", None)
            tried = f" after retrying for {waited:g} s" if waited else ""
            console.print(Text.assemble(("error: ", "red"), f"the database {what}{tried} ({detail}); {done}"
                                        "re-run the same command to resume (what is stored is not written again)"),
                          soft_wrap=True)
            raise SystemExit(3) from None
        from pydantic import ValidationError

        if isinstance(exc, ValidationError):  # a setting (or --db) the app cannot use: say which, and why
            for e in exc.errors():
                where = ".".join(str(x) for x in e.get("loc", ()))
                msg = str(e.get("msg", "")).removeprefix("Value error, ")
                console.print(Text.assemble(("error: ", "red"), f"setting {where}: {msg}" if where else msg),
                              soft_wrap=True)
            raise SystemExit(2) from None
        import sqlalchemy as sa

        where = f"database {common.sa_url_shown(url)}; " if url and isinstance(exc, sa.exc.DBAPIError) else ""
        console.print(Text.assemble(("error: ", "red"), f"{type(exc).__name__}: {detail} ({where}--debug shows the "
                                                        "traceback)"), soft_wrap=True)
        raise SystemExit(1) from None


_DB_NEEDS_URL = "needs a value: a database URL (sqlite:///path.db or postgresql://...)"


def hoist_db(args: list[str]) -> list[str]:
    """`--db URL` (or `--db=URL`) is accepted anywhere on the command line, before or after the
    command (`rollscope ingest x.jsonl --db sqlite:///x.db`): moved to the front, where the
    group's option is parsed. A `--db` after `--` is left alone. Raises `typer.BadParameter`
    (a usage error, exit code 2) for a `--db` without a value (at the end, or followed by another
    option, an empty word or a command's name) and for two `--db` naming different databases
    (which one was meant is not known)."""
    end = args.index("--") if "--" in args else len(args)
    head, rest, i = args[:end], args[end:], 0
    kept: list[str] = []
    urls: list[str] = []
    while i < len(head):
        if head[i] == "--db":
            # no value: the end, another option, an empty word, or a command's name (`--db ingest x`)
            if i + 1 >= len(head) or head[i + 1].startswith("-") or not head[i + 1] or head[i + 1] in COMMANDS:
                raise typer.BadParameter(_DB_NEEDS_URL, param_hint="'--db'")
            urls.append(head[i + 1])
            i += 2
            continue
        if head[i].startswith("--db="):
            urls.append(head[i].removeprefix("--db="))
            if not urls[-1]:
                raise typer.BadParameter(_DB_NEEDS_URL, param_hint="'--db'")
        else:
            kept.append(head[i])
        i += 1
    if len(set(urls)) > 1:
        raise typer.BadParameter(f"given {len(urls)} times ({', '.join(urls)}): name one database",
                                 param_hint="'--db'")
    return (["--db", urls[0]] if urls else []) + kept + rest


def click_exceptions() -> tuple[type[Exception], ...]:
    """Usage errors (shown as typer shows them, exit code 2): typer's vendored click, or click."""
    out: list[type[Exception]] = []
    try:
        from typer._click.exceptions import ClickException

        out.append(ClickException)
    except ImportError:
        pass
    try:
        import click

        out.append(click.exceptions.ClickException)
    except ImportError:
        pass
    return tuple(out)
