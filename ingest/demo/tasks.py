"""The demo run's tasks (arithmetic with a calculator tool, small code edits), their prompts and
tools, and the arithmetic the scripts use to be right or wrong."""
from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from hashlib import sha256
from typing import Any


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


HTML_TASK = next(t for t in TASKS if t.key == "edit/escape-greeting")


CALC_SYSTEM = ("You are a careful assistant. Use the calculator tool for arithmetic. When you are "
                "done, reply with a final line of the form `Answer: <number>`.")


EDIT_SYSTEM = ("You are a coding agent in a sandboxed repository. Use the tools to read and edit "
                "files and to run the tests. When the task is done, reply with a line "
                "`Summary: <what you changed>`.")


CALC_TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                   "required": ["expression"]}}}]


EDIT_TOOLS = [
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


def task_ref(task: CalcTask | EditTask) -> dict[str, Any]:
    """`Task` of the envelope: type, key, prompt (and answer), and a hash of key and prompt."""
    return json.loads(_task_ref_cached(task))


def _task_ref_uncached(task: CalcTask | EditTask) -> dict[str, Any]:
    if isinstance(task, CalcTask):
        kind, data = "calculator", {"prompt": task.prompt, "answer": fmt_number(run_steps(task.steps)[-1])}
    else:
        kind, data = "file_edit", {"prompt": task.prompt, "path": task.path}
    return {"type": kind, "key": task.key, "data": data,
            "hash": sha256(f"{task.key}\n{task.prompt}".encode()).hexdigest()[:16]}


def eval_expr(expr: str) -> float:
    # Only ever our own expressions (digits, operators, spaces, parentheses).
    return float(eval(expr, {"__builtins__": {}}, {}))  # noqa: S307


def fmt_number(x: float) -> str:
    x = round(x, 2)
    return str(int(x)) if x == int(x) else f"{x:.2f}".rstrip("0")


def run_steps(steps: tuple[str, ...] | list[str]) -> list[float]:
    results: list[float] = []
    for s in steps:
        results.append(eval_expr(s.format(*[fmt_number(r) for r in results])))
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


def wrong_steps(steps: tuple[str, ...], rng: random.Random) -> list[str]:
    """`steps` with one slip that changes the final answer."""
    answer = fmt_number(run_steps(steps)[-1])
    candidates = [i for i, e in enumerate(steps) if _literals(e)]
    for _ in range(20):
        out = list(steps)
        i = rng.choice(candidates)
        out[i] = _perturb(out[i], rng)
        if fmt_number(run_steps(out)[-1]) != answer:
            return out
    out = list(steps)
    out[-1] = f"({out[-1]}) + 1"
    return out
