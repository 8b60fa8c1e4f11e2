"""Typed configuration of the simulated LLM server, the request mix and one shard.

These models travel as JSON to the server and shard processes, so every field is a plain
value. Defaults describe a chat workload against a rate-limited provider: with 8 shards at
cap 16 the fleet runs just under the token budget; cap 32 runs past it (429s, flat TPM).
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class LengthDistribution(BaseModel):
    """A log-normal token length, clamped to ``[minimum, maximum]`` (chat-like long tail)."""

    median: int = Field(gt=0)
    sigma: float = Field(default=0.5, ge=0.0, description="spread of log(length)")
    minimum: int = Field(default=1, ge=1)
    maximum: int = Field(default=4096, ge=1)


class WorkloadConfig(BaseModel):
    """What the shards ask for: prompt lengths, completion budgets, streaming share."""

    prompt_tokens: LengthDistribution = LengthDistribution(median=400, sigma=0.5, maximum=4000)
    # Sent as ``max_tokens``; the server writes 50–100 % of it (``finish_reason`` stop) or all
    # of it (``length``).
    max_completion_tokens: LengthDistribution = LengthDistribution(
        median=350, sigma=0.4, maximum=2000
    )
    stream_share: float = Field(default=0.8, ge=0.0, le=1.0, description="share of stream=true")
    model: str = "sim-chat-1"


class ServerConfig(BaseModel):
    """The finite-capacity OpenAI-compatible server (see ``simulator.capacity``)."""

    capacity_tpm: int = Field(
        default=720_000,
        gt=0,
        description="token budget per (real) minute; each request is charged "
        "prompt + max_tokens at admission, like provider rate limits",
    )
    quota_tpm: int | None = Field(
        default=None,
        gt=0,
        description="provider quota: tokens per UTC minute window (prompt + reply, charged "
        "on arrival); over it, 429 with x-ratelimit-* headers (docs/simulator.md#provider-quota)",
    )
    quota_rpm: int | None = Field(
        default=None, gt=0, description="provider quota: requests per UTC minute window"
    )
    burst_s: float = Field(
        default=10.0, gt=0, description="bucket size, in seconds of budget (absorbs the start)"
    )
    max_parallel: int = Field(default=256, gt=0, description="requests decoded at once")
    max_queue: int = Field(default=1024, ge=0, description="waiting beyond this answers 429")
    kv_cache_tokens: int = Field(
        default=2_000_000,
        gt=0,
        description="KV-cache pool: a running request holds prompt + reply tokens; without "
        "room it waits (docs/simulator.md#serving-side-metrics)",
    )
    port: int = Field(
        default=0, ge=0, le=65535, description="listen port (0: one the kernel picks)"
    )
    ttft_base_s: float = Field(default=0.25, ge=0)
    prefill_s_per_token: float = Field(default=0.0002, ge=0)
    decode_s_per_token: float = Field(default=0.02, ge=0)
    load_slope: float = Field(
        default=1.0, ge=0, description="service time × (1 + slope × active / max_parallel)"
    )
    error_rate: float = Field(default=0.01, ge=0, le=1, description="share answered 5xx")
    timeout_rate: float = Field(
        default=0.002, ge=0, le=1, description="share that stalls until the client gives up"
    )
    stall_s: float = Field(default=300.0, gt=0, description="how long a stalled request hangs")
    speed: float = Field(
        default=1.0, gt=0, description="divides every service time (not the token budget)"
    )
    chunk_tokens: int = Field(default=16, gt=0, description="tokens per SSE chunk")
    seed: int = 0
    model: str = "sim-chat-1"


class Pitfalls(BaseModel):
    """Cap-selection pitfalls on demand (docs/simulator.md#pitfalls-on-demand)."""

    deadline_s: float | None = Field(
        default=None, gt=0, description="tpmledger.deadline_s declared on every attempt"
    )
    tool_wait_s: float = Field(
        default=0.0, ge=0, description="after each answer, hold the slot this long in a tool span"
    )
    target_cap: int | None = Field(
        default=None, gt=0, description="tpmledger.target.concurrency.cap declared on attempts"
    )


class ShardConfig(Pitfalls):
    """Everything one shard process needs (docs/conventions.md resource attributes included)."""

    run_id: str
    shard_id: int = Field(ge=0)
    shard_count: int = Field(gt=0)
    concurrency: int = Field(default=16, gt=0, description="LLM_CONCURRENCY")
    sweep_id: str | None = None
    duration_s: float = Field(gt=0)
    llm_url: str = Field(description="base URL of the OpenAI-compatible server")
    otlp_endpoint: str
    otlp_protocol: str = Field(default="http/protobuf", pattern="^(http/protobuf|grpc)$")
    retry_backoff_s: float = Field(default=1.0, ge=0, description="LLM_RETRY_BACKOFF_S")
    retry_backoff_cap_s: float = Field(default=30.0, ge=0)
    max_attempts: int = Field(default=6, gt=0)
    request_timeout_s: float = Field(default=30.0, gt=0, description="httpx read timeout")
    backlog_factor: float = Field(
        default=2.0, ge=1.0, description="calls kept outstanding per shard = factor × cap"
    )
    progress_every_s: float = Field(default=1.0, gt=0)
    seed: int = 0
    workload: WorkloadConfig = WorkloadConfig()
    service_name: str = "tpmledger-simulator"
