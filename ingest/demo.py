"""A synthetic, deterministic demo run in the native `rollscope/1` format.

`generate()` yields the rollouts of a small GRPO-style training run of a tool-using agent;
`write()` stores them as native JSONL. The run is fake but shaped like a real one, so every page
of the viewer has something to show: a reward curve that rises over training steps, groups with
mixed outcomes, every ending type (with a short sandbox-crash incident), token arrays with loss
masks, behaviour logprobs and errors-dropped GRPO advantages, a policy version that lags the
training step, and a few tool outputs carrying HTML (trace text is untrusted input; the viewer
must show it as text). docs/demo.md describes the model and its distributions.

Determinism: all randomness comes from one `random.Random(seed)`, drawn in a fixed order, and
all timestamps are offsets from a fixed epoch. The same arguments give a byte-identical file.
Token ids come from a toy word-level tokenizer (`ToyTokenizer`): words and punctuation (with
their leading space) hashed with CRC-32 into ids below 32000, stable across processes (Python's
`hash()` is salted; CRC-32 is not), with collisions resolved by probing in first-seen order.
`write()` also writes the run's vocabulary as a HuggingFace tokenizer.json, so the viewer can
show token text (`rollscope ingest RUN.jsonl --tokenizer RUN.tokenizer.json`).
"""
from __future__ import annotations

import json
import math
import random
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from hashlib import sha256
from pathlib import Path
from typing import Any

from ingest.schema import SCHEMA_VERSION, Rollout

__all__ = ["generate", "write", "write_tokenizer", "tokenizer_path", "tokenize", "ToyTokenizer",
           "TASKS", "MAX_TURNS", "MAX_TOKENS", "MODEL"]

RUN_NAME = "Demo GRPO run (synthetic)"
MODEL = "rollscope/toy-agent-1b"
MAX_TURNS = 6             # assistant turns per rollout; the 6th tool-calling turn truncates
MAX_TOKENS = 512          # per-call output cap; a call that reaches it ends with `length`
TEMPERATURE = 1.0
EPOCH = 1_767_225_600.0   # 2026-01-01T00:00:00Z: fixed, so timestamps never depend on the clock
STEP_SECONDS = 150.0      # wall-clock spacing of training steps

# --- toy tokenizer ---------------------------------------------------------------------------
#
# One token per piece of `_PIECE`: a word or a punctuation mark, each with the single space in
# front of it if there was one (" look", " ("), a newline, or a run of other whitespace (the
# indentation in front of a word keeps its last space for the word: "    x" = "   " + " x").
# The pieces of a text concatenate back to the text exactly, so a vocabulary of pieces decodes
# every body losslessly. A piece's id is `16 + crc32(piece) mod 31984`, stable across processes
# (Python's `hash()` is salted; CRC-32 is not); when that id is already taken by another piece,
# the piece takes the next free id (linear probing, wrapping within 16..31999). A `ToyTokenizer`
# remembers its assignments, so one tokenizer used for one whole run is collision-free and
# its vocabulary (`to_json()`) decodes every id of the run.

VOCAB_SIZE = 32_000
UNK, IM_START, IM_END = 0, 1, 2                           # chat-template scaffold (+ unknown)
ROLE_TOKEN = {"system": 3, "user": 4, "assistant": 5, "tool": 6}
_FIRST_WORD_ID = 16                                       # ids below this are reserved
_PIECE_PATTERN = r" ?\w+| ?[^\w\s]|\n|[^\S\n]+(?!\S)|[^\S\n]+"
_PIECE = re.compile(_PIECE_PATTERN)
# Reserved ids and their pieces. Role pieces end in "\n" as in ChatML ("<|im_start|>user\n");
# `_PIECE` always yields a newline as a piece of its own, so no text piece can equal them.
_RESERVED: dict[int, str] = {UNK: "<unk>", IM_START: "<|im_start|>", IM_END: "<|im_end|>",
                             **{i: f"{role}\n" for role, i in ROLE_TOKEN.items()}}
_SPECIAL_IDS = (UNK, IM_START, IM_END)


def _crc_id(piece: str) -> int:
    return _FIRST_WORD_ID + zlib.crc32(piece.encode()) % (VOCAB_SIZE - _FIRST_WORD_ID)


