"""Token chips for the rollout page: one state per token, overlay buckets, pieces that read right,
and windows of a long strip.

A branch is one token sequence (the concatenation of its nodes' tokens); a token's position `t`
is its offset in that sequence, the `#t-N` of a deep link.

The seven token states (docs/views.md), first match wins:

| state | when |
|---|---|
| `fault` | loss mask 1 on a token the policy did not sample (the node is not sampled): a fault |
| `placeholder` | the id is a placeholder (-1: the source recorded the token but not its id) |
| `special_trained` | a control token of the run's tokenizer with mask 1 in a sampled node: the EOS that ends a turn, or a pad trained on (`mask_on_padding`) |
| `special` | a control token of the run's tokenizer (`<|im_end|>`, `<end_of_turn>`), mask 0 |
| `trained` | sampled and trained: mask 1 in a sampled node |
| `filtered` | sampled but not trained: mask 0 in a sampled node where the token has a behaviour logprob (a filter zeroed the mask) |
| `context` | everything else: prompt, tool output, template tokens (mask 0) |

Overlays compare only what can be compared: the trainer-minus-inference difference Δ and the
importance ratio exp(Δ) exist only on mask-1 tokens that carry both a behaviour logprob and a
trainer logprob (`node.extra["trainer_logprobs"]`, prime-rl's token-export name). A mask-1 token
missing either is *missing* (drawn hatched), never 0; a context token has no behaviour logprob
by design, which is not missing.
"""  # noqa: E501 (Markdown table rows cannot wrap)
from __future__ import annotations

import math

import numpy as np

from ingest.bytelevel import piece_bytes
from ingest.tokenizer import TokenPiece, decode_pieces, piece_from_bytes

# A strip's first FIRST tokens are in the page (while the page's budget lasts); the rest load in
# windows of WINDOW tokens as they scroll into view. Measured in Chromium on a loaded 2-core
# machine (bench/views.py): 1,024-token windows made scroll tasks of up to 343 ms, 512 stay
# under 200 ms; a smaller first window makes the first paint earlier.
FIRST = 256
WINDOW = 512

# The one place the seven states are worded: the legend (d.token_states), a chip's title
# (app/chips.py) and the token panel (static/app.js reads the legend's JSON) all take it from here.
STATES = [  # key, legend label, what it means
    ("trained", "sampled, trained", "sampled by the policy, loss mask 1"),
    ("context", "context", "prompt, tool output or template token (mask 0); no behaviour logprob by design"),
    ("filtered", "sampled, not trained", "sampled by the policy, but mask 0: a filter zeroed it"),
    ("fault", "trained, not sampled", "loss mask 1 on a token the policy did not sample: a fault"),
    ("special", "special", "a control token of the tokenizer"),
    ("special_trained", "special, trained",
     "a control token with loss mask 1: right for the EOS that ends a turn, a fault on a pad (mask on padding)"),
    ("placeholder", "placeholder id", "the source recorded this token but not its id (-1)"),
]
STATE_TEXT = {k: d for k, _, d in STATES}


def state_rows() -> list[dict[str, str]]:
    """The seven states as legend rows: `key`, `label`, `text`."""
    return [{"key": k, "label": lab, "text": txt} for k, lab, txt in STATES]

# Overlay scales: bucket edges (upper bounds), legend labels derived from them.
LOGPROB_EDGES = [-8.0, -4.0, -2.0, -1.0, -0.3, -0.05]  # bucket 0: < -8 ... bucket 6: ≥ -0.05
ADVANTAGE_EDGES = [-1.0, -0.3, -0.05, 0.05, 0.3, 1.0]  # diverging around 0
DELTA_EDGES = [0.01, 0.05, 0.2, 0.5, 1.0]  # |Δ| in nats


def _bucket(x: float, edges: list[float]) -> int:
    for k, e in enumerate(edges):
        if x < e:
            return k
    return len(edges)


