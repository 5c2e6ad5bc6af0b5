"""The token forms of a chat record, for the `chat` reader (`ingest/formats/chat.py`): per-turn
token lists (`turns`, `turn_tokens`) aligned to the assistant messages, and a bare OpenAI
`logprobs` response as one sampled node."""
from __future__ import annotations

from typing import Any

from ingest.fields import FieldError, floats, ints
from ingest.formats import _openai
from ingest.formats._build import RolloutBuilder, TokenTurn, apply_completion, set_tokens, turn_drift
from ingest.formats._harness import usage_from
from ingest.formats.base import join_path as _join
from ingest.schema import Message, Usage


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
        completion_ids = ints(turn.get("completion_ids"), sub("completion_ids"))
        completion_hex = _openai.pieces(turn.get("completion_pieces"), sub("completion_pieces"))
        entries = _openai_entries(turn.get("logprobs"))
        if entries is not None:  # an OpenAI choice's `logprobs.content[]`: values, and the bytes of each token
            toks = _openai.tokens_from_openai_logprobs(entries, sub("logprobs.content"))
            logprobs = toks.logprobs
            completion_hex = completion_hex if completion_hex is not None else toks.hexes
            if completion_ids is None and -1 not in toks.ids:
                completion_ids = toks.ids
        else:
            logprobs = floats(turn.get("logprobs"), sub("logprobs"))
        max_tokens = turn.get("max_tokens")
        if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)):
            raise FieldError(sub("max_tokens"), "expected an integer")
        out.append(TokenTurn(
            prompt_ids=ints(turn.get("prompt_ids"), sub("prompt_ids")),
            prompt_hex=_openai.pieces(turn.get("prompt_pieces"), sub("prompt_pieces")),
            completion_ids=completion_ids,
            completion_hex=completion_hex,
            logprobs=logprobs,
            finish_reason=finish,
            usage=usage_from(turn.get("usage")),
            sampling={"max_tokens": max_tokens} if max_tokens is not None else None,
            rest={k: x for k, x in turn.items() if k not in TURN_KEYS},
        ))
    return out


# The keys of a token turn read into the rollout; any other key stays in the node's `extra.turn_fields`.
TURN_KEYS = frozenset({"prompt_ids", "prompt_pieces", "completion_ids", "completion_pieces", "logprobs",
                       "finish_reason", "usage", "max_tokens"})


def _openai_entries(lp: Any) -> list | None:
    """The token entries of OpenAI-shaped logprobs (`{content: [...]}` or `[{token, logprob}]`), else None."""
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        return lp["content"]
    if isinstance(lp, list) and lp and isinstance(lp[0], dict):
        return lp
    return None


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
        _turn_call(b, node, turn)
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


def _turn_call(b: RolloutBuilder, node, turn: TokenTurn) -> None:
    """The request a turn records for its assistant message (issue 20: the reader fills what the
    checks need): its finish reason, usage (the turn's OpenAI `usage`, else the prompt and
    completion lengths) and `max_tokens`, on the message's Call (made when the message had none).
    A turn that records none of these leaves the message without a Call."""
    if turn.finish_reason is None and turn.usage is None and turn.sampling is None and turn.prompt_ids is None:
        return
    idx = b.nodes.index(node)
    usage = turn.usage or Usage(input_tokens=len(turn.prompt_ids) if turn.prompt_ids is not None else None,
                                output_tokens=len(turn.completion_ids) if turn.completion_ids is not None else None)
    call = next((c for c in b.calls if c.node == idx), None)
    if call is None:
        b.call(idx, turn.finish_reason, usage, sampling=turn.sampling)
        return
    if turn.finish_reason is not None:  # the turn's reason, when the message stated none
        fresh = _openai.call_for(idx, turn.finish_reason)
        call.finish_reason = call.finish_reason or fresh.finish_reason
        call.finish_reason_raw = call.finish_reason_raw or fresh.finish_reason_raw
    call.usage = call.usage or usage
    call.sampling = call.sampling or turn.sampling


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
