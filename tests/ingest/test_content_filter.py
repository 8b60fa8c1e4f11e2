"""Which keys and events carry message content, and what normalization leaves out
(docs/configuration.md#message-content)."""

from __future__ import annotations

import json
import re

import pytest

from tests.ingest.span_builders import LLM, NOW_NS, as_columns, request, span
from tpmledger.ingest.content_filter import (
    CONTENT_KEY_PATTERN,
    is_content_event,
    is_content_key,
    log_record_content,
)
from tpmledger.ingest.normalize import normalize_request

CONTENT = [
    "gen_ai.prompt",
    "gen_ai.prompt.0.content",
    "gen_ai.completion.3.tool_calls.0.arguments",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "llm.input_messages.0.message.content",
    "llm.output_messages.1.message.tool_calls.0.tool_call.function.arguments",
    "llm.prompts.0.content",
    "llm.tools.0.tool.json_schema",
    "llm.prompt_template.variables",
    "llm.request.functions.0.description",
    "input.value",
    "output.value",
    "traceloop.entity.input",
]
NOT_CONTENT = [
    "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.input_tokens",
    "gen_ai.request.model",
    "gen_ai.tool.name",
    "gen_ai.input.messages_count",  # not below the key: a different attribute
    "input.mime_type",
    "output.mime_type",
    "llm.token_count.prompt",
    "llm.invocation_parameters",
    "llm.model_name",
    "tpmledger.run.id",
]


@pytest.mark.parametrize("key", CONTENT)
def test_content_keys(key: str) -> None:
    assert is_content_key(key)
    assert re.match(CONTENT_KEY_PATTERN, key)  # the migration's pattern agrees


@pytest.mark.parametrize("key", NOT_CONTENT)
def test_keys_that_are_not_content(key: str) -> None:
    assert not is_content_key(key)
    assert not re.match(CONTENT_KEY_PATTERN, key)


def test_content_events() -> None:
    for name in ("gen_ai.user.message", "gen_ai.system.message", "gen_ai.choice"):
        assert is_content_event(name)
    assert is_content_event("gen_ai.content.completion.chunk")
    assert is_content_event("gen_ai.client.inference.operation.details")
    for name in ("exception", "First Token Stream Event", "gen_ai.evaluation.result"):
        assert not is_content_event(name)


def test_log_records_count_their_content() -> None:
    assert log_record_content("gen_ai.user.message", [], has_body=True) == 1
    assert log_record_content("gen_ai.user.message", [], has_body=False) == 0
    assert log_record_content("", ["gen_ai.prompt", "gen_ai.system"], has_body=True) == 1
    assert log_record_content("app.log", ["code.lineno"], has_body=True) == 0


SPAN = {
    **LLM,
    "gen_ai.usage.input_tokens": 12,
    "gen_ai.input.messages": '[{"role": "user", "content": "secret"}]',
    "gen_ai.prompt.0.content": "secret",
    "llm.input_messages.0.message.role": "user",
}
RESOURCE = {"tpmledger.run.id": "r", "gen_ai.system_instructions": "secret", "host.name": "h"}


def _normalized(keep_content: bool) -> tuple[dict[str, object], dict[str, int]]:
    events = [("gen_ai.user.message", NOW_NS - 10**9), ("exception", NOW_NS - 10**9)]
    batch = normalize_request(
        request(span(SPAN, events=events), resource=RESOURCE),
        now_ns=NOW_NS,
        keep_content=keep_content,
    )
    assert len(batch.rows) == 1
    return as_columns(batch.rows[0]), batch.content.as_counts()


def test_content_is_left_out_of_the_stored_row_and_counted() -> None:
    row, dropped = _normalized(keep_content=False)
    assert json.loads(row["span_attributes"]) == {
        **LLM,
        "gen_ai.usage.input_tokens": 12,
    }
    assert json.loads(row["resource_attributes"]) == {"tpmledger.run.id": "r", "host.name": "h"}
    assert row["prompt_tokens"] == 12  # figures are read before the drop
    # The content event has no attributes here: nothing of it to count.
    assert dropped == {"span_attribute": 3, "resource_attribute": 1}


def test_store_content_keeps_every_attribute() -> None:
    row, dropped = _normalized(keep_content=True)
    assert json.loads(row["span_attributes"]) == SPAN
    assert json.loads(row["resource_attributes"]) == RESOURCE
    assert dropped == {}