def overlay_legends() -> dict:
    """Legend rows of the three overlays: `[{bucket, label}]` per scale, plus what is hatched."""
    def rows(edges, fmt):
        out = [{"bucket": 0, "label": f"< {fmt(edges[0])}"}]
        out += [{"bucket": k + 1, "label": f"{fmt(edges[k])} … {fmt(edges[k + 1])}"} for k in range(len(edges) - 1)]
        out.append({"bucket": len(edges), "label": f"≥ {fmt(edges[-1])}"})
        return out

    return {
        "logprob": {"label": "behaviour logprob", "rows": rows(LOGPROB_EDGES, lambda v: f"{v:g}"),
                    "missing": "sampled token without a behaviour logprob"},
        "advantage": {"label": "advantage per token", "rows": rows(ADVANTAGE_EDGES, lambda v: f"{v:+g}"),
                      "missing": "no advantage recorded"},
        "delta": {"label": "|trainer − inference| logprob (nats)", "rows": rows(DELTA_EDGES, lambda v: f"{v:g}"),
                  "missing": "mask-1 token missing one of the two logprobs"},
    }


class Pieces:
    """Token id → display piece.

    The source's own bytes win when it recorded them (they are what the server returned),
    mapped back from byte-level BPE spelling (`ingest.bytelevel`) when the run declares a
    byte-level tokenizer or the piece looks byte-level; else the run's vocabulary; else None
    (show the id). An id at or beyond the vocabulary's size is never an empty piece: it is
    `unknown` with `oov` = the size, and reads "not in the tokenizer (N ids)" (vllm-project/vllm#340;
    the `token_out_of_vocab` check)."""

    def __init__(self, vocab, *, byte_level: bool = False):
        self.vocab = vocab
        self.byte_level = byte_level

    def tokens(self, ids, source_hex: list | None) -> list[dict | None]:
        if source_hex and len(source_hex) == len(ids):
            out = []
            for i, h in zip(ids, source_hex):
                if self._beyond(i):
                    out.append(self._oov(int(i)))
                    continue
                raw = bytes.fromhex(h.replace(" ", "")) if isinstance(h, str) else b""
                b, written = piece_bytes(raw, declared=self.byte_level)
                special = self.vocab is not None and int(i) in self.vocab.special
                d = piece_dict(piece_from_bytes(int(i), b, special=special))
                if written is not None:
                    d["raw"] = written
                out.append(d)
            return _join_split_characters(out)
        if self.vocab is not None:
            ids = [int(i) for i in ids]
            return _join_split_characters([self._oov(i) if self._beyond(i) else piece_dict(p)
                                           for i, p in zip(ids, decode_pieces(self.vocab, ids))])
        return [None] * len(ids)

    def _beyond(self, token_id) -> bool:
        return self.vocab is not None and int(token_id) >= len(self.vocab)

    def _oov(self, token_id: int) -> dict:
        n = len(self.vocab)
        return {"text": oov_text(n), "hex": "", "partial": False, "special": False, "unknown": True,
                "lost": False, "oov": n}


def oov_text(size: int) -> str:
    """What a chip of an id beyond a `size`-id vocabulary says."""
    return f"not in the tokenizer ({size} ids)"


def piece_dict(p: TokenPiece) -> dict:
    """A TokenPiece for the page; `lost` marks U+FFFD, bytes the source had already lost."""
    return {"text": p.text, "hex": p.hex, "partial": p.partial, "special": p.special, "unknown": p.unknown,
            "lost": "\ufffd" in p.text}


def _join_split_characters(pieces: list[dict | None]) -> list[dict | None]:
    """Runs of partial pieces whose bytes together decode as UTF-8 get the character(s) they
    make (`joined`) and their place in the run (`join`: start, mid, end): the chips keep their
    hex, the page draws them as one and says what they spell."""
    k = 0
    n = len(pieces)
    while k < n:
        p = pieces[k]
        if not (p and p["partial"]):
            k += 1
            continue
        j = k
        buf = bytearray()
        while j < n and pieces[j] and pieces[j]["partial"]:
            buf += bytes.fromhex(pieces[j]["hex"].replace(" ", ""))
            j += 1
        try:
            text = buf.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and j - k > 1:
            for m in range(k, j):
                pieces[m]["joined"] = text
                pieces[m]["join"] = "start" if m == k else ("end" if m == j - 1 else "mid")
        k = j
    return pieces