class ToyTokenizer:
    """The demo's word-level tokenizer; ids are assigned on first sight, collision-free.

    Deterministic: the same texts encoded in the same order give the same ids. A piece keeps its
    CRC-32 id unless an earlier piece of this tokenizer already holds it (then it probes on).
    """

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}       # piece → id
        self._pieces: dict[int, str] = {}    # id → piece (word ids only)

    def encode(self, text: str) -> list[int]:
        ids = self._ids
        out = []
        for p in _PIECE.findall(text):
            i = ids.get(p)
            out.append(self._assign(p) if i is None else i)
        return out

    def _assign(self, piece: str) -> int:
        if len(self._pieces) >= VOCAB_SIZE - _FIRST_WORD_ID:
            raise ValueError(f"toy vocabulary is full ({VOCAB_SIZE} ids)")
        i = _crc_id(piece)
        while i in self._pieces:
            i = _FIRST_WORD_ID + (i + 1 - _FIRST_WORD_ID) % (VOCAB_SIZE - _FIRST_WORD_ID)
        self._ids[piece] = i
        self._pieces[i] = piece
        return i

    def pieces(self) -> dict[int, str]:
        """Every id this tokenizer can emit → its piece (reserved ids included), sorted by id."""
        return dict(sorted({**_RESERVED, **self._pieces}.items()))

    def to_json(self) -> str:
        """A HuggingFace tokenizer.json (WordLevel) for the ids assigned so far.

        `tokenizers.Tokenizer.from_file` loads it; its `Split` pre-tokenizer is `_PIECE`, so
        encoding a text seen by this tokenizer gives the same ids, and its `Fuse` decoder joins
        pieces without adding spaces. Pieces are stored as text, with a real space in front of a
        word (`ingest.tokenizer` maps a non-byte-level piece to its UTF-8 bytes).
        """
        vocab = {p: i for i, p in self.pieces().items()}
        doc = {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": [{"id": i, "content": _RESERVED[i], "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}
                             for i in _SPECIAL_IDS],
            "normalizer": None,
            "pre_tokenizer": {"type": "Split", "pattern": {"Regex": _PIECE_PATTERN},
                              "behavior": "Isolated", "invert": False},
            "post_processor": None,
            "decoder": {"type": "Fuse"},
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": _RESERVED[UNK]},
        }
        return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"

    def write(self, path: str | Path) -> None:
        Path(path).write_bytes(self.to_json().encode("utf-8"))


def tokenize(text: str) -> list[int]:
    """Toy token ids for `text` alone (a fresh `ToyTokenizer`): one id per piece.

    In a generated run a piece whose CRC-32 id collides with an earlier piece of the run gets a
    probed id, so ids there can differ from this for the (rare) colliding pieces.
    """
    return ToyTokenizer().encode(text)


def _count(text: str) -> int:
    return len(_PIECE.findall(text))


def _cut(text: str, n: int) -> str:
    """The prefix of `text` that tokenizes to exactly its first `n` tokens."""
    end = 0
    for i, m in enumerate(_PIECE.finditer(text)):
        if i == n:
            break
        end = m.end()
    return text[:end]


# --- tasks -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CalcTask:
    """Arithmetic with a `calculator` tool. `steps` are expressions; `{i}` is step i's result."""

    key: str
    prompt: str
    steps: tuple[str, ...]
    difficulty: float = 0.0       # added to the step's success probability
    parallel: int = 0             # the first `parallel` steps may be called in one turn
    weight: float = 1.0


@dataclass(frozen=True)
class EditTask:
    """A one-file fix in a sandboxed repo, with `read_file`, `edit_file` and `run_tests` tools."""

    key: str
    prompt: str
    path: str
    content: str
    old: str
    new: str
    wrong_old: str
    wrong_new: str
    failing: str                  # `run_tests` output before the fix (and after a wrong fix)
    passing: str
    difficulty: float = 0.0
    tests_first: bool = False     # the agent always reproduces the failure first
    weight: float = 1.0


_PASS = "{tests} {dots}  [100%]\n{n} passed in 0.{ms:02d}s"

