"""Settings in sections (`db`, `web`, `worker`, `api`, `alerts`), read once from the environment and
validated at start-up.

Each setting is `ROLLSCOPE_<SECTION>__<NAME>` in the environment (pydantic-settings' nested
delimiter `__`), e.g. `ROLLSCOPE_WORKER__SPOOL_DIR`, `ROLLSCOPE_WEB__PAGE_SIZE`. The database URL
keeps its documented short name `ROLLSCOPE_DATABASE_URL` (equivalent to `ROLLSCOPE_DB__URL`).
The README's configuration table lists every setting (tests/test_documented.py checks it).

Code reads `get_settings()` (the CLI) or `request.app.state.settings` (the app, built by
`create_app(settings)`); tests build `Settings(database_url=...)` explicitly. No module reads
the environment on its own.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PageSize = Annotated[int, Field(ge=1, le=1000)]


def normalize_db_url(v: str, *, source: str = "ROLLSCOPE_DATABASE_URL") -> str:
    """`postgres://` and `postgresql://` → `postgresql+psycopg://`; sqlite URLs as given.
    Raises ValueError for any other scheme, and for a URL that does not parse (a port that is
    not a number); the message names where the URL came from (`source`: the variable, or the
    CLI's `--db`) and the URL with its password masked."""
    from sqlalchemy.engine import make_url

    from app.db.unusable import masked

    if v.startswith("postgres://"):
        v = "postgresql://" + v[len("postgres://"):]
    if v.startswith("postgresql://"):
        v = "postgresql+psycopg://" + v[len("postgresql://"):]
    if not (v.startswith("sqlite") or v.startswith("postgresql+psycopg://")):
        raise ValueError(f"{source} must be a sqlite:// or postgresql:// URL, got {masked(v)!r}")
    try:
        make_url(v)
    except Exception as exc:  # noqa: BLE001 - sqlalchemy raises ArgumentError or ValueError
        raise ValueError(f"{source} {masked(v)!r} is not a valid URL: {exc}") from None
    return v


class DbSettings(BaseModel):
    """The database."""

    url: str = Field("sqlite:///./rollscope.db", description="SQLAlchemy URL: a SQLite file, or "
                     "`postgresql://user@host:5432/db` (also as `ROLLSCOPE_DATABASE_URL`)")
    pool_size: int = Field(5, ge=1, le=200, description="Postgres connections kept open per process")
    max_overflow: int = Field(10, ge=0, le=1000, description="extra Postgres connections under load, per process")
    retry_seconds: float = Field(30.0, ge=0, le=3600, description="how long a CLI command waits for an unreachable "
                                 "database (at start and mid-ingest; 0.5 s doubling, at most 15 s apart) before it "
                                 "stops with a one-line error")
    write_timeout_seconds: float = Field(5.0, ge=0, le=600, description="how long a write over HTTP (labels, "
                                         "notes, deleting a run, `POST /api/v1/ingest`, `/v1/traces`) waits for "
                                         "the database's write lock (SQLite busy timeout, Postgres `lock_timeout`) "
                                         "before it answers 503 with `Retry-After`")

    read_url: str | None = Field(None, description="a streaming replica of the Postgres primary: page and API "
                                 "reads (GET) go to it, every write stays on the primary, and a client that just "
                                 "wrote reads from it only once it has replayed that write (docs/deploy.md, \"Read "
                                 "replicas\"); unset: everything on the primary")
    read_max_lag_seconds: float = Field(5.0, ge=0, le=86_400, description="a replica further behind the primary "
                                        "than this (seconds since the last transaction it replayed, 0 when it has "
                                        "replayed all the primary flushed) serves no reads until it catches up")
    read_retry_seconds: float = Field(10.0, ge=0, le=3600, description="after the replica failed to answer, "
                                      "reads stay on the primary this long before it is tried again")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        return normalize_db_url(v, source="ROLLSCOPE_DB__URL")

    @field_validator("read_url")
    @classmethod
    def _read_url(cls, v: str | None) -> str | None:
        if v in (None, ""):
            return None
        v = normalize_db_url(v, source="ROLLSCOPE_DB__READ_URL")
        if not v.startswith("postgresql"):
            raise ValueError("ROLLSCOPE_DB__READ_URL must be a postgresql:// URL (a streaming replica)")
        return v


class WebSettings(BaseModel):
    """The dashboard pages and their JSON twins."""

    page_size: PageSize = Field(50, description="rows per list page (rollouts, quarantine)")
    messages_per_page: PageSize = Field(50, description="messages of one branch per rollout page")
    preview_chars: int = Field(2000, ge=1, le=10_000_000, description="characters of a message shown inline; "
                               "the rest behind \"show full text\"")
    tokens_inline: int = Field(1024, ge=1, le=10_000_000, description="token chips drawn in a rollout page; the "
                               "rest load by window as they scroll into view; `tokens=all` and the JSON twin give "
                               "every token")
    live_poll_seconds: float = Field(1.0, ge=0.01, le=60, description="live pages: how often a server process reads "
                                     "a watched run (or the ingest status) while any page listens; one read per run "
                                     "per process, shared by every open page (app/live.py)")
    live_heartbeat_seconds: float = Field(15.0, ge=0.1, le=300, description="live pages: an SSE comment this often on "
                                          "an idle event stream, so proxies keep it open")
    media_max_bytes: int = Field(20 * 1024 * 1024, ge=0, le=2**40, description="`/media/{sha256}`: an image up to "
                                 "this many bytes is drawn inline (a thumbnail on the rollout page); a larger one is "
                                 "stored all the same and served only as a download (`Content-Disposition: "
                                 "attachment`)")


class WorkerSettings(BaseModel):
    """Ingest: the CLI's synchronous path and the worker."""

    batch_size: int = Field(200, ge=1, le=100_000, description="rollouts written per transaction")
    spool_dir: Path = Field(Path("./spool"), description="folder the worker takes trace files from")
    parsers: int | None = Field(None, ge=0, le=64, description="worker: processes that parse and check the next "
                                "stretches of a file while the worker writes one (unset: one on a machine with two "
                                "cores or more, else none; 0: the worker parses alone). Forked from the worker, they "
                                "share its memory until they write to it")
    otlp_spool_dir: Path = Field(Path("./otlp-spool"), description="`/v1/traces`: folder where spans wait for "
                                 "their trace to finish (one file per trace), so a killed server loses none")
    otlp_idle_seconds: float = Field(30.0, gt=0, le=86_400, description="`/v1/traces`: a trace whose root span has "
                                     "not arrived is stored after this many seconds without a new span")
    otlp_max_pending_spans: int = Field(200_000, ge=1, le=100_000_000, description="`/v1/traces`: spans held for "
                                        "unfinished traces before it answers 429")
    heartbeat_seconds: float = Field(2.0, ge=0.05, le=300, description="worker: seconds between its heartbeats in "
                                     "the database (app/worker/heartbeat.py); a worker whose last beat is older than "
                                     "3 of its intervals is stale")


class ApiSettings(BaseModel):
    """The operators' REST API under `/api/v1`."""

    page_size: PageSize = Field(100, description="default rows per API list page")
    max_page_size: PageSize = Field(1000, description="largest `limit` an API list accepts")
    ingest_max_inflight: int = Field(4, ge=1, le=1000, description="`POST /api/v1/ingest` requests processed at "
                                     "once per process; the next one gets 429 with Retry-After")
    max_body_bytes: int = Field(64 << 20, ge=1024, le=2 << 30, description="largest request body `POST "
                                "/api/v1/ingest` and `POST /v1/traces` take, in bytes after gzip is inflated (64 MiB, "
                                "the OpenTelemetry Python exporter's own largest request); past it: 413, as soon as "
                                "the `Content-Length`, the bytes received or the bytes inflated show it")
    body_memory_bytes: int = Field(256 << 20, ge=1024, le=1 << 40, description="bytes of request bodies (as "
                                   "received, and inflated) those two endpoints hold at once per process; a request "
                                   "that would go past it gets 503 with Retry-After. At least `max_body_bytes`; "
                                   "twice that lets a gzip body of the largest size through beside its compressed "
                                   "bytes")
    body_timeout_seconds: float = Field(30.0, gt=0, le=3600, description="seconds those two endpoints wait for the "
                                        "next bytes of a request body (between chunks); past it: 408 Request Timeout "
                                        "with `Connection: close`, so a stalled sender holds nothing longer")

    @model_validator(mode="after")
    def _budget_fits_a_body(self) -> "ApiSettings":
        if self.body_memory_bytes < self.max_body_bytes:
            raise ValueError(f"api.body_memory_bytes ({self.body_memory_bytes}) is below api.max_body_bytes "
                             f"({self.max_body_bytes}): no body of the largest size could ever be taken")
        return self


class AlertSettings(BaseModel):
    """Alerts: step alerts (the rule in ingest/step_alerts.py, docs/analytics.md), the webhook they
    and the serve process's watcher of stale workers are POSTed to (app/alerts/)."""

    window: int = Field(16, ge=2, le=1000, description="step alerts: the trailing steps a step is compared with")
    min_steps: int = Field(6, ge=2, le=1000, description="step alerts: fewer trailing steps than this, no verdict")
    threshold: float = Field(5.0, gt=0, le=100, description="step alerts: a figure is flagged when it is more than "
                             "this many spreads (1.4826·MAD, with its floors) from the trailing median")
    webhook_url: str | None = Field(None, description="where alerts are POSTed as JSON (`{\"kind\", \"key\", "
                                    "...}`); unset: none are sent (each is still recorded once)")
    webhook_timeout_seconds: float = Field(3.0, gt=0, le=60, description="seconds one webhook POST may take; it "
                                           "is tried 3 times (0.5 s, then 2 s apart) in a background thread, never "
                                           "in the caller's")
    base_url: str | None = Field(None, description="the service's address as people reach it "
                                 "(`https://rollscope.example.org`), for the links in alerts; unset: links are paths "
                                 "(`/ingest`)")
    watch_seconds: float = Field(5.0, ge=0, le=3600, description="serve: seconds between looks for a spool worker "
                                 "gone stale (alert `worker_stale`) and for flagged steps that settled "
                                 "(`step_flagged`); 0 turns the watcher off. It runs only when `webhook_url` is set")
    settle_seconds: float = Field(120.0, ge=0, le=86400, description="a flagged step is posted to the webhook once "
                                  "it was flagged this long ago and its step stored no rollout for as long (a "
                                  "verdict a late producer's rollouts take back is never sent)")

    @field_validator("webhook_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v in (None, ""):
            return None
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"ROLLSCOPE_ALERTS__WEBHOOK_URL must be an http:// or https:// URL, got {v!r}")
        return v

    @model_validator(mode="after")
    def _min_fits_window(self) -> "AlertSettings":
        if self.min_steps > self.window:
            raise ValueError(f"alerts.min_steps ({self.min_steps}) is above alerts.window ({self.window}): "
                             "no step could ever be judged")
        return self


class Settings(BaseSettings):
    """All settings, by section. `Settings(database_url=...)` is a shorthand for `db.url`."""

    model_config = SettingsConfigDict(env_prefix="ROLLSCOPE_", env_nested_delimiter="__", extra="forbid")

    database_url: str | None = Field(None, description="shorthand for `db.url` (`ROLLSCOPE_DATABASE_URL`)")
    require_read_token: bool = Field(False, description="reading (pages, JSON twins, API) needs a read token "
                                     "too, sent as `Authorization: Bearer` or `?token=`; writing always needs one")
    db: DbSettings = DbSettings()
    web: WebSettings = WebSettings()
    worker: WorkerSettings = WorkerSettings()
    api: ApiSettings = ApiSettings()
    alerts: AlertSettings = AlertSettings()

    @model_validator(mode="after")
    def _one_database_url(self) -> "Settings":
        """`database_url` and `db.url` name the same setting; after validation both hold it."""
        if self.database_url is None:
            self.database_url = self.db.url
            return self._replica_of_postgres()
        url = normalize_db_url(self.database_url)
        if "url" in self.db.model_fields_set and self.db.url != url:
            raise ValueError("ROLLSCOPE_DATABASE_URL and ROLLSCOPE_DB__URL disagree: set one of them")
        self.db = self.db.model_copy(update={"url": url})
        self.database_url = url
        return self._replica_of_postgres()

    def _replica_of_postgres(self) -> "Settings":
        if self.db.read_url is not None and not self.db.url.startswith("postgresql"):
            raise ValueError("ROLLSCOPE_DB__READ_URL needs a Postgres primary (ROLLSCOPE_DATABASE_URL is not one)")
        return self


def setting_env_names() -> list[str]:
    """Every environment variable the settings read, e.g. `ROLLSCOPE_WORKER__SPOOL_DIR`."""
    out = []
    for name, field in Settings.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += [f"ROLLSCOPE_{name.upper()}__{sub.upper()}" for sub in ann.model_fields]
        else:
            out.append(f"ROLLSCOPE_{name.upper()}")
    return out


@lru_cache
def get_settings() -> Settings:
    """The process's settings, from the environment (read once)."""
    return Settings()
