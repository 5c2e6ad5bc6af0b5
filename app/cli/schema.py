"""`rollscope schema`: the JSON Schema of one native JSONL line."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def schema(out: Annotated[Path | None, typer.Option(help="Write to this file instead of stdout.")] = None) -> None:
    """Print the JSON Schema of one native JSONL line (generated from ingest/schema.py)."""
    import json

    from ingest.schema import json_schema

    text = json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
    if out:
        out.write_text(text)
    else:
        typer.echo(text, nl=False)
