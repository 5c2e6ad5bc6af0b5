"""A message's token strip on the rollout page: the run's vocabulary, token chips
(app/views/tokens.py token_views plus what the findings say of each token), and the windows a
long strip is cut into (the first drawn, the rest loaded as they scroll into view)."""
from __future__ import annotations

import numpy as np
from sqlmodel import Session

from app.db.tokenarrays import unpack_bits, unpack_floats, unpack_ids
from app.queries import nodes as q_nodes
from app.views import tokens as tokenview
from app.views.rollout.findings import flagged_tokens, not_generated, suspected_padding
from ingest.checks.arrays import FLOAT32_MAX
from ingest.metrics import finite_number

Pieces = tokenview.Pieces


def _load_vocab(session: Session, sha256: str | None):
    if not sha256:
        return None
    from ingest.tokenizer import cached_from_blob, from_blob

    def loader():
        t = q_nodes.get_tokenizer(session=session, sha256=sha256)
        if t is None:
            raise LookupError(sha256)
        return from_blob(t.vocab, t.name, t.kind, t.sha256)

    try:
        return cached_from_blob(sha256, loader)
    except LookupError:
        return None



def _declares_byte_level(run, envelope: dict) -> bool:
    """The run or the rollout says its token pieces are byte-level BPE spelling
    (`extra.byte_level_bpe: true` on the run or the rollout)."""
    return bool(((run.extra or {}) if run else {}).get("byte_level_bpe")
                or (envelope.get("extra") or {}).get("byte_level_bpe"))



def strip(node, pieces: Pieces, n: int, t0: int, *, ids, mask, findings: list, all_tokens: bool,
          include_token: int | None, window_url, budget: list[int] | None) -> tuple[list[dict], list[dict]]:
    """A node's strip → (segments, the chips drawn). The first window, and the one holding
    `include_token` (a deep link, node-relative), are drawn; the rest carry the URL that loads
    them (`window_url(idx, start, end)`). `budget[0]`: tokens the page may still draw inline
    (decremented). With `all_tokens` (the JSON twin, `tokens=all`) every token is drawn."""
    first = tokenview.FIRST if budget is None else min(tokenview.FIRST, budget[0])
    spans = [(0, n, True)] if all_tokens else tokenview.windows(n, first=first, include=include_token)
    segments, tokens = [], []
    for s, e, drawn in spans:
        if drawn:
            chips = _token_chips(node, pieces, s, e, t0, ids=ids, mask=mask, findings=findings)
            tokens.extend(chips)
            segments.append({"start": s, "end": e, "tokens": chips})
        else:
            segments.append({"start": s, "end": e, "t0": t0 + s, "t1": t0 + e, "tokens": None,
                             "url": window_url(node.idx, s, e) if window_url else None})
    if budget is not None:
        budget[0] = max(0, budget[0] - len(tokens))
    return segments, tokens


def _token_chips(node, pieces: Pieces, start: int, end: int, t0: int, *, ids=None, mask=None,
                 findings: list | None = None) -> list[dict]:
    """Chips for tokens start..end of `node` (tokenview.token_views)."""
    ids = unpack_ids(node.token_ids) if ids is None else ids
    n = len(ids)
    if mask is None and node.mask:
        mask = unpack_bits(node.mask, n)
    extra = node.extra or {}
    hexes = extra.get("token_bytes")
    piece_list = pieces.tokens(ids[start:end], hexes[start:end] if hexes else None)
    drift = extra.get("token_drift") or {}
    drift_at = drift.get("index") if isinstance(drift, dict) and isinstance(drift.get("index"), int) else None
    trainer = extra.get("trainer_logprobs")
    trainer = _trainer_values(trainer) if isinstance(trainer, list) else None
    chips = tokenview.token_views(
        ids=ids, mask=mask, logprobs=unpack_floats(node.logprobs), advantages=unpack_floats(node.advantages),
        trainer_logprobs=trainer, pieces=piece_list, node_sampled=bool(node.sampled), start=start, end=end,
        t0=t0, drift_at=drift_at, suspect=suspected_padding(findings or []))
    flagged = flagged_tokens(findings or [], n)
    anchors = {f["position"] for f in findings or [] if f.get("anchor")}
    sampled = node.role == "assistant"
    padding = not_generated(findings or []) if sampled else set()
    for c in chips:
        # a token of a message the policy did not write is never "sampled", mask or not; nor is a
        # pad (or a token after the EOS) that mask_on_padding found in a sampled turn
        c["sampled"] = sampled and c["i"] not in padding
        c["flags"] = flagged.get(c["i"])
        c["anchor"] = f"t-{c['t']}" if c["i"] in anchors else None  # the chip's own id: a finding links here
    return chips


def _trainer_values(values: list) -> np.ndarray:
    """The trainer logprobs as float32, NaN ("not comparable") for anything that is not a finite
    number within float32: None, a string, a boolean, NaN, ±inf, 10**400 (`invalid_logprob`
    reports those; the page shows the token without a Δ)."""
    out = np.full(len(values), np.nan, dtype="<f4")
    for i, v in enumerate(values):
        f = finite_number(v)
        if f is not None and abs(f) <= FLOAT32_MAX:
            out[i] = f
    return out
