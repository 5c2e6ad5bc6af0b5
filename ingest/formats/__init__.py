"""Format readers (one module per format) and the toolkit they share.

- `base.py`: the `Reader` protocol, `ReadContext`, `record_error()`.
- `registry.py`: the ordered reader list, `detect()`, `names()`, `get()`.
- `_openai.py`, `_responses.py`, `_build.py`: converters shared by readers, one per wire dialect
  (OpenAI chat messages, OpenAI Responses items) and the `RolloutBuilder` for node chains.
"""
from __future__ import annotations

from ingest.formats.base import ReadContext, Reader, record_error


def detect(source):  # noqa: ANN001, ANN201 - thin re-export, see registry.detect
    from ingest.formats.registry import detect as _detect

    return _detect(source)


def names() -> list[str]:
    from ingest.formats.registry import names as _names

    return _names()


__all__ = ["ReadContext", "Reader", "detect", "names", "record_error"]
