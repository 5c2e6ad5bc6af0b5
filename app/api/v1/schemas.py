"""Response shapes shared by the /api/v1 resources: a list page and the error body."""
from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, Field

from app.errors import ErrorBody  # noqa: F401 (the error body, re-exported for the routes' `responses=`)

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
