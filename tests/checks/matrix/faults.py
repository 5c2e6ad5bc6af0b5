"""One fault injector per check kind: the fault written on a clean group (episode.py), the fields
a format must hold to carry it (episode.FIELDS), and where the finding must land.

An injector edits the group in place (the harness hands it a fresh clean group). Where the fault
changes what the model saw (a dropped tool result, a markup answer), the episode is re-rendered
from the changed conversation (`rebuild`), so its ids are what a real renderer would write; where
the fault is in the ids themselves (re-tokenization, a stripped history, split tool turns), only
the ids change, as the collector's bug did. Sources of each fault: docs/checks.md.
"""
from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import dataclass

from tests.checks.matrix.episode import LLAMA, QWEN, Episode, Tok, build, conversation

RIGHT, WRONG = 0, 1  # the two episodes of the clean group
ASK, CALLS, TOOL_A, TOOL_B, ANSWER = 1, 2, 3, 4, 5  # turns of the clean conversation


@dataclass(frozen=True)
class Fault:
    """`inject(group, tok)` writes the fault; the finding must land on episode `ep` (its id), on
    the node holding message `turn` (None: the rollout or its group), at token (or call, for
    kinds `at="call"`) `position` when the format records the tokens."""

    kind: str
    needs: frozenset[str]
    inject: Callable[[list[Episode], Tok], None]
    ep: str = "ep-right"
    turn: int | None = None
    position: int | None = None
    tok: Tok = QWEN
    needs_any: frozenset[str] = frozenset()  # at least one of these too (the check has two ways to know)

    def missing(self, carries: frozenset[str]) -> set[str]:
        """The fields a format with `carries` lacks to carry this fault (empty: it can)."""
        out = set(self.needs - carries)
        if self.needs_any and not self.needs_any & carries:
            out.add(" or ".join(sorted(self.needs_any)))
        return out


def rebuild(group: list[Episode], k: int, messages: list[dict], tok: Tok) -> None:
    """Re-render episode `k` from `messages`, keeping its envelope."""
    ep = group[k]
    fresh = build(ep.id, messages, tok, seed=k)
    ep.turns, ep.trailing_ids, ep.tok = fresh.turns, fresh.trailing_ids, fresh.tok


def last(group: list[Episode], k: int = RIGHT):
    """The final answer's request of episode `k`."""
    return group[k].turns[ANSWER].request


def _all_prompts_after(ep: Episode, first: int, edit: Callable[[list[int]], list[int]]) -> None:
    for i, req in ep.requests():
        if i >= first:
            req.prompt_ids = edit(req.prompt_ids)


FAULTS: list[Fault] = []


def fault(kind: str, needs: str, *, needs_any: str = "", **where):
    def register(fn):
        FAULTS.append(Fault(kind, frozenset(needs.split()), fn, needs_any=frozenset(needs_any.split()), **where))
        return fn
    return register


# --- per-token arrays ----------------------------------------------------------------------------

@fault("array_len_mismatch", "token_ids logprobs parallel_arrays", turn=ANSWER)
def _short_logprobs(g, tok):
    last(g).logprobs = last(g).logprobs[:-3]  # rllm-org/rllm#898: three logprobs short


@fault("suspected_logprob_padding", "token_ids logprobs", turn=ANSWER)
def _zero_padded(g, tok):
    lp = last(g).logprobs
    lp[-3:] = [0.0, 0.0, 0.0]


@fault("invalid_logprob", "token_ids logprobs", turn=ANSWER, position=2)
def _positive_logprob(g, tok):
    last(g).logprobs[2] = 0.7


@fault("bytes_lost_upstream", "token_ids token_bytes", turn=ANSWER, position=1)
def _lost_bytes(g, tok):
    req = last(g)
    pieces = [tok.ctx.decode([t]).encode().hex() for t in req.completion_ids]
    pieces[1] = "efbfbd"  # U+FFFD: the server replaced a split character
    req.token_bytes = pieces


@fault("placeholder_token_id", "token_ids", turn=ANSWER, position=3)
def _ignore_index(g, tok):
    last(g).completion_ids[3] = -100  # a collator's ignore index written into the ids


@fault("implausible_logprob", "token_ids logprobs", turn=ANSWER, position=4)
def _implausible(g, tok):
    last(g).logprobs[4] = -35.0


# --- endings -------------------------------------------------------------------------------------

@fault("silent_truncation", "finish_reason")
def _length_called_success(g, tok):
    req = last(g)  # cut at its cap, no EOS: the source still says the episode completed
    req.completion_ids, req.logprobs = req.completion_ids[:10], req.logprobs[:10]
    req.finish_reason, req.max_tokens = "length", 10


# --- groups --------------------------------------------------------------------------------------

@fault("group_size_mismatch", "group group_size")
def _size_three(g, tok):
    for ep in g:
        ep.size = 3


@fault("duplicate_group_index", "group group_index")
def _same_index(g, tok):
    g[WRONG].index = 0


