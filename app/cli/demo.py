"""`rollscope demo`: the deterministic synthetic demo run and its tokenizer (ingest/demo/)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from app.cli.common import console


def demo(
    out: Annotated[Path, typer.Option(help="Where to write the demo run (native JSONL).")] = Path("demo-run.jsonl"),
    steps: Annotated[int, typer.Option(min=1, max=10_000, help="Training steps.")] = 30,
    groups: Annotated[int, typer.Option(min=1, max=10_000, help="Groups per step.")] = 8,
    group_size: Annotated[int, typer.Option(min=1, max=1_000, help="Rollouts per group.")] = 8,
    seed: int = 0,
) -> None:
    """Write the deterministic synthetic demo run (docs/demo.md) as native JSONL, and its
    tokenizer as OUT.tokenizer.json beside it (for `rollscope ingest OUT --tokenizer ...`)."""
    from ingest.demo import tokenizer_path, write

    tok = tokenizer_path(out)
    try:
        n = write(out, tokenizer=tok, steps=steps, groups=groups, group_size=group_size, seed=seed)
    except OSError as exc:
        console.print(Text.assemble(("error: ", "red"), f"cannot write {exc.filename}: {exc.strerror}"), soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(f"wrote {n} rollouts to {out}", markup=False, soft_wrap=True)
    console.print(f"wrote its tokenizer to {tok} (ingest with: rollscope ingest {out} --tokenizer {tok})",
                  markup=False, soft_wrap=True)
