"""The search query language: words, phrases and filters, parsed into terms and filters.

Grammar (whitespace separates items; items are ANDed)::

    query   := item*
    item    := filter | phrase | word | "AND"
    filter  := NAME ":" value            NAME: run, step, steps, ending, role, kind, flag
    value   := '"' chars '"' | chars-up-to-whitespace
    phrase  := '"' chars '"'             an unmatched quote runs to the end of the query
    word    := chars-up-to-whitespace    split at every non-letter, non-digit character

A word is matched as a prefix (`sandb` finds `sandbox`; FTS5 `"sandb"*`, Postgres
`'sandb':*`), except a one-character word, matched whole (a one-letter prefix is most of the
index). A word with inner punctuation (`sandbox_crash`, `host-lost`, `/usr/bin`) is the phrase
of its parts, as both indexes split it. A phrase matches its words next to each other, in order,
whole. `step:N` or `step:A-B` (`steps:` the same) is a step range (app.queries.steps.StepRange);
`ending:` one of the endings; `role:` system, user, assistant or tool; `kind:` one of
app.store.search.KINDS; `flag:` a registered finding kind (ingest.checks.kinds(), or an older
name checks.legacy_kind maps to one); `run:` a run id. A `name:value` whose name is
none of these is text.

Refused with a `QueryError` (a 422): a query longer than MAX_QUERY_CHARS, a NUL character, `OR`
or `NOT` (not supported: say what every text must hold), a filter given twice with different
values (two step ranges narrow to the steps in both; ranges with no step in common are refused),
a bad value (a step above INT32_MAX, an unknown ending, role, kind or finding kind) or none
(`flag:` alone). Answered with a note and no hits: no word at all (only punctuation).
More than MAX_TERMS words or phrases: the first MAX_TERMS are used, and a note says so.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.queries.steps import StepRange
from app.store.search import KINDS
from ingest import checks
from ingest.schema import Ending

MAX_QUERY_CHARS = 1_000  # a longer query is refused (422): a search is words, not a document
MAX_TERMS = 16  # words and phrases used of one query
ROLES = ("system", "user", "assistant", "tool")
ENDINGS = tuple(e.value for e in Ending)
FILTERS = ("run", "steps", "ending", "role", "kind", "flag")
_ITEM = re.compile(r'(?P<name>[A-Za-z_]+):(?:"(?P<qval>[^"]*)"?|(?P<val>\S*))'  # a filter (`flag:` alone: no value)
                   r'|"(?P<phrase>[^"]*)(?P<close>"|$)'  # a phrase, maybe left open
                   r'|(?P<word>[^\s"]+)')
PART = re.compile(r"[^\W_]+")


class QueryError(ValueError):
    """A query that cannot be searched; `field` names the parameter (`q`, or a filter's)."""

    def __init__(self, message: str, field: str = "q"):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Term:
    """A word (`words` of one item, `prefix` when matched as a prefix) or a phrase (several words)."""

    words: tuple[str, ...]
    prefix: bool = False

    def to_json(self) -> dict:
        if len(self.words) == 1:
            return {"word": self.words[0], "prefix": self.prefix}
        return {"phrase": " ".join(self.words)}

    def fts5(self) -> str:
        """This term in FTS5's query syntax: `"sandb"*`, `"host lost"`."""
        return '"' + " ".join(self.words) + '"' + ("*" if self.prefix else "")

    def tsquery(self) -> str:
        """This term in Postgres's to_tsquery syntax: `'sandb':*`, `'host' <-> 'lost'`."""
        return " <-> ".join(f"'{w}'" for w in self.words) + (":*" if self.prefix else "")


@dataclass
class Query:
    """A parsed query: its `terms` (ANDed), its `filters` (name → value: `steps` a StepRange, the
    others strings) and `notes` for the reader (terms dropped, a quote left open)."""

    text: str
    terms: list[Term] = field(default_factory=list)
    filters: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """{"text", "terms": [{"word", "prefix"} | {"phrase"}], "filters": {name: value}}."""
        return {"text": self.text, "terms": [t.to_json() for t in self.terms],
                "filters": {k: str(v) for k, v in self.filters.items()}}

    def fts5(self) -> str:
        """The terms as one FTS5 MATCH expression (implicit AND): `"sandb"* "host lost"`."""
        return " ".join(t.fts5() for t in self.terms)

    def tsquery(self) -> str:
        """The terms as one to_tsquery('simple', ...) text: `('sandb':*) & ('host' <-> 'lost')`."""
        return " & ".join(f"({t.tsquery()})" for t in self.terms)


def _words(text: str) -> tuple[str, ...]:
    return tuple(w.lower() for w in PART.findall(text))


def _set(query: Query, name: str, value: object) -> None:
    old = query.filters.get(name)
    if isinstance(old, StepRange) and isinstance(value, StepRange):  # both narrow: the steps in both
        firsts = [s for s in (old.first, value.first) if s is not None]
        lasts = [s for s in (old.last, value.last) if s is not None]
        both = StepRange(max(firsts) if firsts else None, min(lasts) if lasts else None)
        if both.first is not None and both.last is not None and both.first > both.last:
            raise QueryError(f"steps given twice with no step in common: {old} and {value}", name)
        query.filters[name] = both
        return
    if name in query.filters and str(old) != str(value):
        raise QueryError(f"{name} given twice: {query.filters[name]} and {value}", name)
    query.filters[name] = value


def filter_value(name: str, value: str) -> object:
    """A filter's value checked: `steps` → StepRange; the others must be known words. Raises
    QueryError."""
    value = value.strip()
    if not value:
        raise QueryError(f"{name}: give a value ({name}:VALUE)", name)
    if name == "steps":  # StepRange.parse refuses a step past int32 (an INTEGER column) as well
        try:
            return StepRange.parse(value)
        except ValueError as exc:
            raise QueryError(str(exc).replace("steps:", "step:"), "steps") from None
    if name == "flag":  # a registered check's kind, or its older name (checks.legacy_kind)
        if checks.legacy_kind(value) not in checks.kinds():
            raise QueryError(f"flag: {value[:200]!r} is not a finding kind; one of {', '.join(checks.kinds())}",
                             name)
        return checks.legacy_kind(value)  # an old name and its new one are one filter
    allowed = {"ending": ENDINGS, "role": ROLES, "kind": KINDS}.get(name)
    if allowed is not None and value not in allowed:
        raise QueryError(f"{name}: {value[:200]!r} must be one of {', '.join(allowed)}", name)
    if len(value) > 500:
        raise QueryError(f"{name}: at most 500 characters", name)
    return value


def parse(text: str, **params: str | None) -> Query:
    """Parse query `text` and the URL's filter parameters (`run`, `steps`, `ending`, `role`,
    `kind`, `flag`; None or blank: not given) into a Query. Raises QueryError (see the module)."""
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError(f"the query has {len(text)} characters; at most {MAX_QUERY_CHARS}")
    if "\x00" in text:
        raise QueryError("the query holds a NUL character")
    query = Query(text=text)
    for name, value in params.items():
        if value is not None and str(value).strip():
            _set(query, name, filter_value(name, str(value)))
    terms: list[Term] = []
    for m in _ITEM.finditer(text):
        name = (m.group("name") or "").lower()
        name = "steps" if name == "step" else name
        if m.group("name") and name in FILTERS:
            value = m.group("qval") if m.group("qval") is not None else m.group("val")
            _set(query, name, filter_value(name, value))
            continue
        if m.group("phrase") is not None:
            if not m.group("close"):
                query.notes.append("a quote was left open: the phrase runs to the end of the query")
            words = _words(m.group("phrase"))
            if words:
                terms.append(Term(words))
            continue
        raw = m.group(0)
        if raw in ("OR", "NOT"):
            raise QueryError(f"{raw} is not supported: every word and phrase must match (AND); "
                             "search again for the other words")
        if raw == "AND":
            continue
        words = _words(raw)
        if len(words) == 1:
            terms.append(Term(words, prefix=len(words[0]) > 1))
        elif words:
            terms.append(Term(words))
    if len(terms) > MAX_TERMS:
        query.notes.append(f"only the first {MAX_TERMS} of {len(terms)} words and phrases were searched")
    query.terms = list(dict.fromkeys(terms))[:MAX_TERMS]
    if not query.terms and text.strip():
        query.notes.append("no word to search for: give at least one word or phrase (filters narrow a search)")
    return query
