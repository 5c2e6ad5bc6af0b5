"""verl's rollout dump, the JSONL shape verl's trainer writes (`trainer.rollout_data_dir`; the v1 trainer
`verl/trainer/ppo/v1/trainer_base.py::_log_rollout_data`; /work/shared/formats-reference.md §3.1;
ingest/formats/verl.py, text shape): `{rollout_data_dir}/{global_steps}.jsonl`, one line per sample,
`{input, output, gts, score, step, uid}`, lines sorted by `uid` = `"{sample}_{rollout}_{output}"`.

`input` and `output` are `tokenizer.batch_decode(..., skip_special_tokens=True)` of the prompt (the
first request's prompt only) and of the response (every later token up to the last completion: the
model's turns and the tool results between them, as one text). `score` is the summed token-level
score (Python's `json.dumps` writes a NaN score as NaN).

This is verl's only on-disk rollout shape (the agent loop's `AgentLoopOutput` with ids, mask and
logprobs is never written by verl, §3.2), so the matrix uses it. It records no token ids, mask,
logprobs, finish reason, cap, usage, messages or tool calls (one decoded text each way), timing,
advantages, group size, or ending; the group and the index within it come from `uid`."""
from __future__ import annotations

import json
from pathlib import Path

from tests.checks.matrix.episode import Episode, tok_of

NAME = "verl"
CARRIES = frozenset({"group", "group_index", "reward", "step"})
CANNOT = {  # faults this format has no way to write, although it holds the fields
    "empty_response": "the response is one decoded text: an empty last turn cannot be told apart",
}


def _decode(ep: Episode, ids: list[int]) -> str:
    return tok_of(ep).ctx.tokenizer.decode([t for t in ids if t >= 0], skip_special_tokens=True)


def line(ep: Episode) -> dict:
    reqs = [req for _, req in ep.requests()]
    first, last = reqs[0], reqs[-1]
    full = list(last.prompt_ids) + list(last.completion_ids)
    return {"input": _decode(ep, first.prompt_ids), "output": _decode(ep, full[len(first.prompt_ids):]),
            "gts": "431", "score": ep.reward, "step": ep.step,
            "uid": f"{ep.group}_{ep.index}_0" if ep.group is not None else None}


def write(episodes: list[Episode], folder: Path) -> Path:
    step = episodes[0].step
    path = folder / f"{step}.jsonl"
    lines = sorted((line(ep) for ep in episodes), key=lambda d: d["uid"] or "")
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in lines))
    return path
