"""One typed settings object, read from ``TPMLEDGER_*`` environment variables.

Every service reads the same object so ``TPMLEDGER_DATABASE_URL`` and
``TPMLEDGER_DATA_DIR`` mean the same thing everywhere. Unsafe combinations are
refused at start-up with a message that says how to fix them.
"""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from tpmledger.durations import parse_age
from tpmledger.slo import optional_slo


def default_data_dir() -> Path:
    """The per-user data directory (``$XDG_DATA_HOME/tpmledger`` or ``~/.local/share``)."""
    import os

    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tpmledger"


class UnsafeConfiguration(ValueError):
    """Raised when a configuration would expose the service without protection."""


class Settings(BaseSettings):
    """Settings shared by every tpmledger service and command."""

    model_config = SettingsConfigDict(env_prefix="TPMLEDGER_", extra="ignore")

    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy/psycopg URL of an external PostgreSQL; unset = embedded.",
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Embedded PostgreSQL data, signing keys and exports live here.",
    )
    host: str = Field(default="127.0.0.1", description="Address every listener binds.")
    http_port: int = Field(default=4318, description="OTLP/HTTP ingest and the read API.")
    grpc_port: int = Field(default=4317, description="OTLP/gRPC ingest.")
    dashboard_port: int = Field(default=8050, description="The Dash dashboard.")
    public_api_url: str | None = Field(
        default=None,
        description="Base URL browsers use for the read API (dashboard download links); "
        "default http://<host>:<http_port>.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host names the HTTP listeners answer besides loopback names and the bind "
        "address, e.g. '[\"ledger.example.com\"]'; checked while no token is configured, "
        "always once set; '[\"*\"]' = any (docs/configuration.md#host-names).",
    )
    insecure: bool = Field(
        default=False, description="Allow a non-loopback bind with no ingest token configured."
    )
    ingest_tokens: list[str] = Field(
        default_factory=list,
        description="Bearer tokens of scope 'ingest' (write spans, metrics, logs) besides those "
        "stored in the database; they also read while no read token is configured "
        "(docs/ingest.md#token-scopes).",
    )
    ingest_tokens_file: Path | None = Field(
        default=None,
        description="File with one ingest-scope bearer token per line (e.g. a compose secret).",
    )
    read_tokens: list[str] = Field(
        default_factory=list,
        description="Bearer tokens of scope 'read' (read API, dashboard, /metrics) besides "
        "those stored in the database (docs/ingest.md#token-scopes).",
    )
    read_tokens_file: Path | None = Field(
        default=None,
        description="File with one read-scope bearer token per line (e.g. a compose secret).",
    )
    queue_max_spans: int = Field(
        default=64_000,
        description="Bound on spans waiting for the group-commit writer (bounds memory).",
    )
    commit_max_spans: int = Field(
        default=32_000, description="At most this many spans go into one group commit."
    )
    normalize_workers: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Processes that normalize export requests (default: one per core, at most 8; "
            "0 = in the listener's process)."
        ),
    )
    store_content: bool = Field(
        default=False,
        description="Keep message content (prompts, completions, tool arguments) in the stored "
        "span attributes. Off by default: ingest drops it before anything is written. A "
        "debugging aid only: everything the fleet sends its model becomes readable by anyone "
        "who can read the database (docs/configuration.md#message-content).",
    )
    commit_stuck_after_s: float = Field(
        default=30.0,
        gt=0,
        description="/readyz answers 503 while one group commit has run longer than this "
        "(docs/operations.md#bounded-queries).",
    )
    retry_after_s: int = Field(default=2, description="Retry-After sent with 503 answers.")
    body_budget_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024 * 1024,
        description="Decompressed bytes of request bodies ingest holds at once (503 past it); "
        "one body larger than this is refused with 413 (docs/ingest.md#limits).",
    )
    body_stall_s: float = Field(
        default=10.0,
        gt=0,
        description="Longest wait for the next piece of a request body before ingest "
        "answers 408 and releases its share of the body budget (docs/ingest.md#limits).",
    )
    body_read_s: float = Field(
        default=60.0,
        gt=0,
        description="Longest time to receive a whole request body (408 past it; "
        "docs/ingest.md#limits).",
    )
    heavy_requests: int = Field(
        default=2,
        ge=1,
        description="Whole-run read requests (events.jsonl) a process serves at once; "
        "more get 503 with Retry-After (docs/ingest.md#limits).",
    )
    reseal_quiet_s: float = Field(
        default=10.0, description="A run is resealed once it received no data for this long."
    )
    analytics_poll_s: float = Field(default=2.0, description="Analytics worker poll interval.")
    retention: str | None = Field(
        default=None,
        description="Archive and prune runs whose newest span arrived longer ago than this, "
        "e.g. '30d' (the analytics worker does it once a day); unset: nothing is pruned "
        "(docs/configuration.md#retention).",
    )
    archive_dir: Path | None = Field(
        default=None,
        description="Where pruned runs' archives go (default: DATA_DIR/archive).",
    )
    checkpoint_every_s: float = Field(
        default=300.0,
        ge=0,
        description="While a run receives data, seal a checkpoint version over its closed "
        "minutes this often; 0 turns checkpoints off (docs/provenance.md#versions).",
    )
    max_span_duration_s: float = Field(
        default=86_400.0,
        gt=0,
        description="Spans longer than this (or reporting a longer queue wait) are rejected "
        "through partial success (docs/ingest.md#limits).",
    )
    max_run_days: float = Field(
        default=31.0,
        gt=0,
        description="Figures are computed for runs whose events span at most this many days; "
        "a longer run is refused by name, its spans kept (docs/ingest.md#limits).",
    )
    live_poll_s: float = Field(
        default=0.5,
        gt=0,
        description="How often the analytics worker drains new data into the live minute table.",
    )
    live_max_lag_s: float = Field(
        default=10.0,
        ge=0,
        description="While ingest commits back to back, the analytics worker defers live "
        "updates, up to this long after the last one began, so ingest keeps the cores; 0 "
        "never defers (docs/metrics.md#live-figures).",
    )
    minute_close_after_s: float = Field(
        default=120.0,
        ge=0,
        description="A minute of a live run is 'open' until this long after it ends, then "
        "'closed' (docs/metrics.md#live-figures).",
    )
    metrics_run_window_s: float = Field(
        default=3600.0,
        ge=0,
        description="/metrics carries per-run series for live runs and for runs whose last "
        "event is at most this many seconds old (docs/operations.md#per-run-series).",
    )
    signing_key_path: Path | None = Field(
        default=None, description="Ed25519 private key (PEM); default under the data dir."
    )
    log_origin: str | None = Field(
        default=None,
        description="Prefix of every run's checkpoint origin, "
        "'<log_origin>/tpmledger/runs/<run_id>' (docs/provenance.md#checkpoints); "
        "default: this host's name.",
    )
    slo: str | None = Field(
        default=None,
        description="Default SLO for goodput, e.g. 'ttft=0.5,latency=10' (seconds): sealed "
        "versions store goodput under it; analyze/compare --slo override it "
        "(docs/metrics.md#goodput). Unset: no goodput.",
    )

    scrape_targets: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="vLLM / SGLang Prometheus endpoints ingest scrapes itself, comma-separated "
        "URLs, e.g. http://gpu-1:8000/metrics (docs/configuration.md#serving-side-metrics).",
    )
    scrape_interval_s: float = Field(
        default=15.0, gt=0, description="How often each scrape target is read."
    )
    scrape_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Deadline of one scrape (at most the interval): a slower target counts "
        "a fetch error and is tried again at its next turn.",
    )

    @field_validator("scrape_targets", mode="before")
    @classmethod
    def _split_scrape_targets(cls, value: object) -> object:
        """``TPMLEDGER_SCRAPE_TARGETS`` is comma-separated; each must be an http(s) URL."""
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",")]
        if isinstance(value, list):
            value = [str(v).strip() for v in value if str(v).strip()]
            for url in value:
                parts = urlsplit(url)
                if parts.scheme not in ("http", "https") or not parts.netloc:
                    raise ValueError(
                        f"scrape target {url!r} is not an http(s) URL; write it like "
                        "http://gpu-1:8000/metrics"
                    )
        return value

    @field_validator("retention")
    @classmethod
    def _check_retention(cls, value: str | None) -> str | None:
        """Refuse an unreadable TPMLEDGER_RETENTION at start-up; empty means unset."""
        if not value or not value.strip():
            return None
        parse_age(value)
        return value.strip()

    @field_validator("log_origin")
    @classmethod
    def _check_log_origin(cls, value: str | None) -> str | None:
        """A checkpoint origin holds no spaces or '+' (c2sp.org/signed-note key names)."""
        if value is None or not value.strip():
            return None
        text = value.strip().rstrip("/")
        if not text or "+" in text or any(c.isspace() for c in text):
            raise ValueError(
                f"TPMLEDGER_LOG_ORIGIN={value!r} must be a schema-less URL without spaces or "
                "'+', e.g. ledger.example.com"
            )
        return text

    @property
    def checkpoint_origin(self) -> str:
        """``log_origin``, else this host's name."""
        return self.log_origin or socket.gethostname() or "localhost"

    @field_validator("slo")
    @classmethod
    def _check_slo(cls, value: str | None) -> str | None:
        """Refuse an unreadable TPMLEDGER_SLO at start-up; store its canonical text."""
        if value is None:
            return None
        slo = optional_slo(value)
        return slo.text if slo is not None else None

    @model_validator(mode="after")
    def _read_token_file(self) -> Settings:
        """Tokens from ``ingest_tokens_file`` / ``read_tokens_file`` join ``ingest_tokens`` /
        ``read_tokens`` (blank lines and # skipped)."""
        self.ingest_tokens = [*self.ingest_tokens, *_token_lines(self.ingest_tokens_file, "INGEST")]
        self.read_tokens = [*self.read_tokens, *_token_lines(self.read_tokens_file, "READ")]
        return self

    @property
    def api_base_url(self) -> str:
        """Where a browser reaches the read API (``public_api_url`` or this host's listener)."""
        if self.public_api_url:
            return self.public_api_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.http_port}"

    @property
    def keys_dir(self) -> Path:
        return self.data_dir / "keys"

    def check_bind_is_safe(self, has_tokens: bool) -> None:
        """Refuse to listen beyond loopback without ingest tokens unless told ``--insecure``."""
        if has_tokens or self.insecure or is_loopback(self.host):
            return
        raise UnsafeConfiguration(
            f"refusing to bind {self.host} with no ingest token configured: create one with "
            "`tpmledger tokens create NAME` (or set TPMLEDGER_INGEST_TOKENS), bind 127.0.0.1, "
            "or pass --insecure to accept unauthenticated spans from the network"
        )


def _token_lines(path: Path | None, scope: str) -> list[str]:
    if path is None:
        return []
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read TPMLEDGER_{scope}_TOKENS_FILE {path}: {exc}") from exc
    lines = [line.strip() for line in text.splitlines()]
    return [t for t in lines if t and not t.startswith("#")]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
