"""Planning `rollscope ingest --retry-quarantined`: which files to read again, and how.

Each file with quarantined records is read again the way it was first ingested (the working
folder its name is relative to, the `run`/`step`/`format` options given then, the root its
missing rollout ids were derived from: app/store/quarantine.py `IngestContext`), from where its
bytes are now (a rotated spool file is followed to its current path). Files are grouped by that
context, so one `ingest_paths` call reads each group. A file given again by name on the command
line is read with that command's options instead, and a file that can no longer be read is
reported (its records stay quarantined).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import Engine

from app.store.quarantine import files_to_retry

# (cwd, run, step, format): how a group of files is read again
RetryKey = tuple[str, str | None, int | None, str | None]


@dataclass
class RetryPlan:
    """`groups`: per context, each file's (path where it is now, root or None, the name its
    records are known by); `gone`: why each file that cannot be read again cannot."""

    groups: dict[RetryKey, list[tuple[Path, Path | None, str]]] = field(default_factory=dict)
    gone: list[str] = field(default_factory=list)

    @property
    def files(self) -> int:
        return sum(len(v) for v in self.groups.values())


def plan_retry(engine: Engine, given: list[Path], *, run: str | None, step: int | None,
               format: str | None) -> RetryPlan:  # noqa: A002 - the CLI's option name
    """The files to read again (`given`: the paths named on the command line; `run`, `step`,
    `format`: its options, used for entries from before contexts were kept)."""
    plan = RetryPlan()
    for f in files_to_retry(engine):
        first = f.context
        cwd = Path(first.cwd) if first else Path.cwd()
        if f.gone is not None:
            plan.gone.append(f.gone)
        elif Path(f.name) not in given:  # a file given again by name is read with this command's options
            key = (str(cwd), first.run, first.step, first.format) if first else (str(cwd), run, step, format)
            plan.groups.setdefault(key, []).append((Path(f.path), Path(first.root) if first and first.root else None,
                                                    f.name))
    return plan
