"""One page of the messages of one branch: each message with its text preview, media parts, tool
calls paired to their results (and how long each took), the call a tool message answers, its
findings, and its token strip (app/views/rollout/windows.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from app import urls
from app.config import WebSettings
from app.db.tokenarrays import floats_or_none, unpack_bits, unpack_floats, unpack_ids
from app.store.media import IMAGE_TYPES
from app.views.rollout.timeline import tool_duration
from app.views.rollout.windows import Pieces, strip
from ingest.formats._openai import MEDIA_PARTS
from ingest.metrics import tool_failure
from ingest.schema import content_text, media_label

MEDIA_TYPES = frozenset(MEDIA_PARTS.values())  # the types a stored media placeholder has
_LINK_KEYS = ("url", "image_url", "image", "audio", "video", "document", "uri", "file_id", "path", "file_url")


def _link_text(part: dict) -> str | None:
    """The URL, path or file id a media part whose bytes were not carried points to (shown as
    escaped text, never fetched), or None."""
    for holder in (part, part.get(part.get("source_type") or ""), part.get("source"), part.get("file"),
                   part.get("image_url")):
        if isinstance(holder, dict):
            for key in _LINK_KEYS:
                if isinstance(holder.get(key), str) and not holder[key].startswith("data:"):
                    return holder[key][:500]
    return None


def media_parts(parts: list) -> list[dict]:
    """The media of one message's content parts, in order (an Anthropic `tool_result` block's
    own content included): `{type: image|audio|video|file, media_type (as the trace claims it),
    bytes, sha256, link}`; `sha256` and `bytes` are set when the bytes were carried (stored in the
    `media` table), `link` (the URL / path / file id, at most 500 characters) when only a link
    was. Never the bytes. `with_stored` adds the served URL."""
    out = []
    for p in parts:
        if not isinstance(p, dict):
            continue
        if p.get("type") in MEDIA_TYPES:
            media_type = p.get("media_type")
            if media_type is None and isinstance(p.get("source"), dict):
                media_type = p["source"].get("media_type")
            out.append({"type": p["type"], "media_type": media_type if isinstance(media_type, str) else None,
                        "bytes": p.get("bytes"), "sha256": p.get("sha256") if p.get("placeholder") else None,
                        "link": None if p.get("placeholder") else _link_text(p)})
        elif isinstance(p.get("content"), list):
            out += media_parts(p["content"])
    return out


def with_stored(views: list[dict], stored: dict[str, tuple[str, int]], max_inline: int) -> None:
    """Fill in, on each message view's `media`, what `/media` serves for it: `url` (None when the
    bytes are not stored: a link-only part, or a rollout stored before the `media` table),
    `media_type` as sniffed from the stored bytes (what the trace claimed kept in
    `claimed_media_type` when it differs), and `inline`: an image type drawn as a thumbnail (png,
    jpeg, gif, webp of at most `max_inline` bytes); anything else is a download link.
    `stored`: sha256 → (sniffed type, size in bytes), app.store.media.stored_media."""
    for v in views:
        for m in v["media"]:
            got = stored.get(m["sha256"]) if m["sha256"] else None
            m["url"], m["inline"] = None, False
            if got:
                sniffed, size = got
                if sniffed != m["media_type"]:
                    m["claimed_media_type"] = m["media_type"]
                m["media_type"], m["bytes"], m["url"] = sniffed, size, urls.media(m["sha256"])
                m["inline"] = sniffed in IMAGE_TYPES and size <= max_inline
            m["label"] = media_label(m)


def pair_calls(pairs, on_page: set[int], link, messages) -> tuple[dict[int, list], dict[int, dict]]:
    """Tool calls of the branch (`ingest.graph.pair_tool_calls`) → (node → its calls with their
    result links and durations, result node → the call it answers), for the nodes `on_page` only:
    links are built for what the page shows, not for every call of the branch."""
    calls_by_node: dict[int, list] = {}
    answer_of: dict[int, dict] = {}
    for c in pairs:
        if c.node in on_page:
            calls_by_node.setdefault(c.node, []).append(
                {"id": c.id, "name": c.name, "position": c.position, "result_node": c.result_node,
                 "result_url": link(c.result_node), "duration": tool_duration(c, messages),
                 "later_results": [{"node": i, "url": link(i)} for i in c.later_results]})
        results = [c.result_node, *c.later_results] if c.result_node is not None else []
        for k, i in enumerate(results):  # a call answered twice: each result links the one it replaced
            if i in on_page:
                answer_of[i] = {"node": c.node, "id": c.id, "name": c.name, "url": link(c.node),
                                "superseded_by": {"node": results[k + 1], "url": link(results[k + 1])}
                                if k + 1 < len(results) else None,
                                "supersedes": {"node": results[k - 1], "url": link(results[k - 1])} if k else None}
    return calls_by_node, answer_of


@dataclass
class MessageContext:
    """What every message of one page is drawn with. `window_url(idx, start, end)` loads a window
    of a strip; `budget[0]` counts the tokens the page may still draw inline; `rerendered` lists
    (first node, branch) of branches whose prompt was re-rendered (or compacted) without the
    messages before `first`, `member` each branch's node set."""

    pieces: Pieces
    calls_by_node: dict
    answer_of: dict
    findings_by_node: dict
    run_id: str
    rollout_pk: int
    all_tokens: bool
    web: WebSettings
    window_url: object = None
    budget: list[int] | None = None
    rerendered: list[tuple[int, int]] = field(default_factory=list)
    member: list[set[int]] = field(default_factory=list)


