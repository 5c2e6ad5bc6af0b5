"""JSON in and out, keeping what orjson alone would lose.

- `loads`: orjson, with the standard library taking over for what orjson refuses (bare
  NaN/Infinity, lone surrogates → U+FFFD) or would round (integers past 64 bits keep every digit).
- `dumps`: strict JSON bytes (NaN/Infinity → null), big integers with every digit.
- `strict`: non-finite floats → None; `cut_short`: text that looks like a JSON value cut off.
"""
from __future__ import annotations

import json
import math
from typing import Any

import orjson


def _fix_surrogates(value: Any) -> Any:
    """Lone UTF-16 surrogates (valid JSON escapes, invalid Unicode) → U+FFFD; pairs are joined."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_fix_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_fix_surrogates(k): _fix_surrogates(v) for k, v in value.items()}
    return value


# A run of 19+ digits may be an integer past what orjson keeps exactly: orjson turns integers
# beyond 64 bits into floats, silently (cases 20 and 20b of the bug list). Such text is parsed again with
# the standard library, which keeps every digit. (Digits inside strings cost only the slower parse.)
# The check maps every byte to "0" (an ASCII digit) or " " and looks for 19 zeros: both run at
# memory speed, where a regex took ~40 ns a byte (0.5 s to read back a 12 MB tool output).
_DIGIT_OR_SPACE = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_NINETEEN_DIGITS = b"0" * 19


def _has_long_digits(data: bytes | bytearray | memoryview | str) -> bool:
    """A run of 19 or more ASCII digits anywhere in `data` (JSON numbers are ASCII)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    return _NINETEEN_DIGITS in raw.translate(_DIGIT_OR_SPACE)


def loads(data: bytes | str) -> Any:
    """Parse one JSON value; accepts NaN/Infinity/-Infinity (non-strict JSON). Integers keep every
    digit, however long (never a float conversion).

    Raises ValueError for anything that is not JSON, including nesting too deep to parse.
    """
    try:
        value = orjson.loads(data)
        if not _has_long_digits(data):
            return value
    except orjson.JSONDecodeError:
        pass
    try:
        return _fix_surrogates(json.loads(data))
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


def cut_short(text: bytes | str) -> bool:
    """True when `text` looks like a JSON value cut short: it opens an object or array (`{`,
    `[`) and the parser stops at the end of the input (or inside an unterminated string), as
    when a writer stops mid-record. Text that is simply not JSON (`hello world`, `{"a": 1} x`)
    is False."""
    t = (text.decode("utf-8", "replace") if isinstance(text, bytes | bytearray) else text).strip()
    if not t.startswith(("{", "[")):
        return False
    try:
        json.loads(t)
    except json.JSONDecodeError as e:
        return e.pos >= len(t) - 1 or e.msg.startswith("Unterminated")
    except (ValueError, RecursionError):
        return False
    return False


def strict(value: Any) -> Any:
    """A copy with non-finite floats (NaN, ±Infinity) as None: what strict JSON can hold."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [strict(v) for v in value]
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    return value


def dumps(value: Any, *, sort_keys: bool = False) -> bytes:
    """Strict JSON bytes of `value` (NaN/Infinity → null) keeping every digit of integers past
    64 bits, which orjson refuses (then the standard library writes them)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    except TypeError:
        return json.dumps(strict(value), sort_keys=sort_keys, ensure_ascii=False, allow_nan=False,
                          separators=(",", ":")).encode("utf-8")
