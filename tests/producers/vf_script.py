"""Drive verifiers 0.4.0's own `vf-eval` over the `rsfake` environment (tests/producers/vf_env) against the
scripted fake model server: the run folder it writes (`<output>/<run>/traces.jsonl` + `configs/`) is what
tests/producers/test_verifiers.py ingests."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.producers.fake_openai import MODEL, FakeOpenAI

ENV_DIR = Path(__file__).parent / "vf_env"
BIN = Path(sys.executable).parent
MAX_TURNS = 3
MAX_TOKENS = 64
GROUP_SIZE = 2
ANSWER = {"content": "The sum is 5. <answer>5</answer>"}

# per case, per turn (assistant messages so far) — see fake_openai.py
SCRIPT: dict[str, list[dict]] = {
    # one tool call, its result, the answer
    "tool": [{"tool_calls": [("calc_add", {"a": 2, "b": 3})]}, ANSWER],
    # a call to a tool that does not exist and one with arguments that are not JSON: the harness answers
    # both with `error: ...`; then a good call, then the answer
    "tool-error": [{"tool_calls": [("calc_mul", {"a": 2, "b": 3}), ("calc_add", "{not json")]},
                   {"tool_calls": [("calc_add", {"a": 2, "b": 3})]}, ANSWER],
    # a tool call every turn: the turn cap stops it
    "max-turns": [{"tool_calls": [("calc_add", {"a": 1, "b": 1})]}],
    # the generation runs into max_tokens
    "length": [{"content": "Let me think about 2 + 3 step by step, first", "finish_reason": "length",
                "completion_tokens": MAX_TOKENS}],
    # the provider fails
    "provider-error": [{"status": 500}],
    # the provider is unavailable, after one good turn
    "provider-503": [{"tool_calls": [("calc_add", {"a": 2, "b": 3})]}, {"status": 503}],
    "group": [ANSWER],
}


def env_for(base: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": os.pathsep.join([str(ENV_DIR), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "FAKE_API_KEY": "sk-fake",
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "HOME": str(base / "home"),
        "UV_PYTHON_DOWNLOADS": "never", "UV_PYTHON": sys.executable,
        "NO_COLOR": "1",
    })
    # uv syncs the harness's PEP 723 script (openai, mcp, httpx2, ...): from the wheels pip is told to use
    # (PIP_FIND_LINKS, as on the CI machine), never the network; elsewhere from uv's own configuration
    links = [p for p in (env.get("UV_FIND_LINKS") or env.get("PIP_FIND_LINKS") or "").split() if Path(p).exists()]
    if links:
        env.update({"UV_OFFLINE": "1", "UV_NO_INDEX": "1", "UV_FIND_LINKS": links[0]})
    return env


def run_vf_eval(base: Path, fake: FakeOpenAI) -> tuple[Path, subprocess.CompletedProcess]:
    """Run `vf-eval`; returns the run folder and the finished process."""
    out = base / "outputs"
    cmd = [str(BIN / "vf-eval"), "rsfake", "-m", MODEL, "-r", str(GROUP_SIZE),
           "--client.base-url", fake.base_url, "--client.api-key-var", "FAKE_API_KEY",
           "--env.agent.harness.id", "null", "--env.agent.runtime.type", "subprocess",
           "--env.agent.max-turns", str(MAX_TURNS), "--sampling.max-tokens", str(MAX_TOKENS),
           "--run.name", "rsfake-producers", "--no-push", "--no-rich", "-o", str(out)]
    (base / "home").mkdir(parents=True, exist_ok=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env_for(base), cwd=base)
    return out / "rsfake-producers", done
