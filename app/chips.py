"""A token chip's HTML, built in Python because a page draws thousands of them: a Jinja macro
per chip cost ~230 µs (470 ms for a 2,048-token page), this ~10 µs.

Every value goes through `markupsafe.escape` (as autoescape would) before it is placed: trace
text (pieces, raw byte-level pieces) is never trusted, and the only markup is this module's own.
Pieces first go through `app.text.reveal_invisible` (bidi controls and zero-width characters shown
as `⟨U+XXXX⟩`), as the templates' `finalize` hook does for every other string.
Registered as the `chip` filter; `_macros.html`'s `token(t)` calls it.
"""
from __future__ import annotations

from markupsafe import Markup, escape

from app.render import compact_number, significant
from app.text import reveal_invisible
from app.views.tokens import STATE_TEXT, oov_text


def _classes(t: dict, p: dict | None) -> str:
    c = ["tok", f"tok-{t['state']}"]
    if p and p.get("partial"):
        c.append("tok-partial")
        if p.get("join"):
            c.append(f"j-{p['join']}")
    if p and p.get("lost"):
        c.append("tok-lost")
    if t["trained"] and t["logprob"] is None:
        c.append("tok-nolp")
    if t.get("drift"):
        c.append("tok-drift")
    if t.get("suspect"):
        c.append("tok-suspect")
    if t.get("first_diff"):
        c.append("tok-first-diff")
    if t.get("flags"):
        c.append("tok-flagged")
    if p is None:
        c.append("tok-id")
    elif p.get("unknown"):
        c.append("tok-unknown")
    return " ".join(c)


def _title(t: dict, p: dict | None) -> str:
    lp = t["logprob"]
    parts = [f"t{t['t']} id {t['id']} · logprob " + (f"{lp:.4f}" if lp is not None else
                                                    ("missing" if t["lpb"] == -1 else "none (context)"))]
    if t["advantage"] is not None:
        parts.append("advantage " + significant(t["advantage"], sign=True))
    if t["state"] in ("fault", "filtered", "special_trained"):  # the states a reader must not miss
        parts.append(STATE_TEXT[t["state"]])
    if p and p.get("partial"):
        parts.append(f"bytes {p['hex']} " + (f"(part of “{p['joined']}”)" if p.get("joined")
                                             else "(part of a character split across tokens)"))
    if p and p.get("raw"):
        parts.append(f"piece {p['raw']}")
    if p and p.get("lost"):
        parts.append("bytes lost upstream (U+FFFD)")
    if p and p.get("oov"):
        parts.append(oov_text(p["oov"]))
    if t.get("drift"):
        parts.append("prompt diverges here from the previous prompt + completion")
    if t.get("suspect"):
        parts.append("suspected padding: logprob exactly 0.0 in a trailing run")
    if t.get("flags"):
        parts.append("finding: " + ", ".join(t["flags"]))
    text = _text(t, p)
    if len(text) > LONG_PIECE:  # the chip shows it clipped (app.css .tok): the whole piece here
        parts.append(f"text {text}")
    return " · ".join(parts)


LONG_PIECE = 24  # a piece longer than this may be clipped on its chip; its title then holds it whole


def _text(t: dict, p: dict | None) -> str:
    if p is None:
        return str(t["id"])
    if p.get("partial"):
        return p["hex"]
    if p.get("oov"):
        return oov_text(p["oov"])
    if p.get("unknown"):
        return f"<{t['id']}>"
    return reveal_invisible(p["text"]).replace("\n", "↵")


def chip(t: dict) -> Markup:
    """One token chip (see tokenview.token_views for the fields of `t`)."""
    p = t["piece"]
    data = []
    if t["logprob"] is not None:
        data.append(("data-lp", f"{t['logprob']:.4f}"))
    for key, name in (("lpb", "data-lpb"), ("advb", "data-advb"), ("dlb", "data-dlb")):
        if t[key] is not None:
            data.append((name, t[key]))
    if t["advantage"] is not None:
        data.append(("data-adv", significant(t["advantage"], sign=True)))
    if t["delta"] is not None:
        data.append(("data-delta", f"{t['delta']:+.4f}"))
        data.append(("data-ratio", compact_number(t["ratio"], "%.4f") if t["ratio"] is not None else "inf"))
    if p and p.get("partial"):
        data.append(("data-hex", p["hex"]))
    if p and p.get("raw"):
        data.append(("data-raw", reveal_invisible(p["raw"])))
    if p and p.get("oov"):
        data.append(("data-oov", int(p["oov"])))
    attrs = "".join(f' {k}="{escape(v)}"' for k, v in data)
    return Markup(f'<span class="{escape(_classes(t, p))}" id="t-{int(t["t"])}" data-i="{int(t["i"])}" '
                  f'data-id="{int(t["id"])}"{attrs} title="{escape(reveal_invisible(_title(t, p)))}">'
                  f'{escape(_text(t, p))}</span>')
