"""Message content is not stored: which attributes and events carry it, and dropping them.

Instrumentations of every family capture prompts, completions, system instructions, tool
definitions and tool-call arguments by default (OpenLLMetry's ``gen_ai.input.messages``,
OpenInference's ``input.value`` and ``llm.input_messages.*``, LiteLLM's
``gen_ai.prompt.*``, …). tpmledger reads none of it, so ingest drops it before anything
is written (docs/configuration.md#message-content): from the attributes stored with an
attempt (span and resource), and it never stores span events or log records at all,
after their timing is read (TTFT from ``gen_ai.content.completion.chunk``).

Fields are read from the decoded attributes *before* the drop, so nothing tpmledger
measures depends on content; only the stored JSON leaves it out. What was dropped is
counted (``tpmledger_ingest_content_attributes_dropped_total{source}``).
``TPMLEDGER_STORE_CONTENT=true`` keeps the attributes, for debugging only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

import orjson
from google.protobuf.message import DecodeError
from opentelemetry.proto.trace.v1.trace_pb2 import Span

#: Keys that carry content, and every key below them (``key.…``): prompts and
#: completions as message lists, whole request/response bodies, system instructions, tool
#: definitions, tool-call arguments and results, prompt templates.
CONTENT_KEYS: Final = (
    # OTel GenAI (1.36+ message lists; tool calls and definitions)
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    # OpenInference (Arize): request/response bodies, message lists, tools, templates
    "input.value",
    "output.value",
    "llm.input_messages",
    "llm.output_messages",
    "llm.tools",
    "llm.prompt_template",
    "tool_call.function.arguments",
    "retrieval.documents",
    "embedding.embeddings",
    # OpenLLMetry (Traceloop): legacy function definitions and entity bodies
    "llm.request.functions",
    "traceloop.entity.input",
    "traceloop.entity.output",
)
#: Keys that carry content whatever follows the prefix: ``gen_ai.prompt.0.content``,
#: ``gen_ai.completion.0.tool_calls.0.arguments``, ``llm.prompts.0.content`` (OpenLLMetry
#: legacy and LiteLLM indexed attributes).
CONTENT_PREFIXES: Final = ("gen_ai.prompt", "gen_ai.completion", "llm.prompts")

#: The content keys as one anchored regular expression, in the syntax Python's ``re`` and
#: PostgreSQL's ``~`` share (migration 0014 scrubs rows stored before with it).
CONTENT_KEY_PATTERN: Final = (
    "^(?:"
    + "|".join(
        [re.escape(key) + r"(?:\..*|\[.*)?" for key in CONTENT_KEYS]
        + [re.escape(prefix) + ".*" for prefix in CONTENT_PREFIXES]
    )
    + ")$"
)
_CONTENT_KEY: Final = re.compile(CONTENT_KEY_PATTERN, re.DOTALL)
#: Span events and log-record event names that carry content: the OTel GenAI events
#: ``gen_ai.{system,user,assistant,tool}.message``, ``gen_ai.choice``, OpenLLMetry's
#: ``gen_ai.content.prompt`` / ``gen_ai.content.completion`` (and its chunk events, whose
#: timing is read first), and the newer ``gen_ai.client.inference.operation.details``.
_CONTENT_EVENT: Final = re.compile(
    r"gen_ai\.[^.]+\.message|gen_ai\.choice|gen_ai\.content\..*"
    r"|gen_ai\.client\.inference\.operation\.details",
    re.DOTALL,
)


def is_content_key(key: str) -> bool:
    """Whether an attribute with this key carries message content."""
    return _CONTENT_KEY.match(key) is not None


def is_content_event(name: str) -> bool:
    """Whether a span event or log event with this name carries message content."""
    return _CONTENT_EVENT.fullmatch(name) is not None


@lru_cache(maxsize=4096)
def content_keys_of(keys: tuple[str, ...]) -> frozenset[str]:
    """The content keys among ``keys`` (cached per key shape, as span plans are)."""
    return frozenset(key for key in keys if is_content_key(key))


@dataclass(slots=True)
class ContentDrops:
    """What one request's normalization left out of storage, by where it was.

    ``keep`` is ``TPMLEDGER_STORE_CONTENT``: when true the attributes are stored as sent
    and nothing is counted (span events are never stored either way).
    """

    keep: bool = False
    span_attribute: int = 0
    resource_attribute: int = 0
    span_event: int = 0

    def as_counts(self) -> dict[str, int]:
        """Non-zero counts by ``source`` label."""
        counts = {
            "span_attribute": self.span_attribute,
            "resource_attribute": self.resource_attribute,
            "span_event": self.span_event,
        }
        return {source: count for source, count in counts.items() if count}

    def stored_json(self, values: dict[str, Any], encoded: str, keys: frozenset[str]) -> str:
        """The JSON to store for a span's attributes ``values`` (already ``encoded``)
        whose content keys are ``keys``; counts what it leaves out."""
        if not keys or self.keep:
            return encoded
        self.span_attribute += len(keys)
        return without(values, keys)

    def count_events(self, events: Iterable[bytes]) -> None:
        """Count the attributes of a stored span's content events (never stored)."""
        if self.keep:
            return
        for raw in events:
            if b"gen_ai." not in raw:  # cheap pre-check: most events are not content
                continue
            try:
                event = Span.Event.FromString(raw)
            except DecodeError:
                continue
            if is_content_event(event.name):
                self.span_event += len(event.attributes)


def without(values: dict[str, Any], keys: frozenset[str]) -> str:
    """``values`` as JSON, leaving out ``keys``."""
    return orjson.dumps({k: v for k, v in values.items() if k not in keys}).decode()


def log_record_content(event_name: str, attribute_keys: Iterable[str], has_body: bool) -> int:
    """How many content values a log record carries: its body when it is a GenAI content
    event (the OTel GenAI events sent as logs), plus its content attributes."""
    count = sum(1 for key in attribute_keys if is_content_key(key))
    if has_body and is_content_event(event_name):
        count += 1
    return count
