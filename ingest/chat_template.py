"""A run's chat template: found beside its tokenizer, rendered in a sandbox.

HuggingFace keeps a model's chat template in `tokenizer_config.json` (`chat_template`: a Jinja2
string, or a list of `{name, template}` of which `default` is used) or, in newer releases, in a
`chat_template.jinja` file beside it. The spec (transformers `chat_template_utils.py`,
`_compile_jinja_template`) renders it with Jinja2's `ImmutableSandboxedEnvironment`
(`trim_blocks`, `lstrip_blocks`, the `loopcontrols` extension), a `tojson` filter that keeps
non-ASCII text, and the globals `raise_exception` and `strftime_now`. We do the same: trace text
is untrusted, and a template is code from the run's owner, so it never runs unsandboxed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # jinja2 is imported when a template is first rendered (CLI start-up: ~0.1 s)
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

CONFIG_NAME = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"


class TemplateError(ValueError):
    """The template could not be rendered (its own `raise_exception`, a Jinja error)."""


@dataclass
class TemplateConfig:
    """What `tokenizer_config.json` says about rendering: the template and the special tokens
    it refers to (`bos_token`, `eos_token`, ...; name → text), and the added tokens it declares
    (text → id, special ones only)."""

    chat_template: str | None = None
    tokens: dict[str, str] = field(default_factory=dict)
    special_ids: dict[str, int] = field(default_factory=dict)
    source: str | None = None


def _token_text(v: Any) -> str | None:
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), str):  # an AddedToken
        return v["content"]
    return None


def find_config(path: str | Path) -> Path | None:
    """The `tokenizer_config.json` for a `--tokenizer` argument: the file itself, the one in a
    folder, or the one beside a tokenizer.json. None when there is none."""
    p = Path(path)
    for cand in (p if p.name == CONFIG_NAME else None, p / CONFIG_NAME if p.is_dir() else None,
                 p.parent / CONFIG_NAME if p.is_file() else None):
        if cand is not None and cand.is_file():
            return cand
    return None


def load_config(path: str | Path) -> TemplateConfig:
    """Read the chat template and special tokens for a `--tokenizer` argument (a folder, a
    tokenizer_config.json, or a tokenizer.json with its config beside it). Returns an empty
    config when there is none. Raises ValueError naming the file when it is not valid JSON."""
    cfg_path = find_config(path)
    if cfg_path is None:
        return TemplateConfig()
    try:
        data = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{str(cfg_path)!r}: not a readable tokenizer_config.json: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{str(cfg_path)!r}: expected a JSON object")
    template = data.get("chat_template")
    if isinstance(template, list):  # [{name, template}]: the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    jinja_file = cfg_path.parent / TEMPLATE_FILE
    if not isinstance(template, str) and jinja_file.is_file():
        template = jinja_file.read_text(encoding="utf-8")
    tokens = {k: t for k in ("bos_token", "eos_token", "pad_token", "unk_token")
              if (t := _token_text(data.get(k))) is not None}
    special = {}
    for tid, tok in (data.get("added_tokens_decoder") or {}).items():
        text = _token_text(tok)
        if text is not None and str(tid).isdigit() and (not isinstance(tok, dict) or tok.get("special", True)):
            special[text] = int(tid)
    return TemplateConfig(template if isinstance(template, str) else None, tokens, special, str(cfg_path))


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str):
    raise TemplateError(message)


def environment() -> ImmutableSandboxedEnvironment:
    """The sandboxed environment chat templates run in (as transformers compiles them)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


_COMPILED: dict[str, jinja2.Template] = {}


def render(template: str, messages: list[dict], *, tools: list | None = None, add_generation_prompt: bool = False,
           **variables: Any) -> str:
    """Render `messages` (OpenAI-shaped dicts) with a chat template. `variables`: bos_token,
    eos_token and any template kwargs. Raises TemplateError when the template fails."""
    import jinja2

    try:
        compiled = _COMPILED.get(template)
        if compiled is None:
            compiled = _COMPILED[template] = environment().from_string(template)
        return compiled.render(messages=messages, tools=tools or None, add_generation_prompt=add_generation_prompt,
                               **variables)
    except TemplateError:
        raise
    except (jinja2.TemplateError, TypeError, ValueError, AttributeError, KeyError, IndexError) as e:
        raise TemplateError(f"{type(e).__name__}: {e}") from e
