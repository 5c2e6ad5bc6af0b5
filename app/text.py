"""Trace text made visible: characters that reorder or hide text are shown as `⟨U+XXXX⟩`.

Trace text is untrusted and is shown to people who decide things by reading it. Bidirectional
controls let text display in an order other than the one it is stored in (an id or a message
holding "\\u202eevil.exe\\u202c txt" reads "exe.live txt"; the "Trojan Source" attack, CVE-2021-42574,
https://trojansource.codes/), and zero-width or tag characters hide text altogether (Unicode tag
characters U+E0000–U+E007F carry "ASCII smuggled" prompts an agent reads but a person does not
see). `reveal_invisible` replaces each such character with a visible placeholder naming its code
point, as plain text: the result is escaped like any other string (never marked safe).

Applied in one place for the HTML pages: the Jinja `finalize` hook (app.render) rewrites every
`str` a template prints (Markup, already built by our own code, is left alone), and app.chips
applies it to token pieces before escaping them. JSON twins and the API keep the raw text: they
are data, and a client decides how to show it.

The set (Unicode 15 names): ALM U+061C; Mongolian vowel separator U+180E; zero width space,
non-joiner, joiner U+200B–U+200D; LRM, RLM U+200E–U+200F; LRE, RLE, PDF, LRO, RLO U+202A–U+202E;
word joiner and invisible operators U+2060–U+2064; LRI, RLI, FSI, PDI U+2066–U+2069; byte order
mark / zero width no-break space U+FEFF; interlinear annotation U+FFF9–U+FFFB; tags
U+E0000–U+E007F.
"""
from __future__ import annotations

import re

_RANGES = [(0x061C, 0x061C), (0x180E, 0x180E), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064),
           (0x2066, 0x2069), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0xE0000, 0xE007F)]
INVISIBLE = frozenset(cp for lo, hi in _RANGES for cp in range(lo, hi + 1))
# A search first: most strings hold none of these, and a regex search is far cheaper than translate.
_FIND = re.compile("[" + "".join(f"{re.escape(chr(lo))}-{re.escape(chr(hi))}" for lo, hi in _RANGES) + "]")
_TABLE = {cp: f"⟨U+{cp:04X}⟩" for cp in INVISIBLE}


def reveal_invisible(text: str) -> str:
    """`text` with every bidirectional control, zero-width and tag character replaced by
    `⟨U+XXXX⟩` (e.g. "a\\u202eb" → "a⟨U+202E⟩b"). Plain text in, plain text out: escape it as usual."""
    if _FIND.search(text) is None:
        return text
    return text.translate(_TABLE)
