"""One writer per format (`NAME` the reader's name, `CARRIES` the FIELDS it can hold,
`write(episodes, folder) -> Path`): each writes a group of episodes in its format's own shape."""
from __future__ import annotations

from importlib import import_module

# Every format of issue 20's matrix, in the order of the generated table.
NAMES = ["native", "verifiers", "nemo_gym", "atif", "atropos", "verl", "tunix", "tau_bench", "chat", "otlp",
         "inspect", "swe_agent", "mini_swe_agent", "openhands"]


def available() -> dict:
    """The writers that exist, by name (a format without one yet is absent)."""
    out = {}
    for name in NAMES:
        try:
            out[name] = import_module(f"tests.checks.matrix.formats.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"tests.checks.matrix.formats.{name}":
                raise
    return out


def cannot(module, fault) -> list[str]:
    """Why `module`'s format cannot carry `fault` (empty: it can): the FIELDS it lacks, or the
    reason its writer declares in `CANNOT` (kind → why) for a fault its format has no way to
    write although it holds the fields (OpenHands ties every observation to its action, so no
    result is ambiguous)."""
    why = sorted(fault.missing(module.CARRIES))
    special = getattr(module, "CANNOT", {}).get(fault.kind)
    return why + ([special] if special else [])
