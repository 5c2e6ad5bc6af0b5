"""Response shapes shared by the /api/v1 resources: a list page and the error body."""
from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, Field

from app.errors import ErrorBody

T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """One page of a list. `next` is the cursor of the next page (pass it as `after`), null on the
    last page; `next_url` is the same request with it."""

    items: list[T]
    next: str | None = Field(None, description="cursor of the next page, for `after`")
    next_url: str | None = None


class Items(BaseModel, Generic[T]):
    """A whole list (no paging)."""

    items: list[T]


ERRORS = {status: {"model": ErrorBody, "description": description} for status, description in {
    400: "a NUL character in the URL", 401: "no token, or an unknown or revoked one", 403: "the token lacks the scope",
    404: "no such resource", 422: "a parameter is invalid or unknown"}.items()}