@fault("group_index_out_of_range", "group group_index group_size")
def _index_beyond(g, tok):
    g[WRONG].index = 5


@fault("zero_variance_group", "group reward")
def _same_reward(g, tok):
    g[WRONG].reward = 1.0
    for ep in g:
        ep.advantage = 0.0


@fault("errored_reward_in_baseline", "group reward advantages ending")
def _errored_scored(g, tok):
    g[WRONG].stop = "error"  # aborted, yet scored 0 and kept in the baseline (rllm-org/rllm#542)


@fault("advantage_mismatch", "group reward advantages")
def _wrong_advantages(g, tok):
    g[RIGHT].advantage, g[WRONG].advantage = 0.3, -0.3


# --- loss mask -----------------------------------------------------------------------------------

@fault("mask_on_unsampled", "env_tokens mask", turn=TOOL_B, position=0)
def _tool_tokens_trained(g, tok):
    g[RIGHT].turns[TOOL_B].env_mask = True


@fault("sampled_mask_zero", "token_ids mask", turn=ANSWER, position=3)
def _mask_hole(g, tok):
    req = last(g)
    req.mask = [1] * len(req.completion_ids)
    req.mask[3:6] = [0, 0, 0]


@fault("terminal_env_tokenized", "trailing_env_tokens")
def _feedback_tokenized(g, tok):
    for k, ep in enumerate(g):
        msgs = conversation("431" if k == RIGHT else "430") + [{"role": "user", "content": "Correct. Episode over."}]
        rebuild(g, k, msgs, tok)  # the writers tokenize the messages after the last request


# --- messages ------------------------------------------------------------------------------------

@fault("empty_response", "", turn=ANSWER)
def _empty(g, tok):
    msgs = conversation("431")
    msgs[ANSWER]["content"] = ""
    rebuild(g, RIGHT, msgs, tok)


@fault("empty_reasoning_only", "reasoning", turn=ANSWER)
def _reasoning_only(g, tok):
    msgs = conversation("431")
    msgs[ANSWER] = {"role": "assistant", "content": "", "reasoning_content": "The sum is 431, so I answer 431."}
    rebuild(g, RIGHT, msgs, tok)


@fault("content_not_recorded", "usage")
def _no_content(g, tok):
    g[RIGHT].content_recorded = False  # capture off: the calls report tokens, the messages say nothing


@fault("non_finite_reward", "reward")
def _nan_reward(g, tok):
    g[RIGHT].reward = math.nan


# --- tokens across turns and the chat template ---------------------------------------------------

@fault("token_drift", "prompt_ids")
def _retokenized(g, tok):
    ep = g[RIGHT]
    at = len(ep.turns[CALLS].request.prompt_ids) + 2  # inside the sampled tokens of the first answer

    def edit(ids):
        ids = list(ids)
        ids[at] = tok.encode(" ")[0] if ids[at] != tok.encode(" ")[0] else tok.encode("x")[0]
        return ids
    _all_prompts_after(ep, ANSWER, edit)


@fault("reasoning_stripped", "prompt_ids reasoning")  # on the prompt branch the drift opens
def _history_rerendered(g, tok):
    ep = g[RIGHT]
    msgs = ep.messages(ANSWER)
    msgs[CALLS] = {**msgs[CALLS], "reasoning_content": None}  # what Qwen3-style templates do to history
    last(g).prompt_ids = tok.encode(tok.render(msgs, generation=True))


@fault("tool_results_split", "prompt_ids tool_calls", turn=TOOL_B)  # at the second turn's opening
def _results_as_turns(g, tok):
    ep = g[RIGHT]
    calls = ep.turns[CALLS].request
    text = "".join(f"<|im_start|>user\n<tool_response>\n{ep.turns[k].message['content']}\n</tool_response><|im_end|>\n"
                   for k in (TOOL_A, TOOL_B))
    last(g).prompt_ids = calls.prompt_ids + calls.completion_ids + tok.encode("\n" + text + "<|im_start|>assistant\n")


@fault("template_mismatch", "", needs_any="prompt_ids env_tokens", turn=CALLS)  # the ids of every message
def _message_not_what_was_sent(g, tok):
    g[RIGHT].turns[ASK].message["content"] = "What is 17*24 + 17+24?"  # the log's message, not the prompt's


# --- tool calls ----------------------------------------------------------------------------------

def _conversation_with(edit: Callable[[list[dict]], None]) -> list[dict]:
    msgs = conversation("431")
    edit(msgs)
    return msgs


@fault("duplicate_tool_call_id", "tool_calls", turn=CALLS)
def _same_id(g, tok):
    def edit(m):
        m[CALLS]["tool_calls"][1]["id"] = "call_a1"
        m[TOOL_B]["tool_call_id"] = "call_a1"
    rebuild(g, RIGHT, _conversation_with(edit), tok)


@fault("unanswered_tool_call", "tool_calls", turn=CALLS, position=1)
def _no_result(g, tok):
    rebuild(g, RIGHT, _conversation_with(lambda m: m.pop(TOOL_B)), tok)


