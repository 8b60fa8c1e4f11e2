"""A small OpenAI-compatible chat completions server for the instrumentation tests.

``POST /v1/chat/completions`` answers plain and streamed (SSE) completions with
``usage``. The requested model chooses the behaviour, so a test needs no side channel:

- ``status-429`` / ``status-500`` (any ``status-NNN``): that HTTP error, OpenAI-shaped;
- anything else: a completion whose prompt tokens = 10 + number of messages and whose
  completion tokens = number of content chunks (``COMPLETION_WORDS``).

Streams wait ``FIRST_CHUNK_DELAY_S`` before the first content chunk, so a client-side
time to first token is clearly above zero.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMPLETION_WORDS = ("Hello", " from", " the", " test", " server", ".")
FIRST_CHUNK_DELAY_S = 0.05


def usage_for(messages: list[Any]) -> dict[str, int]:
    """The usage block the server reports for a request with these messages."""
    prompt = 10 + len(messages)
    completion = len(COMPLETION_WORDS)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
            return
        model = str(body.get("model", ""))
        if model.startswith("status-"):
            status = int(model.removeprefix("status-"))
            kind = "rate_limit_exceeded" if status == 429 else "server_error"
            self._json(status, {"error": {"message": f"forced {status}", "type": kind}})
            return
        usage = usage_for(body.get("messages", []))
        if body.get("stream"):
            self._stream(
                model, usage, bool((body.get("stream_options") or {}).get("include_usage"))
            )
        else:
            self._json(200, _completion(model, usage))

    def _json(self, status: int, document: dict[str, Any]) -> None:
        payload = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if status == 429:
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(payload)

    def _stream(self, model: str, usage: dict[str, int], include_usage: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        time.sleep(FIRST_CHUNK_DELAY_S)
        for index, word in enumerate(COMPLETION_WORDS):
            delta = {"content": word, **({"role": "assistant"} if index == 0 else {})}
            self._event(stream_chunk(model, delta, None))
        self._event(stream_chunk(model, {}, "stop"))
        if include_usage:
            self._event({**stream_chunk(model, {}, None), "choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _event(self, document: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(document).encode() + b"\n\n")
        self.wfile.flush()


def _completion(model: str, usage: dict[str, int]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(COMPLETION_WORDS)},
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }


def stream_chunk(model: str, delta: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
    """One server-sent chunk of a streamed chat completion (the OpenAI wire shape)."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


@contextmanager
def serve_openai_compatible(port: int) -> Iterator[str]:
    """Run the server on 127.0.0.1:``port`` in a thread; yields its ``/v1`` base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="openai-compatible", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