TASKS: tuple[CalcTask | EditTask, ...] = (
    CalcTask("calc/17x23-plus-4", "What is 17 * 23 + 4?", ("17 * 23", "{0} + 4"), 0.10),
    CalcTask("calc/pens-discount",
             "Pens cost $3.75 each. What do 12 pens cost after a 15% discount?",
             ("3.75 * 12", "{0} * 0.85"), -0.05),
    CalcTask("calc/sum-of-squares", "What is the sum of the squares of the integers 1 through 10?",
             ("1**2 + 2**2 + 3**2 + 4**2 + 5**2 + 6**2 + 7**2 + 8**2 + 9**2 + 10**2",), 0.05),
    CalcTask("calc/train-speed",
             "A train covers 342 km in 3.6 hours. What is its average speed in km/h?",
             ("342 / 3.6",), 0.12),
    CalcTask("calc/seconds-in-week", "How many seconds are there in 7 days?",
             ("7 * 24 * 60 * 60",), 0.15),
    CalcTask("calc/two-products", "Add 48 * 12 to 1296 / 6. What is the result?",
             ("48 * 12", "1296 / 6", "{0} + {1}"), -0.10, parallel=2),
    CalcTask("calc/compound-interest",
             "$2500 is invested at 4% interest compounded yearly. What is it worth after 3 years, "
             "to the cent?", ("2500 * 1.04 ** 3",), -0.15),
    EditTask(
        "edit/port-9090",
        "In config/settings.yaml, change the server port from 8080 to 9090. "
        "tests/test_config.py checks the value.",
        "config/settings.yaml",
        "server:\n  host: 0.0.0.0\n  port: 8080\n  workers: 4\nlogging:\n  level: info\n",
        "port: 8080", "port: 9090", "port: 8080", "port: 9009",
        "FAILED tests/test_config.py::test_port - AssertionError: assert 8080 == 9090\n"
        "1 failed, 3 passed in 0.04s",
        _PASS.format(tests="tests/test_config.py", dots="....", n=4, ms=3), 0.15),
    EditTask(
        "edit/paginate-off-by-one",
        "utils/paginate.py drops the last page when the items do not divide evenly. Fix it.",
        "utils/paginate.py",
        'def pages(items, size):\n    """Split items into pages of `size`."""\n'
        "    return [items[i:i + size] for i in range(0, len(items) - size, size)]\n",
        "range(0, len(items) - size, size)", "range(0, len(items), size)",
        "range(0, len(items) - size, size)", "range(1, len(items), size)",
        "FAILED tests/test_paginate.py::test_last_page - assert [[1, 2], [3, 4]] == "
        "[[1, 2], [3, 4], [5]]\n1 failed, 2 passed in 0.02s",
        _PASS.format(tests="tests/test_paginate.py", dots="...", n=3, ms=2), -0.05),
    EditTask(
        "edit/rename-calc-total",
        "Rename calc_total to compute_total in billing.py and update every call site.",
        "billing.py",
        "def calc_total(lines):\n    return sum(l.price * l.qty for l in lines)\n\n\n"
        'def invoice(lines):\n    return {"total": calc_total(lines)}\n',
        "calc_total", "compute_total", "def calc_total", "def compute_total",
        "FAILED tests/test_billing.py::test_invoice - NameError: name 'calc_total' is not defined\n"
        "1 failed, 1 passed in 0.03s",
        _PASS.format(tests="tests/test_billing.py", dots="..", n=2, ms=3), 0.0),
    EditTask(
        "edit/iso-date-z",
        "parse_date in dates.py must accept ISO timestamps with a trailing Z, like "
        "2024-05-01T10:00:00Z. Make tests/test_dates.py pass.",
        "dates.py",
        "from datetime import datetime\n\n\ndef parse_date(s):\n"
        '    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S")\n',
        'datetime.strptime(s, "%Y-%m-%dT%H:%M:%S")',
        'datetime.fromisoformat(s.replace("Z", "+00:00"))',
        'datetime.strptime(s, "%Y-%m-%dT%H:%M:%S")',
        'datetime.strptime(s.rstrip("Z"), "%Y-%m-%d")',
        "FAILED tests/test_dates.py::test_trailing_z - ValueError: unconverted data remains: Z\n"
        "1 failed, 4 passed in 0.05s",
        _PASS.format(tests="tests/test_dates.py", dots=".....", n=5, ms=4), -0.12),
    EditTask(
        "edit/missing-import",
        "scripts/cleanup.py crashes with a NameError. Fix it so the tests pass.",
        "scripts/cleanup.py",
        "import shutil\n\n\ndef clean(path):\n    if os.path.exists(path):\n"
        "        shutil.rmtree(path)\n",
        "import shutil", "import os\nimport shutil", "import shutil", "import sys\nimport shutil",
        "FAILED tests/test_cleanup.py::test_clean - NameError: name 'os' is not defined\n"
        "1 failed in 0.02s",
        _PASS.format(tests="tests/test_cleanup.py", dots="..", n=2, ms=2), 0.10),
    # Deliberately hostile text: the payloads reach tool output and must render as text.
    EditTask(
        "edit/escape-greeting",
        "A user registered with the name <img src=x onerror=alert(1)> and the greeting page ran "
        "it. Make templates/greeting.html escape user data; tests/test_xss.py must pass.",
        "templates/greeting.html",
        "<!-- greeting shown after login -->\n<h1>Hello, {{ user.name|safe }}!</h1>\n"
        "<p>Your last search: {{ last_query|safe }}</p>\n",
        "|safe }}", " }}", "{{ user.name|safe }}", "{{ user.name }}",
        "FAILED tests/test_xss.py::test_user_data_escaped - AssertionError: raw HTML in page:\n"
        "<h1>Hello, <script>alert(1)</script>!</h1>\n"
        "<p>Your last search: <img src=x onerror=alert(1)></p>\n1 failed, 1 passed in 0.06s",
        _PASS.format(tests="tests/test_xss.py", dots="..", n=2, ms=6), -0.08,
        tests_first=True, weight=0.2),
)
_HTML_TASK = next(t for t in TASKS if t.key == "edit/escape-greeting")

_CALC_SYSTEM = ("You are a careful assistant. Use the calculator tool for arithmetic. When you are "
                "done, reply with a final line of the form `Answer: <number>`.")
_EDIT_SYSTEM = ("You are a coding agent in a sandboxed repository. Use the tools to read and edit "
                "files and to run the tests. When the task is done, reply with a line "
                "`Summary: <what you changed>`.")

_CALC_TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}]
_EDIT_TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file from the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                       "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "edit_file", "description": "Replace every occurrence of `old` with `new` in a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
            "required": ["path", "old", "new"]}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run the repository's test suite.",
        "parameters": {"type": "object", "properties": {}}}},
]


@lru_cache(maxsize=None)
def _task_ref_cached(task: CalcTask | EditTask) -> str:
    return json.dumps(_task_ref_uncached(task))


def _task_ref(task: CalcTask | EditTask) -> dict[str, Any]:
    """`Task` of the envelope: type, key, prompt (and answer), and a hash of key and prompt."""
    return json.loads(_task_ref_cached(task))


def _task_ref_uncached(task: CalcTask | EditTask) -> dict[str, Any]:
    if isinstance(task, CalcTask):
        kind, data = "calculator", {"prompt": task.prompt, "answer": _fmt(_run_steps(task.steps)[-1])}
    else:
        kind, data = "file_edit", {"prompt": task.prompt, "path": task.path}
    return {"type": kind, "key": task.key, "data": data,
            "hash": sha256(f"{task.key}\n{task.prompt}".encode()).hexdigest()[:16]}


# --- arithmetic ------------------------------------------------------------------------------

