"""Failures in every family's spelling, HTTP client spans as attempts, and targets by
request (docs/conventions.md#failures, #attempts, #targets)."""

from __future__ import annotations

import orjson
import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.ingest.span_builders import LLM, as_columns, normalize, normalize_one, span

CHAT = {**LLM, "gen_ai.request.model": "gpt-4o-mini"}


def _failed(
    attributes: dict[str, object], message: str = "", exception: str | None = None
) -> dict[str, object]:
    built = span(attributes, status_code=Status.STATUS_CODE_ERROR)
    built.status.message = message
    if exception is not None:
        value = AnyValue(string_value=exception)
        event = Span.Event(name="exception", time_unix_nano=built.end_time_unix_nano)
        event.attributes.append(KeyValue(key="exception.type", value=value))
        built.events.append(event)
    batch = normalize(built)
    assert len(batch.rows) == 1, batch
    return as_columns(batch.rows[0])


def test_openinference_rate_limit_from_the_exception_event_and_the_description() -> None:
    row = _failed(
        {"openinference.span.kind": "LLM"},
        "RateLimitError: Error code: 429 - {'error': {'type': 'rate_limit_exceeded'}}",
        "openai.RateLimitError",
    )
    assert (row["status"], row["error_type"], row["http_status"]) == (
        "error",
        "RateLimitError",
        429,
    )


def test_description_alone_gives_the_status() -> None:
    row = _failed({"openinference.span.kind": "LLM"}, "Error code: 503 - overloaded")
    assert (row["error_type"], row["http_status"]) == ("http_503", 503)


@pytest.mark.parametrize("code", ["429", "rate_limit_exceeded"])
def test_error_code_marks_a_failure(code: str) -> None:
    row = normalize_one({**CHAT, "error.code": code})
    assert (row["status"], row["error_type"]) == ("error", code)


def test_error_type_wins_over_the_exception_event() -> None:
    row = _failed({**CHAT, "error.type": "APITimeoutError"}, exception="httpx.ReadTimeout")
    assert row["error_type"] == "APITimeoutError"


def test_a_plain_failure_is_still_error() -> None:
    assert _failed(CHAT)["error_type"] == "error"


def test_ok_spans_are_untouched() -> None:
    row = normalize_one({**CHAT, "http.response.status_code": 200})
    assert (row["status"], row["error_type"], row["http_status"]) == ("ok", None, 200)


def test_target_model_is_the_request_model_and_the_response_model_is_kept() -> None:
    row = normalize_one({**CHAT, "gen_ai.response.model": "gpt-4o-mini-2024-07-18"})
    assert (row["model"], row["response_model"]) == ("gpt-4o-mini", "gpt-4o-mini-2024-07-18")


def test_openinference_model_from_invocation_parameters_and_provider_from_llm_system() -> None:
    row = normalize_one(
        {
            "openinference.span.kind": "LLM",
            "llm.invocation_parameters": orjson.dumps({"model": "gpt-4o-mini"}).decode(),
            "llm.model_name": "gpt-4o-mini-2024-07-18",
            "llm.system": "openai",
        }
    )
    assert (row["model"], row["response_model"], row["provider"]) == (
        "gpt-4o-mini",
        "gpt-4o-mini-2024-07-18",
        "openai",
    )


@pytest.mark.parametrize("parameters", ["{not json", '{"model": 3}', '["model"]'])
def test_unreadable_invocation_parameters_fall_back_to_the_response_model(
    parameters: str,
) -> None:
    row = normalize_one(
        {
            "openinference.span.kind": "LLM",
            "llm.invocation_parameters": parameters,
            "llm.model_name": "m-2024",
        }
    )
    assert row["model"] == "m-2024"


def test_response_model_alone_is_the_target_model() -> None:
    row = normalize_one({**LLM, "gen_ai.response.model": "only-response"})
    assert (row["model"], row["response_model"]) == ("only-response", "only-response")


PARENT = bytes.fromhex("00112233445566ff")


@pytest.mark.parametrize(
    "attributes",
    [
        # new HTTP semantic conventions (httpx instrumentation, stable)
        {
            "http.request.method": "POST",
            "url.full": "https://api.openai.com/v1/chat/completions",
            "http.response.status_code": 429,
            "error.type": "429",
        },
        # old HTTP semantic conventions
        {
            "http.method": "POST",
            "http.url": "http://127.0.0.1:8000/v1/chat/completions?x=1",
            "http.status_code": 429,
        },
    ],
)
def test_http_client_spans_of_inference_are_attempts_of_their_parent(
    attributes: dict[str, object],
) -> None:
    row = normalize_one(attributes, name="POST", parent_span_id=PARENT)
    assert row["convention"] == "http"
    assert (row["call_id"], row["call_id_explicit"]) == (PARENT.hex(), True)
    assert (row["status"], row["http_status"]) == ("error", 429)
    assert row["model"] is None


def test_other_http_calls_and_server_spans_are_ignored() -> None:
    download = span({"http.request.method": "GET", "url.full": "https://x.test/data.csv"})
    server = span(
        {"http.request.method": "POST", "url.path": "/v1/chat/completions"},
        kind=Span.SPAN_KIND_SERVER,
    )
    batch = normalize(download, server)
    assert (len(batch.rows), batch.ignored) == (0, 2)


def test_a_request_with_captured_quota_headers_is_an_attempt_whatever_its_url() -> None:
    row = normalize_one(
        {
            "http.request.method": "POST",
            "url.full": "https://gateway.test/llm",
            "http.response.status_code": 200,
            "http.response.header.x_ratelimit_remaining_tokens": ["120"],
        },
        parent_span_id=PARENT,
    )
    assert (row["convention"], row["ratelimit_remaining_tokens"]) == ("http", 120.0)


def test_a_root_http_request_is_not_an_attempt() -> None:
    # LiteLLM's callback reports its LLM span after the call: the requests are roots.
    batch = normalize(
        span({"http.method": "POST", "http.url": "http://127.0.0.1/v1/chat/completions"})
    )
    assert (len(batch.rows), batch.ignored) == (0, 1)
