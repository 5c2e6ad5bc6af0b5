"""`rollscope export`: a run's rollouts to a file in any export format (the same code as
`GET /api/v1/runs/{run}/export`)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from app.cli.common import _Revealing, console, open_engine
from ingest.fields import INT32_MAX


def export(
    run: Annotated[str, typer.Option(help="Run to export.")],
    out: Annotated[Path, typer.Option(help="File to write.")],
    format: Annotated[str, typer.Option(  # noqa: A002
        "--format", help="native | verifiers | atif | samples | parquet | otlp | nemo_gym")] = "native",
    step: Annotated[int | None, typer.Option(help="Only this training step.", min=0, max=INT32_MAX)] = None,
    ending: Annotated[str | None, typer.Option(help="Only this ending (submitted, error, ...).")] = None,
    group: Annotated[str | None, typer.Option(help="Only this group.")] = None,
    task: Annotated[str | None, typer.Option(help="Only this task key.")] = None,
    reward_min: Annotated[float | None, typer.Option(help="Reward at least this.")] = None,
    reward_max: Annotated[float | None, typer.Option(help="Reward at most this.")] = None,
    flag: Annotated[str | None, typer.Option(help="Only rollouts with a finding of this kind.")] = None,
) -> None:
    """Write a run's rollouts (the rollouts list's filters) as native JSONL, verifiers Episode
    JSONL, ATIF v1.7 JSONL, flat training-sample JSONL, Parquet, OTLP/JSON lines of OTel GenAI
    spans (`invoke_agent` → `chat` and `execute_tool`, RL fields as `rollscope.*` attributes)
    ready for an OTLP/HTTP endpoint, or NeMo Gym rollout JSONL (docs/formats.md, "Export").
    Samples and Parquet need token arrays: a run with none exits 1 and writes nothing. An unknown
    run exits 1 naming it and writes no file (the API answers 404). A filter value the API refuses
    (422: an unknown ending or finding kind, a reward that is NaN or infinite) exits 2 naming the
    option and the value, and writes no file: the same checks (app.params). A stored rollout
    that cannot be read back exits 1 naming it, and writes no file."""
    from app.queries.rollout_list import RolloutFilters
    from app.store.load import UnreadableRollout, iter_rollouts
    from ingest import checks
    from ingest.export import Counted, NoSamples, write
    from ingest.formats.registry import WRITERS

    if format not in WRITERS:
        raise typer.BadParameter(f"{format!r}: formats are {', '.join(WRITERS)}", param_hint="--format")
    for name, value in (("reward-min", reward_min), ("reward-max", reward_max)):
        if value is not None and not math.isfinite(value):
            raise typer.BadParameter(f"{value!r}: a reward bound is a finite number", param_hint=f"--{name}")
    filters = RolloutFilters(step=step, ending=ending, group=group, task=task, reward_min=reward_min,
                             reward_max=reward_max, flag=checks.legacy_kind(flag) if flag is not None else None)
    engine = open_engine()
    _check_filters(engine, run, filters)
    if not _run_exists(engine, run):
        console.print(Text.assemble(("error: ", "red"), f"no run {run!r} in this database; nothing written"),
                      soft_wrap=True)
        raise typer.Exit(1)
    try:
        rollouts = Counted(iter_rollouts(engine, run, filters))
        n = write(rollouts, format, out)
    except OSError as exc:
        console.print(Text.assemble(("error: ", "red"), f"cannot write {out}: {exc.strerror or exc}"), soft_wrap=True)
        raise typer.Exit(2) from None
    except NoSamples as exc:
        console.print(Text.assemble(("error: ", "red"), f"run {run!r}: {exc}"), soft_wrap=True)
        raise typer.Exit(1) from None
    except UnreadableRollout as exc:  # never a shorter file that looks complete
        console.print(Text.assemble(("error: ", "red"), f"{exc}; nothing written"), soft_wrap=True)
        raise typer.Exit(1) from None
    out_console = Console(file=_Revealing("stdout"), soft_wrap=True)
    if WRITERS[format].samples:  # one sample per branch with token ids: say how many rollouts gave them
        out_console.print(Text(f"wrote {n} samples from {rollouts.n} rollouts to {out}"
                               + (" (a rollout whose branches carry no token ids gives no sample)"
                                  if n < rollouts.n else "")))
    else:
        out_console.print(Text(f"wrote {n} rollouts to {out}"))


def _check_filters(engine, run_id: str, filters) -> None:
    """typer.BadParameter (exit 2) naming the option and its value for a filter the API answers
    422 for (app.params.check_rollout_filters: an unknown ending or finding kind)."""
    from sqlmodel import Session

    from app.errors import ApiError
    from app.params import check_rollout_filters

    with Session(engine) as session:
        try:
            check_rollout_filters(session, run_id, filters)
        except ApiError as exc:
            field = exc.field or "filter"
            raise typer.BadParameter(f"{getattr(filters, field, None)!r}: {exc.detail}",
                                     param_hint=f"--{field.replace('_', '-')}") from None


def _run_exists(engine, run_id: str) -> bool:
    from sqlmodel import Session

    from app.queries.runs import get_run

    with Session(engine) as session:
        return get_run(session=session, run_id=run_id) is not None
