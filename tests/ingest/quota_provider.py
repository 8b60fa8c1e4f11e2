"""A fake OpenAI-compatible provider with a per-minute token budget, and its log.

``POST /v1/chat/completions`` (plain or streamed with usage) costs ``PROMPT + COMPLETION``
tokens. The provider answers 429 (OpenAI-shaped, with ``x-ratelimit-*`` and
``retry-after-ms`` headers) when:

- the minute's token budget (``limit_tokens``) cannot pay for the request, or
- the request is every ``burst_every``-th of the minute (a request-rate limit), so some
  SDK retries succeed.

Every answer carries ``x-ratelimit-limit-tokens`` / ``-remaining-tokens`` /
``-limit-requests`` / ``-remaining-requests``. Responses name the dated model
(``RESPONSE_MODEL``), as OpenAI does. The test moves the provider to the next minute with
:meth:`QuotaProvider.next_minute`; every request is logged with its minute and status: the
ground truth the stored figures must equal.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.ingest.openai_compatible_server import stream_chunk

PROMPT_TOKENS = 11  # 10 + one message
COMPLETION_WORDS = ("Hello", " from", " the", " test", " server", ".")
COMPLETION_TOKENS = len(COMPLETION_WORDS)
RESPONSE_MODEL = "gpt-4o-mini-2024-07-18"
LIMIT_REQUESTS = 1000


@dataclass
class Answer:
    """One HTTP request as the provider saw it."""

    minute: int
    status: int
    prompt_tokens: int
    completion_tokens: int
    remaining_tokens: int


@dataclass
class QuotaProvider:
    limit_tokens: int = 90
    burst_every: int = 4
    minute: int = 0
    log: list[Answer] = field(default_factory=list)
    _used: int = 0
    _requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_minute(self) -> None:
        with self._lock:
            self.minute += 1
            self._used = self._requests = 0

    def admit(self) -> tuple[int, dict[str, str]]:
        """The status of the next request and its rate-limit headers (logged)."""
        cost = PROMPT_TOKENS + COMPLETION_TOKENS
        with self._lock:
            self._requests += 1
            burst = self._requests % self.burst_every == 0
            status = 429 if burst or self._used + cost > self.limit_tokens else 200
            if status == 200:
                self._used += cost
            remaining = self.limit_tokens - self._used
            tokens = (PROMPT_TOKENS, COMPLETION_TOKENS) if status == 200 else (0, 0)
            self.log.append(Answer(self.minute, status, *tokens, remaining))
            headers = {
                "x-ratelimit-limit-tokens": str(self.limit_tokens),
                "x-ratelimit-remaining-tokens": str(remaining),
                "x-ratelimit-limit-requests": str(LIMIT_REQUESTS),
                "x-ratelimit-remaining-requests": str(LIMIT_REQUESTS - self._requests),
            }
            if status == 429:
                headers |= {"retry-after-ms": "5", "retry-after": "1"}
            return status, headers


def _handler(provider: QuotaProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            status, headers = provider.admit()
            if status != 200:
                error = {"message": "Rate limit reached", "type": "rate_limit_exceeded",
                         "code": "rate_limit_exceeded"}  # fmt: skip
                self._json(status, {"error": error}, headers)
            elif body.get("stream"):
                self._stream(headers)
            else:
                self._json(200, _completion(), headers)

        def _json(self, status: int, document: dict[str, Any], headers: dict[str, str]) -> None:
            payload = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def _stream(self, headers: dict[str, str]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            time.sleep(0.02)
            for index, word in enumerate(COMPLETION_WORDS):
                delta = {"content": word, **({"role": "assistant"} if index == 0 else {})}
                self._event(stream_chunk(RESPONSE_MODEL, delta, None))
            self._event(stream_chunk(RESPONSE_MODEL, {}, "stop"))
            self._event(
                {**stream_chunk(RESPONSE_MODEL, {}, None), "choices": [], "usage": _usage()}
            )
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

        def _event(self, document: dict[str, Any]) -> None:
            self.wfile.write(b"data: " + json.dumps(document).encode() + b"\n\n")
            self.wfile.flush()

    return Handler


def _usage() -> dict[str, int]:
    return {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": COMPLETION_TOKENS,
        "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
    }


def _completion() -> dict[str, Any]:
    message = {"role": "assistant", "content": "".join(COMPLETION_WORDS)}
    return {
        "id": "chatcmpl-quota",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": RESPONSE_MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": _usage(),
    }


@contextmanager
def serve_quota_provider(port: int, provider: QuotaProvider) -> Iterator[str]:
    """Serve ``provider`` on 127.0.0.1:``port`` in a thread; yields its ``/v1`` base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(provider))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="quota-provider", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
