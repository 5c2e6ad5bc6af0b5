"""Settings, read once from the environment and validated at start-up."""
from __future__ import annotations

from functools import lru_cache

from pydantic import field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """`ROLLSCOPE_*` environment variables.

    - `ROLLSCOPE_DATABASE_URL`: SQLAlchemy URL; `sqlite:///./rollscope.db` (default) or
      `postgresql+psycopg://user@host:5432/db`. A bare `postgresql://` URL is accepted.
    - `ROLLSCOPE_PAGE_SIZE`: rows per list page (default 50, 1..1000).
    - `ROLLSCOPE_OTLP_IDLE_SECONDS`: a trace whose root span has not arrived is stored after
      this many seconds without a new span (default 30).
    - `ROLLSCOPE_OTLP_MAX_PENDING_SPANS`: spans held for unfinished traces before `/v1/traces`
      answers 429 (default 200000).
    """

    model_config = SettingsConfigDict(env_prefix="ROLLSCOPE_")

    database_url: str = "sqlite:///./rollscope.db"
    page_size: int = 50
    otlp_idle_seconds: float = 30.0
    otlp_max_pending_spans: int = 200_000

    @field_validator("database_url")
    @classmethod
    def _normalize_url(cls, v: str) -> str:
        if v.startswith("postgres://"):
            v = "postgresql://" + v[len("postgres://"):]
        if v.startswith("postgresql://"):
            v = "postgresql+psycopg://" + v[len("postgresql://"):]
        if not (v.startswith("sqlite") or v.startswith("postgresql+psycopg://")):
            raise ValueError(f"ROLLSCOPE_DATABASE_URL must be a sqlite:// or postgresql:// URL, got {v!r}")
        return v

    @field_validator("page_size")
    @classmethod
    def _page_size(cls, v: int) -> int:
        if not 1 <= v <= 1000:
            raise ValueError("ROLLSCOPE_PAGE_SIZE must be between 1 and 1000")
        return v


@lru_cache
def get_settings() -> Settings:
    return Settings()
