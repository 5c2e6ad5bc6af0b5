"""Field validation shared by the format readers.

A reader checks the source fields it maps and raises :class:`FieldError` with the path of the
offending field *relative to the record* (`turns[0].completion_ids[3]`). The reader catches it
and turns it into a `RecordError`, adding its own prefix (line, JSON path, batch position) in
its own path format, so one bad record never stops the file.
"""
from __future__ import annotations

from typing import Any

# The range of Postgres INTEGER columns (and of SQLite's as we use them): steps, indices, counts.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


class FieldError(Exception):
    """A field of one record does not have the documented shape.

    `field` is the path of the field relative to the record (list items as `name[i]`);
    `message` says what was expected and, where useful, what was found.
    """

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def is_number_or_none(x: Any) -> bool:
    """True for None, an int or a float (NaN and infinities included); False for booleans."""
    return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))


def ints(value: Any, field: str) -> list[int] | None:
    """A token id / mask array: a list of integers, or None when the field is absent.

    Integral floats (`2.0`) are accepted and converted; booleans, fractional floats and
    anything else raise FieldError naming the item (`field[i]`).
    """
    if value is None:
        return None
    if not isinstance(value, list):
        raise FieldError(field, f"expected a list of integers, got {type(value).__name__}")
    if all(type(x) is int for x in value):  # the common case, fast (a bool is not of type int)
        return value
    out = []
    for i, x in enumerate(value):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or (isinstance(x, float) and not x.is_integer()):
            raise FieldError(f"{field}[{i}]", f"expected an integer, got {x!r}")
        out.append(int(x))
    return out


def floats(value: Any, field: str) -> list[float | None] | None:
    """A per-token number array (logprobs): a list of numbers or nulls, or None when absent.

    Numbers become floats and nulls stay None ("not recorded"); booleans and anything else
    raise FieldError naming the item (`field[i]`).
    """
    if value is None:
        return None
    if not isinstance(value, list):
        raise FieldError(field, f"expected a list of numbers, got {type(value).__name__}")
    if all(type(x) is float or x is None for x in value):  # the common case, fast
        return value
    out: list[float | None] = []
    for i, x in enumerate(value):
        if not is_number_or_none(x):
            raise FieldError(f"{field}[{i}]", f"expected a number or null, got {x!r}")
        out.append(None if x is None else float(x))
    return out