def message_views(nodes, ctx: MessageContext, starts, pos_of: dict[int, int], focus_pos: int | None,
                  focus_token: int | None) -> list[dict]:
    """The page's messages in order; `starts[pos]` is the branch offset of the first token of the
    message at branch position `pos`. A message's reasoning is marked dropped in the later
    branches re-rendered without it; its tool calls carry their raw arguments, as sampled."""
    out = []
    for node in nodes:
        pos = pos_of[node.idx]
        v = node_view(node, ctx, t0=int(starts[pos]), include_token=focus_token if pos == focus_pos else None)
        v["reasoning_dropped_in"] = [b for first, b in ctx.rerendered
                                     if first > node.idx and node.idx not in ctx.member[b]] \
            if v["reasoning"] else []
        raw_calls = (node.message or {}).get("tool_calls") or []
        v["tool_calls"] = [dict(c) for c in v["tool_calls"]]
        for c in v["tool_calls"]:
            if c["position"] < len(raw_calls):
                c["arguments"] = raw_calls[c["position"]].get("arguments", "")
        out.append(v)
    return out


def node_view(node, ctx: MessageContext, *, t0: int = 0, include_token: int | None = None) -> dict:
    """One message of the page; `t0` is the branch offset of its first token, `include_token`
    (node-relative) a token whose window must be drawn (windows.strip)."""
    msg = node.message or {}
    text = content_text(msg.get("content"))
    ids = unpack_ids(node.token_ids)
    n = len(ids)
    mask = unpack_bits(node.mask, n) if node.mask else None
    extra = node.extra or {}
    node_findings = ctx.findings_by_node.get(node.idx, [])
    segments, tokens = strip(node, ctx.pieces, n, t0, ids=ids, mask=mask, findings=node_findings,
                             all_tokens=ctx.all_tokens, include_token=include_token,
                             window_url=ctx.window_url, budget=ctx.budget)
    n_trained = int(mask.sum()) if mask is not None else 0
    bytes_lost = any(t["piece"] and t["piece"].get("lost") for t in tokens)
    logprobs = unpack_floats(node.logprobs)
    advantages = unpack_floats(node.advantages)
    parts = msg.get("content") if isinstance(msg.get("content"), list) else []
    view = {
        "idx": node.idx, "parent": node.parent, "role": node.role, "sampled": node.sampled,
        "timestamp": node.timestamp, "policy_version": node.policy_version,
        "reward": node.reward, "mc_return": node.mc_return,
        "content": text[:ctx.web.preview_chars], "content_len": node.content_len,
        "content_truncated": node.content_len > ctx.web.preview_chars,
        "content_url": urls.node_text(ctx.run_id, ctx.rollout_pk, node.idx),
        # parts only: a string content is text (walking a 12 MB string char by char took 1 s)
        "media": media_parts(parts),
        "reasoning": msg.get("reasoning_content"),
        "tool_calls": ctx.calls_by_node.get(node.idx, []),
        "answers": ctx.answer_of.get(node.idx),
        # a failed tool result, by its format's own signal (ingest.metrics.tool_failure)
        "tool_error": tool_failure(msg.get("extra") or {}, text) if node.role == "tool" else None,
        "tool_error_superseded": bool((ctx.answer_of.get(node.idx) or {}).get("superseded_by")),
        "name": msg.get("name"),
        # a role the source used that the native model has no word for (kept by the reader)
        "source_role": (msg.get("extra") or {}).get("source_role"),
        "n_tokens": n, "n_trained": n_trained, "tokens": tokens, "tokens_shown": len(tokens),
        "t0": t0, "segments": segments,
        "token_ids": [int(x) for x in ids] if ctx.all_tokens else None,
        "mask": [bool(x) for x in mask] if (ctx.all_tokens and mask is not None) else None,
        "logprobs": floats_or_none(logprobs) if ctx.all_tokens else None,
        "advantages": floats_or_none(advantages) if ctx.all_tokens else None,
        "bytes_lost": bytes_lost,
        # The bytes_lost_upstream finding already names this on the node: one badge, not two.
        "bytes_lost_badge": bytes_lost and not any(f["kind"] == "bytes_lost_upstream" for f in node_findings),
        # Shown only where the stored check fired (it deliberately skips a turn whose source
        # recorded tokens but no text): pages never recompute a check.
        "empty_response": any(f["kind"] == "empty_response" for f in node_findings),
        "findings": node_findings,
        "extra": {k: v for k, v in extra.items() if k not in ("token_bytes", "trainer_logprobs")},
    }
    return view