def _f(values, i: int) -> float | None:
    if values is None or i >= len(values):
        return None
    v = np.float32(values[i])
    return None if np.isnan(v) else float(str(v))


def token_state(*, trained: bool, node_sampled: bool, has_logprob: bool, special: bool, token_id: int) -> str:
    """One of the seven states (module docstring), first match wins."""
    if trained and not node_sampled:
        return "fault"
    if token_id < 0:
        return "placeholder"
    if special:
        return "special_trained" if trained else "special"  # a pad with mask 1 must not look untrained
    if trained:
        return "trained"
    if node_sampled and has_logprob:
        return "filtered"
    return "context"


def token_views(*, ids, mask, logprobs, advantages, trainer_logprobs, pieces: list, node_sampled: bool,
                start: int, end: int, t0: int, drift_at: int | None = None,
                suspect: set[int] | None = None) -> list[dict]:
    """Chips for tokens `start..end` of one node whose first token sits at branch offset `t0`.

    Each chip: `i` (in the node), `t` (in the branch), `id`, `state`, `trained` (mask), `logprob`,
    `advantage`, `delta` (trainer − behaviour logprob, nats) and `ratio` (exp Δ) where comparable,
    overlay buckets `lpb`, `advb`, `dlb` (None = nothing to draw, -1 = missing: hatched), `piece`
    (`pieces[i - start]`), `drift`, `suspect`."""
    suspect = suspect or set()
    out = []
    for i in range(start, end):
        trained = bool(mask[i]) if mask is not None and i < len(mask) else False
        lp = _f(logprobs, i)
        adv = _f(advantages, i)
        tlp = _f(trainer_logprobs, i)
        p = pieces[i - start]
        state = token_state(trained=trained, node_sampled=node_sampled, has_logprob=lp is not None,
                            special=bool(p and p.get("special")), token_id=int(ids[i]))
        sampled_token = state in ("trained", "filtered") or (node_sampled and (trained or lp is not None))
        delta = ratio = None
        if trained and lp is not None and tlp is not None:
            delta = tlp - lp
            ratio = math.exp(delta) if delta < 700 else math.inf
        if lp is not None:
            lpb = _bucket(lp, LOGPROB_EDGES)
        else:
            lpb = -1 if sampled_token else None  # missing on a sampled token; nothing on context
        advb = _bucket(adv, ADVANTAGE_EDGES) if adv is not None else (-1 if trained else None)
        if delta is not None:
            dlb = _bucket(abs(delta), DELTA_EDGES)
        else:
            dlb = -1 if trained else None  # mask 1 but a logprob on either side missing
        out.append({"i": i, "t": t0 + i, "id": int(ids[i]), "state": state, "trained": trained,
                    "logprob": lp, "advantage": adv, "trainer_logprob": tlp, "delta": delta,
                    "ratio": None if ratio is None or not math.isfinite(ratio) else ratio,
                    "lpb": lpb, "advb": advb, "dlb": dlb,
                    "piece": p, "drift": i == drift_at, "suspect": i in suspect})
    return out


def windows(n: int, *, first: int = FIRST, size: int = WINDOW,
            include: int | None = None) -> list[tuple[int, int, bool]]:
    """A strip of `n` tokens cut into windows: `(start, end, drawn)`. The first `first` tokens
    (the page's remaining budget; 0 = none) and the window holding token `include` (a deep
    link) are drawn in the page; the rest load as they scroll into view."""
    out = []
    s = 0
    if n > 0 and first > 0:
        s = min(n, first)
        out.append((0, s, True))
    while s < n:
        e = min(n, s + size)
        out.append((s, e, include is not None and s <= include < e))
        s = e
    return out


def outliers(tokens: list[dict], limit: int = 20) -> list[dict]:
    """The mask-1 tokens with the largest |Δ| (trainer − inference), largest first."""
    rows = [t for t in tokens if t["delta"] is not None]
    rows.sort(key=lambda t: -abs(t["delta"]))
    return [{"t": t["t"], "i": t["i"], "id": t["id"], "delta": t["delta"], "ratio": t["ratio"],
             "logprob": t["logprob"], "trainer_logprob": t["trainer_logprob"]} for t in rows[:limit]]
