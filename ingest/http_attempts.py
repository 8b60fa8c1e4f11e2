"""HTTP client spans as attempts of an LLM call (docs/conventions.md#attempts).

An SDK retries inside one instrumented call (the ``openai`` SDK's ``max_retries``): the
LLM span covers every HTTP request it made. With an HTTP client instrumentation (httpx,
requests, aiohttp, urllib3), each request is a CLIENT span, child of the LLM span, with
its own times, status and captured response headers. Ingest stores those spans as
attempts (``convention`` ``http``, ``call_id`` = the parent's span id, so the requests of
one call form one logical call); which LLM span they belong to, and which of them carries
the call's tokens, is resolved where figures are made (storage/readers/call_attempts.py), since
a trace's spans arrive in any order and batching.

Only requests that look like inference and ran under a span are kept: the URL path ends
in a known inference endpoint, or the span captured a provider rate-limit header, and the
span has a parent (a root request belongs to no LLM call: LiteLLM's callback, for one,
reports its LLM span after the call without linking the requests). Other HTTP calls of a
worker (downloads, a vector store) are not attempts and are ignored as before.
"""

from __future__ import annotations

from typing import Any, Final

from opentelemetry.proto.trace.v1.trace_pb2 import Span

HTTP_CONVENTION: Final = "http"
_CLIENT: Final = Span.SPAN_KIND_CLIENT
#: URL path endings of inference requests (OpenAI-compatible, Anthropic, Gemini,
#: Bedrock, TGI / vLLM native).
INFERENCE_PATHS: Final = (
    "/chat/completions",
    "/completions",
    "/responses",
    "/messages",
    ":generatecontent",
    ":streamgeneratecontent",
    "/converse",
    "/converse-stream",
    "/invoke",
    "/invoke-with-response-stream",
    "/generate",
    "/generate_stream",
)


def is_inference_url(url: str | None) -> bool:
    """The URL (or path) ends in an inference endpoint (query and trailing slash aside)."""
    if not url:
        return False
    path = url.split("?", 1)[0].split("#", 1)[0].rstrip("/").lower()
    return path.endswith(INFERENCE_PATHS)


def is_http_attempt(kind: int, fields: dict[str, Any], reads_quota: bool) -> bool:
    """An HTTP CLIENT span (old or new HTTP semantic conventions) of an inference request."""
    if kind != _CLIENT or not fields.get("http_method"):
        return False
    return reads_quota or is_inference_url(fields.get("url"))