@fault("ambiguous_tool_result", "tool_calls", turn=TOOL_A)
def _result_without_id(g, tok):
    def edit(m):
        m[TOOL_A].pop("tool_call_id")
    rebuild(g, RIGHT, _conversation_with(edit), tok)


@fault("unpaired_tool_result", "tool_calls", turn=TOOL_B)
def _result_for_nobody(g, tok):
    def edit(m):
        m[TOOL_B]["tool_call_id"] = "call_zz9"
    rebuild(g, RIGHT, _conversation_with(edit), tok)


@fault("malformed_tool_arguments", "tool_calls", turn=CALLS, position=1)
def _cut_arguments(g, tok):
    def edit(m):
        m[CALLS]["tool_calls"][1]["function"]["arguments"] = '{"expr": "17+2'
    rebuild(g, RIGHT, _conversation_with(edit), tok)


MARKUP = '<tool_call>\n{"name": "calc", "arguments": {"expr": "391+40"}}\n</tool_call>'


def _markup_left(g, tok):
    def edit(m):
        m[ANSWER]["content"] = MARKUP  # vLLM's parser failed: the call stayed text (vllm#18791)
    rebuild(g, RIGHT, _conversation_with(edit), tok)


# --- the kinds of issue 20 -----------------------------------------------------------------------

@fault("logprob_shift", "token_ids logprobs trainer_logprobs", turn=ANSWER)
def _trainer_one_off(g, tok):
    req = last(g)
    req.trainer_logprobs = req.logprobs[1:] + [req.logprobs[-1]]  # prime-rl#1525: trainer[i] ~ behaviour[i+1]


@fault("mask_on_padding", "token_ids", turn=ANSWER)  # pad ids (tokenizer) or usage; no mask: sampled ids train
def _pads_trained(g, tok):
    req = last(g)
    pad = tok.ctx.special_tokens.get(tok.ctx.template_kwargs.get("pad_token") or "<|endoftext|>")
    cut = req.completion_ids[:8]
    req.completion_ids = cut + [pad] * 4  # cut at max_tokens=8 without EOS, padded, all mask 1 (verl#3805)
    req.logprobs = req.logprobs[:8] + [None] * 4
    req.mask = [1] * 12
    req.finish_reason, req.max_tokens, req.output_tokens = "length", 8, 8
    g[RIGHT].stop = "max_turns"


@fault("unparsed_tool_call", "", needs_any="tools tool_calls", turn=ANSWER)  # either shows calls are structured
def _markup_left_unparsed(g, tok):  # was `tool_call_markup_unparsed` (migration 0014)
    _markup_left(g, tok)


@fault("split_group", "group")
def _one_member_groups(g, tok):
    for k, ep in enumerate(g):  # rllm#776: the samples of one prompt, each in its own group
        ep.group, ep.index, ep.size, ep.advantage = f"g17-{k}", 0, 1, 0.0


@fault("token_out_of_vocab", "token_ids", turn=ANSWER, position=2)
def _beyond_vocab(g, tok):
    last(g).completion_ids[2] = tok.ctx.tokenizer.get_vocab_size(with_added_tokens=True) + 7  # vllm#340


@fault("tool_answered_twice", "tool_calls", turn=CALLS)
def _answered_twice(g, tok):
    def edit(m):  # OpenHands software-agent-sdk#1782: a recovery error, then the re-executed output
        m.insert(TOOL_A, {"role": "tool", "tool_call_id": "call_a1", "name": "calc",
                          "content": "Error: the sandbox restarted; re-running the command."})
    rebuild(g, RIGHT, _conversation_with(edit), tok)


@fault("stop_reason_mismatch", "finish_reason max_tokens token_ids", turn=ANSWER)
def _length_far_below_cap(g, tok):
    last(g).finish_reason = "length"  # trl#7039: 16 of 64 tokens, EOS last, reported as a length cut


@fault("timing_incomplete", "timing", turn=CALLS)
def _no_end(g, tok):
    g[RIGHT].turns[CALLS].request.end = None  # inspect_ai#4226: a call with a start and no end


@fault("duplicate_bos", "", needs_any="prompt_ids env_tokens", turn=2, tok=LLAMA)  # on the first request (turn 2)
def _two_bos(g, tok):
    bos = tok.ctx.special_tokens[tok.ctx.template_kwargs["bos_token"]]
    for ep in g[:1]:
        _all_prompts_after(ep, 0, lambda ids: [bos] + list(ids))  # trl#3856: template BOS + tokenizer BOS


BY_KIND = {f.kind: f for f in FAULTS}


def injected(f: Fault) -> list[Episode]:
    """A fresh clean group with fault `f` written on it."""
    from tests.checks.matrix.episode import clean_group

    group = clean_group(f.tok)
    f.inject(group, f.tok)
    return copy.deepcopy(group)


def describe(f: Fault) -> str:
    return json.dumps({"kind": f.kind, "needs": sorted(f.needs), "turn": f.turn, "position": f.position})