def _eval(expr: str) -> float:
    # Only ever our own expressions (digits, operators, spaces, parentheses).
    return float(eval(expr, {"__builtins__": {}}, {}))  # noqa: S307


def _fmt(x: float) -> str:
    x = round(x, 2)
    return str(int(x)) if x == int(x) else f"{x:.2f}".rstrip("0")


def _run_steps(steps: tuple[str, ...] | list[str]) -> list[float]:
    results: list[float] = []
    for s in steps:
        results.append(_eval(s.format(*[_fmt(r) for r in results])))
    return results


def _literals(expr: str) -> list[re.Match[str]]:
    """Integer literals that can be changed: not a `{i}` placeholder, not part of a decimal."""
    return [m for m in re.finditer(r"\d+", expr)
            if not (m.start() > 0 and expr[m.start() - 1] in "{.")
            and not (m.end() < len(expr) and expr[m.end()] in "}.")]


def _perturb(expr: str, rng: random.Random) -> str:
    """A plausible slip: one integer literal with swapped digits or off by one."""
    m = rng.choice(_literals(expr))
    digits = m.group()
    if len(digits) > 1 and digits[-1] != "0" and digits[0] != digits[-1] and rng.random() < 0.5:
        new = digits[::-1]
    else:
        new = str(max(1, int(digits) + rng.choice((-1, 1))) if digits != "1" else 2)
    return expr[:m.start()] + new + expr[m.end():]


def _wrong_steps(steps: tuple[str, ...], rng: random.Random) -> list[str]:
    """`steps` with one slip that changes the final answer."""
    answer = _fmt(_run_steps(steps)[-1])
    candidates = [i for i, e in enumerate(steps) if _literals(e)]
    for _ in range(20):
        out = list(steps)
        i = rng.choice(candidates)
        out[i] = _perturb(out[i], rng)
        if _fmt(_run_steps(out)[-1]) != answer:
            return out
    out = list(steps)
    out[-1] = f"({out[-1]}) + 1"
    return out


# --- one rollout's script --------------------------------------------------------------------

@dataclass
class _Call:
    name: str
    arguments: str
    result: str


@dataclass
class _Turn:
    """One assistant turn: what it says, its tool calls (with their results) and how it ended."""

    content: str | None = None
    reasoning: str | None = None
    calls: list[_Call] = field(default_factory=list)
    finish: str = "tool_call"


def _args(**kw: str) -> str:
    return json.dumps(kw)


def _calc_call(expr: str, *, malformed: bool = False) -> _Call:
    if malformed:
        return _Call("calculator", '{"expression": "' + expr + '"',
                     "Error: arguments are not valid JSON (expected '}' at end of input)")
    return _Call("calculator", _args(expression=expr), _fmt(_eval(expr)))


def _calc_script(task: CalcTask, correct: bool, rng: random.Random, fmt_ok: bool) -> tuple[list[_Turn], bool]:
    """Tool turns then a final answer. Returns (turns, any_malformed_call)."""
    answer = _fmt(_run_steps(task.steps)[-1])
    steps = list(task.steps) if correct else _wrong_steps(task.steps, rng)
    if not correct and rng.random() < 0.4:
        # Answers from memory and gets it wrong: a one-turn rollout.
        guess = _fmt(_run_steps(steps)[-1])
        return [_final_calc(guess, fmt_ok, rng, "I can do this one in my head.")], False
    if correct and len(steps) == 1 and rng.random() < 0.15:
        return [_final_calc(answer, fmt_ok, rng, "This is quick to compute directly.")], False
    results: list[float] = []
    turns: list[_Turn] = []
    malformed = False
    k = 0
    if task.parallel and rng.random() < 0.5:
        exprs = steps[:task.parallel]
        turns.append(_Turn(reasoning=rng.choice(_THINK_PARALLEL),
                           calls=[_calc_call(e) for e in exprs]))
        results += [_eval(e) for e in exprs]
        k = task.parallel
    for expr in steps[k:]:
        expr = expr.format(*[_fmt(r) for r in results])
        if not malformed and rng.random() < 0.08:
            malformed = True
            turns.append(_Turn(reasoning=rng.choice(_THINK_CALC), calls=[_calc_call(expr, malformed=True)]))
        turns.append(_Turn(reasoning=rng.choice(_THINK_CALC), calls=[_calc_call(expr)]))
        results.append(_eval(expr))
    if rng.random() < 0.2:
        turns.append(_Turn(content="Let me double-check the last step.", calls=[_calc_call(expr)]))
    turns = turns[:MAX_TURNS - 1]
    turns.append(_final_calc(_fmt(results[-1]), fmt_ok, rng, None))
    return turns, malformed


_THINK_CALC = ("I'll use the calculator for this step.", "Compute this part first.",
               "Next, the calculator.", "Let me evaluate the expression.")
_THINK_PARALLEL = ("The two products are independent; compute both at once.",)


def _final_calc(answer: str, fmt_ok: bool, rng: random.Random, reasoning: str | None) -> _Turn:
    if fmt_ok:
        text = rng.choice(("The result is {a}.\nAnswer: {a}", "Answer: {a}",
                           "So the value is {a}.\nAnswer: {a}")).format(a=answer)
    else:
        text = rng.choice(("The answer is {a}.", "It comes to {a}.")).format(a=answer)
    return _Turn(content=text, reasoning=reasoning, finish="stop")


