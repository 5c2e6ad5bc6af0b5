"""A real Inspect evaluation, offline: custom tools, scripted mockllm outputs, two scorers.

`write_logs(log_dir, fmt, epochs)` runs it with inspect_ai itself and returns the log's path.
Samples (ids as Inspect names them), in the order the scripted outputs are consumed:
- `one-call`: one tool call (`add`), then the answer;
- `parallel`: two `add` calls in one assistant message, then the answer;
- `tool-error`: a call to `divide` by zero, which raises `ToolError`, then the answer;
- `no-tool`: the answer at once;
- `message-limit`: the model calls `add` forever; the task's message limit ends it;
- `crash`: the model raises (a provider error); `fail_on_error=False` keeps the others.

mockllm counts tokens with tiktoken (a download) unless an output carries `usage`: every scripted
output carries it. Tool calls and outputs are keyed by the sample's input text, so the script
holds whatever order Inspect runs the samples in (it runs them concurrently).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessageTool, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import includes, match
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import ToolError, tool

ROOT = Path(__file__).resolve().parents[2]
MODEL = "mockllm/model"
SAMPLES = ["one-call", "parallel", "tool-error", "no-tool", "message-limit", "crash"]
MESSAGE_LIMIT = 8


@tool
def add():
    async def execute(x: int, y: int) -> str:
        """Add two integers.

        Args:
            x: the first
            y: the second
        """
        return str(x + y)

    return execute


@tool
def divide():
    async def execute(x: int, y: int) -> str:
        """Divide x by y.

        Args:
            x: the numerator
            y: the denominator
        """
        if y == 0:
            raise ToolError("division by zero")
        return str(x / y)

    return execute


def _usage(o: ModelOutput, i: int = 10, n: int = 3) -> ModelOutput:
    o.usage = ModelUsage(input_tokens=i, output_tokens=n, total_tokens=i + n)
    return o


def _call(fn: str, args: dict) -> ModelOutput:
    return _usage(ModelOutput.for_tool_call(MODEL, fn, args))


def _answer(text: str) -> ModelOutput:
    return _usage(ModelOutput.from_content(MODEL, text))


def _parallel() -> ModelOutput:
    o = _call("add", {"x": 1, "y": 2})
    second = _call("add", {"x": 3, "y": 4}).message.tool_calls[0]
    second.id = "call_2"
    o.message.tool_calls[0].id = "call_1"
    o.message.tool_calls.append(second)
    return o


def _script(sample: str, turn: int) -> ModelOutput:
    if sample == "one-call":
        return _call("add", {"x": 2, "y": 2}) if turn == 0 else _answer("ANSWER: 4")
    if sample == "parallel":
        return _parallel() if turn == 0 else _answer("ANSWER: 3 and 7")
    if sample == "tool-error":
        return _call("divide", {"x": 1, "y": 0}) if turn == 0 else _answer("ANSWER: undefined")
    if sample == "no-tool":
        return _answer("ANSWER: 4")
    if sample == "message-limit":
        return _call("add", {"x": turn, "y": 1})
    raise RuntimeError("the provider returned 503 Service Unavailable")


def _outputs(input, tools, tool_choice, config):  # mockllm's custom_outputs as a function
    messages = list(input)
    sample = next(m.text for m in messages if m.role == "user").split(":")[0]
    turn = sum(1 for m in messages if m.role == "assistant")
    if sample == "parallel" and turn == 1 and not any(isinstance(m, ChatMessageTool) for m in messages):
        turn = 0
    return _script(sample, turn)


def task(epochs: int) -> Task:
    return Task(
        dataset=[Sample(id=s, input=f"{s}: compute", target="4") for s in SAMPLES],
        solver=[use_tools(add(), divide()), generate()],
        scorer=[includes(), match()],
        message_limit=MESSAGE_LIMIT,
        epochs=epochs,
        name="producer_tools",
    )


def write_logs(log_dir: Path, fmt: str, epochs: int = 1) -> Path:
    """Run the task with Inspect itself, in a fresh interpreter; the path of the log it wrote (`.eval`
    or `.json`). A child process, because Inspect's `eval()` refuses to run inside an event loop
    that another test left running in this one (Playwright's, the app's), and because importing
    it patches `zipfile` for the whole process."""
    done = subprocess.run([sys.executable, "-m", "tests.producers.inspect_task", str(log_dir), fmt, str(epochs)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return Path(done.stdout.strip().splitlines()[-1])


def _write_logs_here(log_dir: Path, fmt: str, epochs: int) -> Path:
    model = get_model(MODEL, custom_outputs=_outputs)
    logs = inspect_eval(task(epochs), model=model, log_dir=str(log_dir), log_format=fmt, display="none",
                        fail_on_error=False, max_samples=1)
    return Path(logs[0].location)


if __name__ == "__main__":
    print(_write_logs_here(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
