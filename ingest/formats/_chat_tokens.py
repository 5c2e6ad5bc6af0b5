"""The token forms of a chat record, for the `chat` reader (`ingest/formats/chat.py`): per-turn
token lists (`turns`, `turn_tokens`) aligned to the assistant messages, and a bare OpenAI
`logprobs` response as one sampled node."""
from __future__ import annotations

from typing import Any

from ingest.fields import FieldError, floats, ints
from ingest.formats import _openai
from ingest.formats._build import RolloutBuilder, TokenTurn, apply_completion, set_tokens, turn_drift
from ingest.formats.base import join_path as _join
from ingest.schema import Message


def token_turns(v: Any, path: str) -> list[TokenTurn]:
    if not isinstance(v, list):
        raise FieldError(path, f"expected a list of turns, got {type(v).__name__}")
    out = []
    for t, turn in enumerate(v):
        p = _join(path, f"[{t}]") if path else ""
        if not isinstance(turn, dict):
            raise FieldError(p, f"expected a turn object, got {type(turn).__name__}")
        sub = (lambda name: _join(p, name)) if p else (lambda name: name)
        finish = turn.get("finish_reason")
        if finish is not None and not isinstance(finish, str):
            raise FieldError(sub("finish_reason"), "expected a string")
        out.append(TokenTurn(
            prompt_ids=ints(turn.get("prompt_ids"), sub("prompt_ids")),
            prompt_hex=_openai.pieces(turn.get("prompt_pieces"), sub("prompt_pieces")),
            completion_ids=ints(turn.get("completion_ids"), sub("completion_ids")),
            completion_hex=_openai.pieces(turn.get("completion_pieces"), sub("completion_pieces")),
            logprobs=floats(turn.get("logprobs"), sub("logprobs")),
            finish_reason=finish,
            rest={k: x for k, x in turn.items() if k not in (
                "prompt_ids", "prompt_pieces", "completion_ids", "completion_pieces", "logprobs", "finish_reason")},
        ))
    return out


def align_turns(b: RolloutBuilder, turns: list[TokenTurn], path: str, extra: dict) -> None:
    """Token data per assistant message, in order: turn k → k-th assistant node. Surplus turns
    are kept in `rollout.extra["unaligned_<path>"]`; prompt ids are checked for drift."""
    assistants = b.assistants()
    for k, turn in enumerate(turns):
        if k >= len(assistants):
            extra.setdefault(f"unaligned_{path}", []).append(k)
            continue
        node = assistants[k]
        apply_completion(node, turn)
        if turn.prompt_ids is not None:  # the request's context; message nodes carry no prompt tokens
            node.extra["prompt_ids"] = turn.prompt_ids
            if turn.prompt_hex is not None:
                node.extra["prompt_bytes"] = turn.prompt_hex
        if k > 0:
            drift = turn_drift(turns[k - 1], turn, k)
            if drift:
                node.extra["token_drift"] = drift
                extra["token_drift"] = True
    if len(turns) != len(assistants):
        extra[f"{path}_count_mismatch"] = {"assistant_messages": len(assistants), path: len(turns)}


def append_openai_logprobs(b: RolloutBuilder, rec: dict) -> None:
    """`{response, logprobs: {content: [...]} | [...]}` → one sampled assistant node."""
    lp = rec["logprobs"]
    entries, base = (lp["content"], "logprobs.content") if isinstance(lp, dict) else (lp, "logprobs")
    response = rec.get("response")
    if response is not None and not isinstance(response, str):
        raise FieldError("response", "expected a string")
    toks = _openai.tokens_from_openai_logprobs(entries, base)
    idx = b.add(Message(role="assistant", content=response), sampled=True)
    node = b.nodes[idx]
    # OpenAI gives no token ids. None are invented: an unrecorded id is -1 (docs/trace-format.md),
    # which keeps mask, logprobs and the source's bytes in lockstep per position.
    set_tokens(node, toks.ids, sampled=True, logprobs=toks.logprobs, hexes=toks.hexes)
    node.extra["token_text"] = toks.texts
    if toks.top is not None:
        node.extra["top_logprobs"] = toks.top
    finish = rec.get("finish_reason")
    if isinstance(finish, str):
        b.call(idx, finish)