def _edit_script(task: EditTask, correct: bool, rng: random.Random, fmt_ok: bool,
                 detect: bool) -> tuple[list[_Turn], bool]:
    """read → (tests) → edit → tests → summary. With `detect`, the episode ends at the tool
    result that the environment recognises (passing tests, or a destroyed file)."""
    turns: list[_Turn] = []
    if task.tests_first or rng.random() < 0.4:
        turns.append(_Turn(reasoning="Reproduce the failure first.",
                           calls=[_Call("run_tests", "{}", task.failing)]))
    turns.append(_Turn(content=f"Let me look at {task.path}.",
                       calls=[_Call("read_file", _args(path=task.path), task.content)]))
    if not correct and detect:
        # Unrecoverable: the agent blanks the file; the environment ends the episode.
        turns.append(_Turn(reasoning="Rewrite the file from scratch.",
                           calls=[_Call("edit_file", _args(path=task.path, old=task.content, new=""),
                                        f"Edited {task.path}: the file is now empty.")]))
        return turns, False
    malformed = False
    if rng.random() < 0.06:
        malformed = True
        turns.append(_Turn(calls=[_Call("edit_file", '{"path": "' + task.path + '", "old": ',
                                        "Error: arguments are not valid JSON")]))
    old, new = (task.old, task.new) if correct else (task.wrong_old, task.wrong_new)
    count = max(1, task.content.count(old))
    edited = f"Edited {task.path}: {count} replacement{'s' if count > 1 else ''}."
    if not correct and len(turns) == 1 and rng.random() < 0.5:
        # Sees the wrong fix fail, then repeats the same edit (which no longer matches).
        turns.append(_Turn(calls=[_Call("edit_file", _args(path=task.path, old=old, new=new), edited)]))
        turns.append(_Turn(calls=[_Call("run_tests", "{}", task.failing)]))
        edited = f"Error: `old` text not found in {task.path}"
    turns.append(_Turn(reasoning="Apply the fix.",
                       calls=[_Call("edit_file", _args(path=task.path, old=old, new=new), edited)]))
    turns.append(_Turn(content="Run the tests.",
                       calls=[_Call("run_tests", "{}", task.passing if correct else task.failing)]))
    assert len(turns) < MAX_TURNS
    if detect:
        return turns, malformed
    summary = f"I changed {task.path}: replaced `{old}` with `{new}`."
    text = f"{summary}\nSummary: fixed {task.path}." if fmt_ok else summary
    turns.append(_Turn(content=text, finish="stop"))
    return turns, malformed


def _loop_script(task: CalcTask | EditTask, rng: random.Random, fixed: bool = False) -> list[_Turn]:
    """MAX_TURNS tool-calling turns that never finish (the rollout is truncated). With `fixed`,
    the right edit went in early and the agent keeps re-reading instead of submitting."""
    turns: list[_Turn] = []
    if isinstance(task, CalcTask):
        expr = task.steps[0].format(*["1"] * 4)
        while len(turns) < MAX_TURNS:
            turns.append(_Turn(content=rng.choice(("Let me verify that again.", "Once more, to be sure.",
                                                   "I should recompute this.")),
                               calls=[_calc_call(expr)]))
        return turns
    read = _Call("read_file", _args(path=task.path), task.content)
    turns.append(_Turn(calls=[read]))
    if fixed:
        turns.append(_Turn(reasoning="Apply the fix.", calls=[_Call(
            "edit_file", _args(path=task.path, old=task.old, new=task.new), f"Edited {task.path}.")]))
        reread = _Call("read_file", read.arguments, task.content.replace(task.old, task.new))
        while len(turns) < MAX_TURNS:
            turns.append(_Turn(content="Let me re-read the file to be sure.", calls=[reread]))
        return turns
    while len(turns) < MAX_TURNS:
        if len(turns) % 2:
            turns.append(_Turn(content="Try another edit.", calls=[_Call(
                "edit_file", _args(path=task.path, old=task.wrong_old, new=task.wrong_new),
                f"Edited {task.path}: 1 replacement.")]))
        else:
            turns.append(_Turn(calls=[_Call("run_tests", "{}", task.failing)]))
    return turns


