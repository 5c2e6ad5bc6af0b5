"""One demo rollout's script: the turns (reasoning, text, tool calls and their results) an agent
plays for a task, right or wrong, well formatted or not, looping or running away."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from ingest.demo.tasks import CalcTask, EditTask, eval_expr, fmt_number, run_steps, wrong_steps
from ingest.demo.toy_tokenizer import count_pieces, cut_pieces

MAX_TURNS = 6             # assistant turns per rollout; the 6th tool-calling turn truncates
MAX_TOKENS = 512          # per-call output cap; a call that reaches it ends with `length`


@dataclass
class _Call:
    name: str
    arguments: str
    result: str


@dataclass
class Turn:
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
    return _Call("calculator", _args(expression=expr), fmt_number(eval_expr(expr)))


def calc_script(task: CalcTask, correct: bool, rng: random.Random, fmt_ok: bool) -> tuple[list[Turn], bool]:
    """Tool turns then a final answer. Returns (turns, any_malformed_call)."""
    answer = fmt_number(run_steps(task.steps)[-1])
    steps = list(task.steps) if correct else wrong_steps(task.steps, rng)
    if not correct and rng.random() < 0.4:
        # Answers from memory and gets it wrong: a one-turn rollout.
        guess = fmt_number(run_steps(steps)[-1])
        return [_final_calc(guess, fmt_ok, rng, "I can do this one in my head.")], False
    if correct and len(steps) == 1 and rng.random() < 0.15:
        return [_final_calc(answer, fmt_ok, rng, "This is quick to compute directly.")], False
    results: list[float] = []
    turns: list[Turn] = []
    malformed = False
    k = 0
    if task.parallel and rng.random() < 0.5:
        exprs = steps[:task.parallel]
        turns.append(Turn(reasoning=rng.choice(_THINK_PARALLEL),
                           calls=[_calc_call(e) for e in exprs]))
        results += [eval_expr(e) for e in exprs]
        k = task.parallel
    for expr in steps[k:]:
        expr = expr.format(*[fmt_number(r) for r in results])
        if not malformed and rng.random() < 0.08:
            malformed = True
            turns.append(Turn(reasoning=rng.choice(_THINK_CALC), calls=[_calc_call(expr, malformed=True)]))
        turns.append(Turn(reasoning=rng.choice(_THINK_CALC), calls=[_calc_call(expr)]))
        results.append(eval_expr(expr))
    if rng.random() < 0.2:
        turns.append(Turn(content="Let me double-check the last step.", calls=[_calc_call(expr)]))
    turns = turns[:MAX_TURNS - 1]
    turns.append(_final_calc(fmt_number(results[-1]), fmt_ok, rng, None))
    return turns, malformed


_THINK_CALC = ("I'll use the calculator for this step.", "Compute this part first.",
               "Next, the calculator.", "Let me evaluate the expression.")


_THINK_PARALLEL = ("The two products are independent; compute both at once.",)


def _final_calc(answer: str, fmt_ok: bool, rng: random.Random, reasoning: str | None) -> Turn:
    if fmt_ok:
        text = rng.choice(("The result is {a}.\nAnswer: {a}", "Answer: {a}",
                           "So the value is {a}.\nAnswer: {a}")).format(a=answer)
    else:
        text = rng.choice(("The answer is {a}.", "It comes to {a}.")).format(a=answer)
    return Turn(content=text, reasoning=reasoning, finish="stop")


def edit_script(task: EditTask, correct: bool, rng: random.Random, fmt_ok: bool,
                 detect: bool) -> tuple[list[Turn], bool]:
    """read → (tests) → edit → tests → summary. With `detect`, the episode ends at the tool
    result that the environment recognises (passing tests, or a destroyed file)."""
    turns: list[Turn] = []
    if task.tests_first or rng.random() < 0.4:
        turns.append(Turn(reasoning="Reproduce the failure first.",
                           calls=[_Call("run_tests", "{}", task.failing)]))
    turns.append(Turn(content=f"Let me look at {task.path}.",
                       calls=[_Call("read_file", _args(path=task.path), task.content)]))
    if not correct and detect:
        # Unrecoverable: the agent blanks the file; the environment ends the episode.
        turns.append(Turn(reasoning="Rewrite the file from scratch.",
                           calls=[_Call("edit_file", _args(path=task.path, old=task.content, new=""),
                                        f"Edited {task.path}: the file is now empty.")]))
        return turns, False
    malformed = False
    if rng.random() < 0.06:
        malformed = True
        turns.append(Turn(calls=[_Call("edit_file", '{"path": "' + task.path + '", "old": ',
                                        "Error: arguments are not valid JSON")]))
    old, new = (task.old, task.new) if correct else (task.wrong_old, task.wrong_new)
    count = max(1, task.content.count(old))
    edited = f"Edited {task.path}: {count} replacement{'s' if count > 1 else ''}."
    if not correct and len(turns) == 1 and rng.random() < 0.5:
        # Sees the wrong fix fail, then repeats the same edit (which no longer matches).
        turns.append(Turn(calls=[_Call("edit_file", _args(path=task.path, old=old, new=new), edited)]))
        turns.append(Turn(calls=[_Call("run_tests", "{}", task.failing)]))
        edited = f"Error: `old` text not found in {task.path}"
    turns.append(Turn(reasoning="Apply the fix.",
                       calls=[_Call("edit_file", _args(path=task.path, old=old, new=new), edited)]))
    turns.append(Turn(content="Run the tests.",
                       calls=[_Call("run_tests", "{}", task.passing if correct else task.failing)]))
    assert len(turns) < MAX_TURNS
    if detect:
        return turns, malformed
    summary = f"I changed {task.path}: replaced `{old}` with `{new}`."
    text = f"{summary}\nSummary: fixed {task.path}." if fmt_ok else summary
    turns.append(Turn(content=text, finish="stop"))
    return turns, malformed


def loop_script(task: CalcTask | EditTask, rng: random.Random, fixed: bool = False) -> list[Turn]:
    """MAX_TURNS tool-calling turns that never finish (the rollout is truncated). With `fixed`,
    the right edit went in early and the agent keeps re-reading instead of submitting."""
    turns: list[Turn] = []
    if isinstance(task, CalcTask):
        expr = task.steps[0].format(*["1"] * 4)
        while len(turns) < MAX_TURNS:
            turns.append(Turn(content=rng.choice(("Let me verify that again.", "Once more, to be sure.",
                                                   "I should recompute this.")),
                               calls=[_calc_call(expr)]))
        return turns
    read = _Call("read_file", _args(path=task.path), task.content)
    turns.append(Turn(calls=[read]))
    if fixed:
        turns.append(Turn(reasoning="Apply the fix.", calls=[_Call(
            "edit_file", _args(path=task.path, old=task.old, new=task.new), f"Edited {task.path}.")]))
        reread = _Call("read_file", read.arguments, task.content.replace(task.old, task.new))
        while len(turns) < MAX_TURNS:
            turns.append(Turn(content="Let me re-read the file to be sure.", calls=[reread]))
        return turns
    while len(turns) < MAX_TURNS:
        if len(turns) % 2:
            turns.append(Turn(content="Try another edit.", calls=[_Call(
                "edit_file", _args(path=task.path, old=task.wrong_old, new=task.wrong_new),
                f"Edited {task.path}: 1 replacement.")]))
        else:
            turns.append(Turn(calls=[_Call("run_tests", "{}", task.failing)]))
    return turns


def runaway(task: CalcTask | EditTask) -> Turn:
    """A generation that repeats itself until it hits MAX_TOKENS."""
    if isinstance(task, CalcTask):
        expr = task.steps[0].format(*["1"] * 4)
        unit = f"Wait, let me re-check {expr} = {fmt_number(eval_expr(expr))} before answering. "
    else:
        unit = f"Hmm, maybe the problem is elsewhere in {task.path}; let me reconsider the edit. "
    text = unit * (MAX_TOKENS // max(1, count_pieces(unit.rstrip())) + 2)   # " Wait" takes the space
    return Turn(content=cut_pieces(text, MAX_TOKENS), finish="length")
