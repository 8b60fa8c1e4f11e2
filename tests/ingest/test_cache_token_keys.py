"""Cache-write tokens under either spelling of the OTel GenAI attribute
(docs/conventions.md): ``gen_ai.usage.cache_write.input_tokens`` (newer) and
``gen_ai.usage.cache_creation.input_tokens`` (older, and OpenLLMetry's)."""

from __future__ import annotations

import pytest

from tests.ingest.span_builders import LLM, normalize_one


@pytest.mark.parametrize(
    "key",
    [
        "gen_ai.usage.cache_write.input_tokens",
        "gen_ai.usage.cache_creation.input_tokens",
        "gen_ai.usage.cache_creation_input_tokens",
    ],
)
def test_cache_write_tokens_in_either_spelling(key: str) -> None:
    row = normalize_one({**LLM, "gen_ai.usage.input_tokens": 50, key: 30})
    assert (row["prompt_tokens"], row["cache_write_tokens"]) == (50, 30)


def test_cache_read_and_reasoning_tokens() -> None:
    row = normalize_one(
        {
            **LLM,
            "gen_ai.usage.cache_read.input_tokens": 20,
            "gen_ai.usage.reasoning.output_tokens": 7,
        }
    )
    assert (row["cache_read_tokens"], row["reasoning_tokens"]) == (20, 7)
