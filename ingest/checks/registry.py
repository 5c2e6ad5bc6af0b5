"""The checks registry: every trace check declares its kind, severity, scope and label once.

A check is a function decorated with `@check(kind, severity, scope, label)`. It reads the native
model (one rollout, or one group of rollouts) and yields `Hit`s; the runner turns each hit into a
`FindingData` with the declared kind and severity, so kind names are static (a check cannot
invent a kind on the fly) and every kind the app can show is known before any data arrives. A
check that cannot decide (no tokenizer, no logprobs, no recorded advantages) raises `Skip` with
the reason: the runner records it as a skipped outcome, so nothing passes silently. A check that
raises anything else has a bug: the runner logs it with the rollout (or group) it ran on and
records "could not decide (internal error)" with the exception, so one strange rollout costs
neither itself, its neighbours nor a page (issue 20, "Bad input").

Modelled on datasette's declared facets (`datasette/facets.py`: a registry entry carries its
name and docs; simonw/datasette `tests/test_docs.py` fails when one is undocumented). docs/checks.md documents
every kind; tests/checks/test_registry.py fails when one is missing there.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["info", "warning", "error"]
Scope = Literal["rollout", "group"]
SKIPPED = "skipped"  # the severity a stored skipped outcome carries (never a finding)
INTERNAL_ERROR = "could not decide (internal error)"  # a check that raised: logged, reported, never fatal
log = logging.getLogger("rollscope.checks")


@dataclass
class FindingData:
    """One finding (or, with severity "skipped", one check that could not decide).

    `node_idx`/`position`: the message and the token index within it where the finding is
    (None when it concerns the whole rollout or group); `detail`: JSON-ready facts."""

    kind: str
    message: str
    severity: str = "warning"
    node_idx: int | None = None
    position: int | None = None
    detail: dict = field(default_factory=dict)

    @property
    def skipped(self) -> bool:
        return self.severity == SKIPPED


@dataclass
class Hit:
    """What a check function yields: the runner adds the declared kind and severity."""

    message: str
    node: int | None = None
    position: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class Skip(Exception):
    """Raised by a check that cannot decide on this input; the message says why."""


@dataclass(frozen=True)
class Check:
    """A registered check. `doc` is the first paragraph of the function's docstring (the rule)."""

    kind: str
    severity: Severity
    scope: Scope
    label: str
    fn: Callable[..., Iterable[Hit]]
    doc: str
    at: Literal["token", "call"] = "token"  # what a finding's `position` indexes in its node
    since: int = 1  # the checks version (`version()`) that first runs it


REGISTRY: dict[str, Check] = {}


def check(kind: str, severity: Severity, scope: Scope = "rollout", label: str | None = None,
          at: Literal["token", "call"] = "token", since: int = 1):
    """Register a check function under a static `kind` (snake_case). `at` says what a finding's
    `position` indexes within its node: a token ("token") or a tool call ("call"). `since`: the
    checks version that first runs it; a check added later declares one more than `version()`
    was (tests/checks/test_checks_version.py holds the kinds of each version), so that a rollout stored
    before it, and stamped with the older version, shows it as not run. Raises ValueError when the
    kind is registered twice, or the severity or scope is not one of the declared values."""
    if severity not in ("info", "warning", "error"):
        raise ValueError(f"check {kind!r}: severity {severity!r} is not info, warning or error")
    if scope not in ("rollout", "group"):
        raise ValueError(f"check {kind!r}: scope {scope!r} is not rollout or group")

    def register(fn: Callable[..., Iterable[Hit]]):
        if kind in REGISTRY:
            raise ValueError(f"check kind {kind!r} registered twice")
        doc = (fn.__doc__ or "").strip().split("\n\n")[0]
        REGISTRY[kind] = Check(kind, severity, scope, label or kind.replace("_", " "), fn, " ".join(doc.split()), at,
                               since)
        return fn

    return register


@dataclass
class CheckResults:
    """The outcome of running every check of one scope on one rollout or group."""

    findings: list[FindingData] = field(default_factory=list)
    skipped: list[FindingData] = field(default_factory=list)  # severity "skipped", message = why

    @property
    def all(self) -> list[FindingData]:
        """Findings then skipped outcomes: what the store keeps."""
        return self.findings + self.skipped

    def kinds(self) -> list[str]:
        """The kinds that fired, sorted (skipped checks excluded)."""
        return sorted({f.kind for f in self.findings})


_MEMO: ContextVar[dict | None] = ContextVar("check_memo", default=None)


def memo(key: str, build: Callable[[], Any]) -> Any:
    """`build()`, computed once per `run` call: what several checks of one subject derive alike
    (its tool-call pairings) is derived once. Outside `run` it is simply built."""
    store = _MEMO.get()
    if store is None:
        return build()
    if key not in store:
        store[key] = build()
    return store[key]


def run(scope: Scope, subject: Any, ctx: Any) -> CheckResults:
    """Run every registered check of `scope` on `subject`, in registration order."""
    token = _MEMO.set({})
    try:
        return _run(scope, subject, ctx)
    finally:
        _MEMO.reset(token)


def _run(scope: Scope, subject: Any, ctx: Any) -> CheckResults:
    out = CheckResults()
    for c in REGISTRY.values():
        if c.scope != scope:
            continue
        try:
            hits = list(c.fn(subject, ctx))
        except Skip as why:
            out.skipped.append(FindingData(c.kind, str(why), SKIPPED))
            continue
        except Exception as exc:  # noqa: BLE001 - a check's bug must cost neither the rollout nor the page
            where = _subject_name(subject)
            log.exception("check %s failed on %s", c.kind, where)
            out.skipped.append(FindingData(c.kind, f"{INTERNAL_ERROR}: {type(exc).__name__}: {exc}"[:500], SKIPPED,
                                           detail={"internal_error": type(exc).__name__, "subject": where}))
            continue
        out.findings += [FindingData(c.kind, h.message, c.severity, h.node, h.position, h.detail) for h in hits]
    return out


def _subject_name(subject: Any) -> str:
    """How the log names what a check ran on: the rollout (run, id, attempt, file, line) or the group."""
    if hasattr(subject, "group_id") and hasattr(subject, "members"):
        return f"group {subject.run_id}/{subject.group_id}"
    src = getattr(subject, "source", None) or {}
    run = getattr(getattr(subject, "run", None), "id", None)
    where = f" ({src.get('file')}:{src.get('line')})" if src.get("file") else ""
    return f"rollout {run}/{getattr(subject, 'id', '?')}#{getattr(subject, 'attempt', 0)}{where}"


def version() -> int:
    """The checks version of this registry: the largest `since` of its checks. Stored with each
    rollout its checks ran on (`rollout.checks_version`), so a page can tell a check that ran and
    found nothing from one that did not exist yet (app/views/runs.py `_checks_table`)."""
    return max((c.since for c in REGISTRY.values()), default=0)


def kinds(scope: Scope | None = None) -> list[str]:
    """Registered kinds (of one scope, or all), in registration order."""
    return [k for k, c in REGISTRY.items() if scope is None or c.scope == scope]


def label(kind: str) -> str:
    """The short human label of a kind (the kind itself when it is not registered)."""
    c = REGISTRY.get(kind)
    return c.label if c else kind.replace("_", " ")