def _runaway(task: CalcTask | EditTask) -> _Turn:
    """A generation that repeats itself until it hits MAX_TOKENS."""
    if isinstance(task, CalcTask):
        expr = task.steps[0].format(*["1"] * 4)
        unit = f"Wait, let me re-check {expr} = {_fmt(_eval(expr))} before answering. "
    else:
        unit = f"Hmm, maybe the problem is elsewhere in {task.path}; let me reconsider the edit. "
    text = unit * (MAX_TOKENS // max(1, _count(unit.rstrip())) + 2)   # " Wait" takes the space
    return _Turn(content=_cut(text, MAX_TOKENS), finish="length")


# --- rendering a script into nodes and calls -------------------------------------------------

def _sampled_text(turn: _Turn) -> str:
    """What the model sampled for `turn`, as one string (call ids are assigned by the server)."""
    parts = []
    if turn.reasoning:
        parts.append(f"<think>{turn.reasoning}</think>")
    if turn.content:
        parts.append(turn.content)
    for c in turn.calls:
        parts.append(f'<tool_call>{{"name": "{c.name}", "arguments": {c.arguments}}}</tool_call>')
    return "\n".join(parts)


def _prompt_node(tok: ToyTokenizer, role: str, message: dict[str, Any], parent: int | None, ts: float,
                 tokenized: bool = True) -> dict[str, Any]:
    if not tokenized:  # the environment message of a terminal step: nothing follows it
        return {"parent": parent, "message": message, "timestamp": ts}
    body = tok.encode(message.get("content") or "")
    ids = [IM_START, ROLE_TOKEN[role], *body, IM_END]
    n = len(body)
    return {"parent": parent, "message": message, "timestamp": ts, "token_ids": ids,
            "mask": [False] * len(ids), "is_content": [False, False] + [True] * n + [False],
            "logprobs": [None] * len(ids)}


def _logprobs(n: int, rate: float, rng: random.Random) -> list[float]:
    """Behaviour logprobs: mostly confident tokens, a heavy tail of unlikely ones."""
    ex = rng.expovariate
    return [-round(ex(rate) + 1e-4, 4) for _ in range(n)]


@dataclass
class _Plan:
    task: CalcTask | EditTask
    ending: str
    detail: str
    turns: list[_Turn]
    terminal_result: bool       # keep the last tool result as an untokenized terminal node
    correct: float
    fmt: float
    error: dict[str, Any] | None = None


def _render(plan: _Plan, versions: list[int], t0: float, rate: float, rng: random.Random,
            tok: ToyTokenizer) -> dict[str, Any]:
    """Nodes, calls, timing and ending of one rollout (advantages are filled in later)."""
    task = plan.task
    system = _CALC_SYSTEM if isinstance(task, CalcTask) else _EDIT_SYSTEM
    nodes = [_prompt_node(tok, "system", {"role": "system", "content": system}, None, t0),
             _prompt_node(tok, "user", {"role": "user", "content": task.prompt}, 0, t0)]
    calls: list[dict[str, Any]] = []
    context = len(nodes[0]["token_ids"]) + len(nodes[1]["token_ids"])
    cached = len(nodes[0]["token_ids"])      # the system prompt is shared across the group
    clock = round(t0 + rng.uniform(0.01, 0.05), 3)
    model_s = tool_s = 0.0
    sampled_total = 0
    last_output = 0
    for ti, turn in enumerate(plan.turns):
        last_turn = ti == len(plan.turns) - 1
        call_ids = [f"call_{rng.getrandbits(40):010x}" for _ in turn.calls]
        body = tok.encode(_sampled_text(turn))
        if turn.finish == "length":
            body = body[:MAX_TOKENS]
        n = len(body)
        ids = [IM_START, ROLE_TOKEN["assistant"], *body, IM_END]
        version = versions[min(ti, len(versions) - 1)]
        input_tokens = context + 2
        latency = round(0.12 + 0.0002 * input_tokens + 0.016 * n + rng.uniform(0.0, 0.3), 3)
        start, clock = clock, round(clock + latency, 3)
        model_s += latency
        message: dict[str, Any] = {"role": "assistant", "content": turn.content}
        if turn.reasoning:
            message["reasoning_content"] = turn.reasoning
        if turn.calls:
            message["tool_calls"] = [{"id": cid, "name": c.name, "arguments": c.arguments}
                                     for c, cid in zip(turn.calls, call_ids)]
        lps = _logprobs(n, rate * (3.0 if turn.finish == "length" else 1.0), rng)
        nodes.append({"parent": len(nodes) - 1, "message": message, "sampled": True,
                      "timestamp": clock, "token_ids": ids,
                      "mask": [False, False] + [True] * n + [False],
                      "is_content": [False, False] + [True] * n + [False],
                      "logprobs": [None, None, *lps, None], "policy_version": version})
        calls.append({"node": len(nodes) - 1, "model": MODEL, "endpoint": "/chat/completions",
                      "sampling": {"temperature": TEMPERATURE, "max_tokens": MAX_TOKENS},
                      "finish_reason": turn.finish,
                      "usage": {"input_tokens": input_tokens, "output_tokens": n,
                                "cache_read_input_tokens": cached},
                      "time": {"start": start, "end": clock}, "policy_version": version})
        sampled_total += n
        last_output = n
        context += len(ids)
        cached = context
        if plan.error is not None and last_turn:
            # The sandbox dies while running the tool: no result is recorded.
            crash = round(rng.uniform(0.5, 8.0), 3)
            clock = round(clock + crash, 3)
            tool_s += crash
            break
        for c, cid in zip(turn.calls, call_ids):
            dur = round(rng.uniform(0.8, 4.0) if c.name == "run_tests" else rng.uniform(0.01, 0.12), 3)
            clock = round(clock + dur, 3)
            tool_s += dur
            msg = {"role": "tool", "content": c.result, "tool_call_id": cid, "name": c.name}
            terminal = last_turn and plan.terminal_result
            node = _prompt_node(tok, "tool", msg, len(nodes) - 1, clock, tokenized=not terminal)
            nodes.append(node)
            context += len(node.get("token_ids", ()))
    agent_end = clock
    timing: dict[str, Any] = {"start": t0, "agent": {"start": t0, "end": agent_end,
                                                     "model": {"duration": round(model_s, 3)},
                                                     "harness": {"duration": round(tool_s, 3)}}}
    end = agent_end
    if plan.error is None:
        end = round(agent_end + rng.uniform(0.05, 0.4), 3)
        timing["scoring"] = {"start": agent_end, "end": end}
    timing["end"] = end
    turns = len(plan.turns)
    n_tool_calls = sum(len(t.calls) for t in plan.turns)
    executed = plan.turns[:-1] if plan.error is not None else plan.turns
    tool_errors = sum(1 for t in executed for c in t.calls if c.result.startswith("Error:"))
    return {
        "nodes": nodes, "calls": calls, "timing": timing,
        "metrics": {"num_turns": float(turns), "num_tool_calls": float(n_tool_calls),
                    "output_tokens": float(sampled_total), "tool_errors": float(tool_errors)},
        "evidence": {"last_finish_reason": calls[-1]["finish_reason"], "output_tokens": sampled_total,
                     "last_output_tokens": last_output, "last_output_token_cap": MAX_TOKENS, "turns": turns, "max_turns": MAX_TURNS},
    }


# --- the training dynamics -------------------------------------------------------------------

_STOP_CONDITION = {"submitted": "final_answer", "task_detected": "env_done", "truncated": "max_turns",
                   "length_cut": "max_output_tokens", "error": "error"}


def _success_curve(t: float) -> float:
    """Mean success probability at training progress t ∈ [0, 1]: 0.2 → 0.75, fast then slower."""
    k = 2.5
    return 0.2 + 0.55 * (1 - math.exp(-k * t)) / (1 - math.exp(-k))


def _incidents(steps: int, rng: random.Random) -> dict[int, float]:
    """A few steps where sandbox hosts fail: extra error probability per (bad-host) rollout."""
    out: dict[int, float] = {}
    window = range(steps // 5, steps - steps // 5)     # mid-run, so the chart's ends stay clean
    if steps < 3:
        return out
    for s in rng.sample(window, min(len(window), max(1, steps // 12))):
        peak = rng.uniform(0.45, 0.7)
        out[s] = max(out.get(s, 0.0), peak)
        if s + 1 < steps:
            out[s + 1] = max(out.get(s + 1, 0.0), peak / 2)
    return out


def _plan(task: CalcTask | EditTask, p_correct: float, p_err: float, t: float,
          rng: random.Random) -> _Plan:
    """Draw one rollout: its ending first, then correctness and the conversation."""
    u = rng.random()
    p_len = 0.06 - 0.04 * t
    p_trunc = 0.12 - 0.08 * t
    fmt_ok = rng.random() < 0.75 + 0.22 * t
    is_calc = isinstance(task, CalcTask)
    if u < p_err:
        correct = rng.random() < p_correct
        turns, _ = (_calc_script(task, correct, rng, fmt_ok) if is_calc
                    else _edit_script(task, correct, rng, fmt_ok, detect=False))
        tool_turns = [i for i, tr in enumerate(turns) if tr.calls]
        if not tool_turns:
            turns = _loop_script(task, rng)
            tool_turns = list(range(len(turns)))
        cut = rng.choice(tool_turns)
        crashed = turns[cut].calls[0].name
        if rng.random() < 0.8 or p_err > 0.2:
            detail, err = "sandbox_crash", {
                "type": "SandboxCrash", "message": f"sandbox exited with code 137 (host lost) while "
                f"running {crashed}"}
        else:
            detail, err = "tool_server_unavailable", {
                "type": "ToolServerError", "status_code": 503,
                "message": f"tool server returned 503 Service Unavailable for {crashed}"}
        return _Plan(task, "error", detail, turns[:cut + 1], False, 0.0, 0.0, err)
    if u < p_err + p_len:
        correct = rng.random() < p_correct
        turns, _ = (_calc_script(task, correct, rng, fmt_ok) if is_calc
                    else _edit_script(task, correct, rng, fmt_ok, detect=False))
        cut = rng.randrange(len(turns))
        return _Plan(task, "length_cut", "max_output_tokens", turns[:cut] + [_runaway(task)],
                     False, 0.0, 0.0)
    if u < p_err + p_len + p_trunc:
        # Scored by the task's normal scorer on the final state: a file fix may already be in.
        fixed = not is_calc and rng.random() < 0.3 * p_correct
        return _Plan(task, "truncated", "max_turns", _loop_script(task, rng, fixed), True,
                     1.0 if fixed else 0.0, 0.0)
    correct = rng.random() < p_correct
    if is_calc:
        turns, malformed = _calc_script(task, correct, rng, fmt_ok)
        return _Plan(task, "submitted", "final_answer", turns, False, float(correct),
                     float(fmt_ok and not malformed))
    detect = rng.random() < (0.5 if correct else 0.12)
    turns, malformed = _edit_script(task, correct, rng, fmt_ok, detect=detect)
    if detect:
        return _Plan(task, "task_detected", "goal_reached" if correct else "unrecoverable_state",
                     turns, True, float(correct), float(not malformed))
    return _Plan(task, "submitted", "final_answer", turns, False, float(correct),
                 float(fmt_ok and not malformed))


def _versions(step: int, n_turns: int, rng: random.Random) -> list[int]:
    """Policy version per call: the step, or one behind (async RL), syncing mid-rollout sometimes."""
    if step == 0 or rng.random() < 0.4:
        return [step] * n_turns
    if n_turns > 1 and rng.random() < 0.25:
        sync = rng.randrange(1, n_turns)
        return [step - 1] * sync + [step] * (n_turns - sync)
    return [step - 1] * n_turns


def generate(*, run_id: str = "demo-grpo", steps: int = 30, groups: int = 8, group_size: int = 8,
             seed: int = 0, tokenizer: ToyTokenizer | None = None) -> Iterator[Rollout]:
    """Yield the rollouts of a synthetic GRPO run, step by step, group by group.

    Rollout ids are `s{step:03d}-g{group}-r{index}`; groups are `s{step:03d}-g{group}`. Advantages
    use the errors-dropped baseline: reward minus the mean reward of the group's non-error
    rollouts; error rollouts get none.

    Token ids come from `tokenizer` (a fresh `ToyTokenizer` if not given); pass one to get the
    run's vocabulary afterwards (`tokenizer.to_json()`), as `write` does.
    """
    if steps < 0 or groups < 1 or group_size < 1:
        raise ValueError("steps must be >= 0, groups and group_size >= 1")
    rng = random.Random(seed)
    tok = tokenizer if tokenizer is not None else ToyTokenizer()
    run = {"id": run_id, "name": RUN_NAME, "type": "train"}
    incidents = _incidents(steps, rng)
    weights = [t.weight for t in TASKS]
    for s in range(steps):
        t = s / (steps - 1) if steps > 1 else 0.0
        base = _success_curve(t) + rng.gauss(0.0, 0.025)
        rate = 3.0 + 4.0 * t                  # sharper policy later: logprobs closer to 0
        step_t0 = EPOCH + s * STEP_SECONDS
        for g in range(groups):
            task = TASKS[rng.choices(range(len(TASKS)), weights)[0]]
            if s == 0 and g == groups - 1:
                task = _HTML_TASK             # every run shows the hostile-HTML case
            p_correct = min(0.97, max(0.03, base + task.difficulty))
            bad_host = s in incidents and rng.random() < 0.5
            p_err = 0.025 + (incidents[s] if bad_host else 0.0)
            group_id = f"s{s:03d}-g{g}"
            records = []
            for i in range(group_size):
                plan = _plan(task, p_correct, p_err, t, rng)
                rid = f"{group_id}-r{i}"
                versions = _versions(s, len(plan.turns), rng)
                t0 = round(step_t0 + rng.uniform(0.0, 6.0), 3)
                body = _render(plan, versions, t0, rate, rng, tok)
                reward = round(plan.correct * 1.0 + plan.fmt * 0.1, 6)
                record = {
                    "schema": SCHEMA_VERSION, "id": rid, "run": run, "step": s,
                    "policy": {"start": versions[0], "end": versions[-1]},
                    "group": {"id": group_id, "index": i, "size": group_size},
                    "task": _task_ref(task),
                    "tools": _CALC_TOOLS if isinstance(task, CalcTask) else _EDIT_TOOLS,
                    "nodes": body["nodes"], "calls": body["calls"],
                    "rewards": {"correct": {"score": plan.correct, "weight": 1.0},
                                "format": {"score": plan.fmt, "weight": 0.1}},
                    "reward": reward, "metrics": body["metrics"],
                    "stop_condition": _STOP_CONDITION[plan.ending],
                    "ending": {"type": plan.ending, "detail": plan.detail,
                               "message": plan.error["message"] if plan.error else None,
                               "evidence": body["evidence"]},
                    "errors": [plan.error] if plan.error else [],
                    "timing": body["timing"],
                }
                records.append(record)
            _assign_advantages(records)
            for record in records:
                yield Rollout.model_validate(record)


def _assign_advantages(records: list[dict[str, Any]]) -> None:
    """GRPO advantages with errored rollouts dropped from the baseline, on sampled tokens only."""
    kept = [r["reward"] for r in records if r["ending"]["type"] != "error"]
    if not kept:
        return
    baseline = sum(kept) / len(kept)
    for r in records:
        if r["ending"]["type"] == "error":
            continue
        adv = round(r["reward"] - baseline, 6)
        r["metrics"]["advantage"] = adv
        for node in r["nodes"]:
            if node.get("sampled"):
                node["advantages"] = [adv if m else None for m in node["mask"]]


def tokenizer_path(path: str | Path) -> Path:
    """Where `write(path)` puts the run's tokenizer: `X.jsonl` → `X.tokenizer.json` beside it."""
    p = Path(path)
    stem = p.name[: -len(".jsonl")] if p.name.endswith(".jsonl") else p.name
    return p.with_name(f"{stem}.tokenizer.json")


def write(path: str | Path, *, tokenizer: str | Path | bool = True, **kw: Any) -> int:
    """Write `generate(**kw)` to `path` as native JSONL; return the number of rollouts.

    tokenizer: also write the run's HuggingFace tokenizer.json (every id of the run → its piece;
        give it to `rollscope ingest --tokenizer`): `True` → `tokenizer_path(path)`, a path →
        there, `False` → not at all.
    """
    from ingest.formats.native import write_line

    tok = ToyTokenizer()
    n = 0
    with open(path, "wb") as f:
        for rollout in generate(tokenizer=tok, **kw):
            f.write(write_line(rollout))
            n += 1
    if tokenizer is not False:
        tok.write(tokenizer_path(path) if tokenizer is True else tokenizer)
    return n


def write_tokenizer(path: str | Path, **kw: Any) -> Path:
    """Write only the tokenizer.json of the run `generate(**kw)` (it generates the run again);
    byte-identical to the one `write(..., **kw)` writes. Returns `path`."""
    tok = ToyTokenizer()
    for _ in generate(tokenizer=tok, **kw):
        pass
    tok.write(path)
    return Path(path)
