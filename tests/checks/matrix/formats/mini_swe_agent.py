"""mini-swe-agent trajectories (SWE-agent/mini-swe-agent `run/utils/save.py`; tests/fixtures/realdata/
mini-swe-agent): one `<instance>.traj.json` per episode, `{info: {exit_status, submission, model_stats:
{instance_cost, api_calls}, mini_version}, messages: [{role, content}], trajectory_format: "mini-swe-agent-1"}`.
The model acts by one fenced bash block in its text; the harness answers with a user message
`<returncode>N</returncode>\n<output>...</output>` (`config/default.yaml`). No structured tool calls (two
parallel calls are written as one block joined by `&&`, answered by one observation), no tools schema, reward,
group, step, token ids or call start/end are saved (ingest/formats/mini_swe_agent.py). Each assistant message
keeps the litellm response it came from, `extra: {response: ModelResponse.model_dump()}` (`models/litellm_model.py`
`query`; `agents/default.py` `add_message("assistant", **response)`): the choice's `finish_reason` and
`message.reasoning_content`, and `usage` (`completion_tokens`). The cap (`model_kwargs.max_tokens`) is one value in
`info.config` for every call, so a per-call cap cannot be written."""
from __future__ import annotations

import json
from pathlib import Path

from tests.checks.matrix.episode import Episode

NAME = "mini-swe-agent"
CARRIES = frozenset({"finish_reason", "usage", "reasoning"})
EXIT = {"completed": "Submitted", "max_turns": "LimitsExceeded", "error": "RuntimeError"}


def _command(call: dict) -> str:
    expr = json.loads(call["function"]["arguments"]).get("expr", "") if call["function"]["arguments"] else ""
    return f"python3 -c 'print({expr})'"


def _response(ep: Episode, t, text: str) -> dict:
    """The litellm `ModelResponse.model_dump()` of the call that produced the message `t`."""
    req = t.request
    message = {"content": text, "role": "assistant", "tool_calls": None, "function_call": None}
    finish = "stop" if req.finish_reason == "tool_calls" else req.finish_reason  # the command is text
    if t.message.get("reasoning_content") and ep.content_recorded:
        message["reasoning_content"] = t.message["reasoning_content"]
    return {"id": f"chatcmpl-{ep.id}-{len(req.prompt_ids)}", "created": int(req.start or 0), "model": "matrix-model",
            "object": "chat.completion", "system_fingerprint": None,
            "choices": [{"finish_reason": finish, "index": 0, "message": message}],
            "usage": {"completion_tokens": req.usage_output_tokens, "prompt_tokens": len(req.prompt_ids),
                      "total_tokens": len(req.prompt_ids) + req.usage_output_tokens}}


def _messages(ep: Episode) -> list[dict]:
    out: list[dict] = []
    outputs: list[str] = []
    for t in ep.turns:
        m = t.message
        if m["role"] == "tool":
            outputs.append(m.get("content") or "")
            continue
        if outputs:
            out.append({"role": "user", "content": "<returncode>0</returncode>\n<output>\n" + "\n".join(outputs)
                        + "\n</output>"})
            outputs = []
        text = m.get("content") or ""
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                try:
                    calls.append(_command(c))
                except ValueError:
                    calls.append(f"echo {json.dumps(c['function']['arguments'])}")
            thought = text + "\n\n" if text else "THOUGHT: compute both.\n\n"
            text = thought + "```bash\n" + " && ".join(calls) + "\n```"
        if not ep.content_recorded and t.request is not None:
            text = ""  # nothing of what the model said was kept; the response still counts its tokens
        msg = {"role": m["role"], "content": text}
        if t.request is not None:
            msg["extra"] = {"response": _response(ep, t, text)}
        out.append(msg)
    if outputs:
        out.append({"role": "user", "content": "<returncode>0</returncode>\n<output>\n" + "\n".join(outputs)
                    + "\n</output>"})
    return out


def write(episodes: list[Episode], folder: Path) -> Path:
    for ep in episodes:
        doc = {"info": {"exit_status": EXIT[ep.stop], "submission": "", "mini_version": "1.9.0",
                        "model_stats": {"instance_cost": 0.01, "api_calls": len(ep.requests())}},
               "messages": _messages(ep), "trajectory_format": "mini-swe-agent-1"}
        (folder / f"{ep.id}.traj.json").write_text(json.dumps(doc, indent=2))
    return folder
