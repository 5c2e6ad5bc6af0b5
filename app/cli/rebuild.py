"""`rollscope recheck` and `rollscope rebuild-analytics`: recompute from what is stored (today's
checks; the per-step rollups, step alerts, search index and failure signatures)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from app.cli.common import console, open_engine, out, parse_added


def recheck(
    run: Annotated[str, typer.Option(help="Run whose stored rollouts are checked again.")],
    tokenizer: Annotated[Path | None, typer.Option(help="A tokenizer to check with instead of the one stored with "
                                                        "the run at ingest (the default).", exists=True)] = None,
    added_token: Annotated[list[str], typer.Option(
        "--added-token", help="Extra vocabulary entry ID=PIECE (repeatable).")] = [],  # noqa: B006
) -> None:
    """Run today's checks over a run's stored rollouts and replace their findings (rollouts
    stored before a check existed get it without re-ingesting the files). The checks use the
    tokenizer and chat template stored with the run (`app.store.tokenizers.run_context`), as
    ingest did, unless --tokenizer names another. Labels and notes are kept. Exits 2 when the run
    has no rollouts or a tokenizer cannot be read, 1 naming a stored rollout that cannot be read
    back."""
    from app.config import get_settings
    from app.store.load import UnreadableRollout
    from app.store.recheck import recheck_run

    if added_token and tokenizer is None:
        raise typer.BadParameter("--added-token extends a tokenizer: give --tokenizer too", param_hint="--added-token")
    engine = open_engine()
    check_context = None  # recheck_run takes the run's stored tokenizer
    try:
        if tokenizer is not None:
            from ingest.checks.context import load_context

            check_context = load_context(tokenizer, parse_added(added_token))
        total = recheck_run(engine, run, context=check_context, batch_size=get_settings().worker.batch_size)
    except ValueError as exc:
        console.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
        raise typer.Exit(2) from None
    except KeyError:
        console.print(Text.assemble(("error: ", "red"), f"run {run!r} has no stored rollouts"), soft_wrap=True)
        raise typer.Exit(2) from None
    except UnreadableRollout as exc:
        console.print(Text.assemble(("error: ", "red"), f"{exc}; the batches before it were checked again, it and "
                                                        "the rollouts after it were not"), soft_wrap=True)
        raise typer.Exit(1) from None
    out.print(Text(f"re-checked {total.inserted + total.replaced} rollouts of {run}: {total.findings} findings"
                   + (f", {total.rejected} could not be stored again" if total.rejected else "")))


def rebuild_analytics(
    run: Annotated[str | None, typer.Option(help="Only this run (default: every run).")] = None,
) -> None:
    """Recompute the per-step rollups, the step alerts, the search index and the failure
    signatures from what is stored (ingest keeps them current; this is for databases that hold
    rollouts from before they existed, or after the alert settings changed)."""
    from app.store import rollups, search, signatures, step_alerts

    with open_engine().begin() as conn:
        steps = rollups.rebuild(conn, run)
        flagged = step_alerts.rebuild(conn, run)
        docs = search.rebuild(conn, run)
        signed = signatures.rebuild(conn, run)
    out.print(f"rollups of {steps} steps, {flagged} steps flagged, {docs} texts indexed for search, "
              f"{signed} failure signatures of rollouts")
