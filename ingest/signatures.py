"""Failure signatures: recurring templates mined from what went wrong in rollouts (no database).

What is mined from one rollout (`signature_texts`), each as (kind, text):
- `error`: every error the source recorded on the rollout (`Rollout.errors`) and on its model
  calls (`calls[].error`), as `"<type>: <message>"`;
- `tool_error`: every tool result that reports a failure (`ingest.metrics.tool_failure`, the one
  rule the tool-error chart counts by): the error's own message where the reader kept one, else
  the result's text;
- `final_message`: the text of the last assistant message of a *failed* rollout (`failed`) that
  did not end in `error` (an infrastructure error is its own explanation, and the policy's last
  words before a sandbox died say nothing about the failure).

A rollout has failed (`failed`) when it did not finish with a task outcome, i.e. its ending is
`error`, `truncated` or `length_cut`, or when it was scored and its total reward is ≤ 0 (a
`submitted`/`task_detected`/`unknown` rollout that earned nothing). docs/failures.md.

Templates are mined with Drain (He, Zhu, Zheng, Lyu: "Drain: An Online Log Parsing Approach with
Fixed Depth Tree", ICWS 2017) as implemented by Drain3 (github.com/logpai/Drain3), configured
here in code: numbers, paths and bare file names, uuids, hex, ids, IP addresses and quoted
strings are masked before mining (`MASKS`), so they become parameters (`<NUM>`, `<PATH>`, ...);
a text that masking would leave without a literal word is masked with fewer masks
(`FALLBACK_MASKS`), so no template is only parameters; tokens Drain sees differ between messages
of one template become `<*>`. A `Miner` holds at most `MAX_TEMPLATES` templates; once full, a text
that fits none of them exactly counts as `OTHER`.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from drain3 import TemplateMiner
from drain3.drain import LogCluster
from drain3.masking import LogMasker, MaskingInstruction
from drain3.template_miner_config import TemplateMinerConfig

from ingest.metrics import finite_number, tool_failure
from ingest.schema import Rollout

log = logging.getLogger(__name__)

MAX_TEMPLATES = 200  # templates per run; texts that fit none once the cap is reached count as OTHER
OTHER = 0  # the template number of "other" (Drain3 numbers its clusters from 1)
OTHER_TEMPLATE = "(other: beyond the cap of templates per run)"
MAX_CHARS = 2_000  # characters of a text read before masking (a traceback's head is its message)
MAX_TOKENS = 40  # whitespace tokens of a masked text mined (Drain's tree is keyed by token count)
MAX_TEXTS = 50  # texts mined per rollout (a rollout with 10,000 failed tool calls costs 50)
SIMILARITY = 0.4  # Drain's sim_th: the share of equal tokens that joins a text to a template
DEPTH = 4  # Drain's tree depth (Drain3's default): the first DEPTH - 2 tokens route a text
FAILED_ENDINGS = ("error", "truncated", "length_cut")  # endings that did not finish the task

_FILE_EXT = ("py|pyc|pyi|ipynb|js|mjs|ts|tsx|jsx|json|jsonl|yaml|yml|toml|ini|cfg|txt|md|rst|csv|tsv|log|sh|"
             "c|h|cc|cpp|hpp|rs|go|java|kt|rb|php|html|css|sql|xml|so|whl|tar|gz|zip|parquet|db|lock|out|err")
# Order matters: each pattern sees the text the earlier ones left (a uuid is not read as numbers).
MASKS: tuple[tuple[str, str], ...] = (
    # a quote opens where no word goes before it and closes where none follows (`don't ... it's`
    # is no string); a backtick string is inline code, never a fence (```cpp ... ``` is kept)
    ("STR", r"\"[^\"\n]{0,300}\"|(?<!\w)'[^'\n]{0,300}'(?!\w)|(?<!`)`[^`\n]{1,300}`(?!`)"),
    ("UUID", r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"),
    ("URL", r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,15}://[^\s\"'<>]+"),
    ("PATH", r"(?:(?<=\s)|(?<=^)|(?<=[(\[=:,]))(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}/?|\b[A-Za-z]:\\[^\s\"']+"
             r"|\b[\w.-]+(?:/[\w.-]+)+\.(?:" + _FILE_EXT + r")\b"),
    ("FILE", r"\b[\w-]+(?:\.[\w-]+)*\.(?:" + _FILE_EXT + r")\b"),
    ("IP", r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"),
    ("HEX", r"\b0[xX][0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,}\b"),
    ("ID", r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z0-9][\w-]{5,}\b"),
    ("NUM", r"(?<![\w.])[-+]?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?(?![\w])"),
)
# When the masked text keeps no literal word (only parameters and punctuation: a message that is
# one quoted string, a path, a number), it is masked again with fewer masks, in this order: all but
# STR, then NUM alone; the first that keeps a letter is mined (a template of masks says nothing).
FALLBACK_MASKS: tuple[tuple[str, ...], ...] = (
    tuple(name for name, _ in MASKS if name != "STR"),
    ("NUM",),
)
_LETTER = re.compile(r"[^\W\d_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_MASK_TOKEN = re.compile(r"<(?:" + "|".join(name for name, _ in MASKS) + r")>|<\*>")


def failed(r: Rollout) -> bool:
    """Whether rollout `r` failed: its ending is one of FAILED_ENDINGS, or it has a finite total
    reward ≤ 0 (docs/failures.md "Failed rollouts")."""
    if r.ending.type.value in FAILED_ENDINGS:
        return True
    reward = finite_number(r.total_reward())
    return reward is not None and reward <= 0


def clean(text: object) -> str:
    """A text as it is mined: any value as a string, its first MAX_CHARS characters, control
    characters (NUL included) as spaces, lone surrogates replaced, whitespace runs as one space."""
    s = text if isinstance(text, str) else str(text)
    s = _CONTROL.sub(" ", s[:MAX_CHARS]).encode("utf-8", "replace").decode("utf-8")
    return " ".join(s.split())


def signature_texts(r: Rollout) -> list[tuple[str, str]]:
    """(kind, text) to mine from rollout `r`: kind `error`, `tool_error` or `final_message` (see
    the module's docstring), at most MAX_TEXTS, empty texts left out. Pure; never raises on odd
    content (every value is made a string and cleaned)."""
    out: list[tuple[str, str]] = []
    for e in [*r.errors, *(c.error for c in r.calls if c.error is not None)]:
        out.append(("error", clean(f"{e.type}: {e.message}")))
    for n in r.nodes:
        m = n.message
        if m.role != "tool":
            continue
        text = m.text()
        why = tool_failure(m.extra or {}, text)
        if why is not None:
            own = why not in ("error text", "is_error", "error observation")
            out.append(("tool_error", clean(why if own else text)))
        if len(out) >= MAX_TEXTS:
            break
    if failed(r) and r.ending.type.value != "error":
        last = next((n.message for n in reversed(r.nodes) if n.message.role == "assistant"), None)
        if last is not None:
            out.append(("final_message", clean(last.text())))
    return [(k, t) for k, t in out if t][:MAX_TEXTS]


def _config() -> TemplateMinerConfig:
    """Drain3's settings, in code (no drain3.ini is read)."""
    c = TemplateMinerConfig()
    c.drain_sim_th = SIMILARITY
    c.drain_depth = DEPTH
    c.drain_max_children = 100
    c.drain_max_clusters = None  # no LRU eviction: the cap is ours (a evicted template would lose its number)
    c.drain_extra_delimiters = []
    c.mask_prefix, c.mask_suffix = "<", ">"
    c.parametrize_numeric_tokens = True
    c.profiling_enabled = False
    c.snapshot_interval_minutes = 0
    c.masking_instructions = [MaskingInstruction(pattern, name) for name, pattern in MASKS]
    return c


@dataclass(frozen=True)
class Mined:
    """A text's template: its `number` in the run (OTHER beyond the cap) and text, and whether
    this text created it (`new`) or generalised it (`changed`)."""

    number: int
    template: str
    new: bool = False
    changed: bool = False


class Miner:
    """A Drain3 template miner for one run, restored from the templates stored so far
    (`templates`: (number, template) pairs) and bounded by `cap` templates."""

    def __init__(self, templates: Iterable[tuple[int, str]] = (), *, cap: int = MAX_TEMPLATES):
        self.cap = cap
        self._miner = TemplateMiner(persistence_handler=None, config=_config())
        patterns = dict(MASKS)
        self._fallbacks = [LogMasker([MaskingInstruction(patterns[name], name) for name in names], "<", ">")
                           for names in FALLBACK_MASKS]
        drain = self._miner.drain
        for number, template in templates:
            if number == OTHER:
                continue
            cluster = LogCluster(template.split(), number)
            drain.id_to_cluster[number] = cluster
            drain.add_seq_to_prefix_tree(drain.root_node, cluster)
            drain.clusters_counter = max(drain.clusters_counter, number)

    def __len__(self) -> int:
        return len(self._miner.drain.id_to_cluster)

    def mask(self, text: str) -> str:
        """The text with MASKS applied and cut to MAX_TOKENS tokens (what Drain mines); when that
        keeps no literal word, with the fewer masks of FALLBACK_MASKS (the first that keeps one,
        else the last)."""
        masked = ""
        for masker in (self._miner.masker, *self._fallbacks):
            masked = " ".join(masker.mask(text).split()[:MAX_TOKENS])
            if has_literal(masked):
                break
        return masked

    def mine(self, text: str) -> Mined | None:
        """The template of `text` (a `clean`ed text), learning from it while under the cap; None
        for a text with no token."""
        masked = self.mask(text)
        if not masked:
            return None
        drain = self._miner.drain
        if len(self) >= self.cap:
            # full: only a template the text fits exactly (its parameters aside) may take it
            cluster = drain.tree_search(drain.root_node, drain.get_content_as_tokens(masked), 1.0, True)
            return Mined(cluster.cluster_id, cluster.get_template()) if cluster else Mined(OTHER, OTHER_TEMPLATE)
        cluster, change = drain.add_log_message(masked)
        return Mined(cluster.cluster_id, cluster.get_template(), new=change == "cluster_created",
                     changed=change == "cluster_template_changed")


def has_literal(template: str) -> bool:
    """Whether a (masked) text keeps a literal word: a letter outside its parameters."""
    return _LETTER.search(_MASK_TOKEN.sub(" ", template)) is not None


def is_parameter(token: str) -> bool:
    """Whether a template token is a parameter (`<NUM>`, `<PATH>`, ..., Drain's `<*>`)."""
    return _MASK_TOKEN.fullmatch(token) is not None


SURGE_MIN = 5  # failed rollouts at a step, at least, for a signature to be "new at" that step
SURGE_FACTOR = 3.0  # ... and at least this many times its mean per step over the earlier steps
MIN_HISTORY = 3  # ... with at least this many earlier steps of the run to compare with


def new_at_step(steps: list[int], counts: dict[int, int]) -> int | None:
    """The step at which a signature arrived, or None: the first step with at least MIN_HISTORY
    earlier steps of the run (`steps`: the run's steps, in order) where its count (`counts`: step
    → failed rollouts carrying it) is at least SURGE_MIN and at least SURGE_FACTOR times its mean
    count per step over every earlier step of the run (steps without it count 0). A signature never
    seen before arrives at the first such step it reaches SURGE_MIN; one that was always there at a
    low rate arrives where it surges (the demo's sandbox crash: a few a step, then 20 at step 18).
    Over fewer earlier steps there is no history to be new against (1 at step 0, then 5 at step 1
    is no arrival)."""
    total = 0
    for i, step in enumerate(steps):
        n = counts.get(step, 0)
        if i >= MIN_HISTORY and n >= SURGE_MIN and n >= SURGE_FACTOR * total / i:
            return step
        total += n
    return None
