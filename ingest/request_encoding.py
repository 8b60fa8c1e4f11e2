"""One export request's bytes → its attempts as COPY text, ready for the group commit.

This is the CPU-heavy half of ingest (protobuf walk, docs/conventions.md normalization, COPY
encoding). It is a plain function of bytes so that :mod:`ingest.normalize_pool` can run
it in worker processes: the request goes in as one ``bytes`` object and comes back as
one ``bytes`` block plus a few counters, both cheap to pass between processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tpmledger.ingest.normalize import cache_bytes, normalize_payload
from tpmledger.storage.codecs.attempt_encoding import AttemptBlock, encode_attempts
from tpmledger.storage.codecs.tool_span_encoding import encode_tool_spans


@dataclass(slots=True)
class EncodedRequest:
    """A normalized export request: its stored rows as one block, and what was dropped."""

    block: AttemptBlock
    ignored: int  # spans that are not LLM calls (counted, not stored)
    rejected: int  # invalid spans (reported via OTLP partial success)
    reject_reasons: list[str]  # distinct human-readable reasons, at most a few
    # message content left out of the stored rows, by source (ingest/content_filter.py)
    content_dropped: dict[str, int] = field(default_factory=dict)
    # The normalizing process and the bytes its caches held after this request.
    pid: int = field(default=0, compare=False)
    cache_bytes: dict[str, int] = field(default_factory=dict, compare=False)


def encode_request(payload: bytes | bytearray, keep_content: bool = False) -> EncodedRequest:
    """Normalize serialized ``ExportTraceServiceRequest`` bytes and encode the rows
    (message content left out unless ``keep_content``).

    Raises ``google.protobuf.message.DecodeError`` when ``payload`` is not a request.
    """
    batch = normalize_payload(payload, keep_content=keep_content)
    block = encode_attempts(batch.rows)
    if batch.tool_rows:  # execute_tool spans travel in the same block, stored in the same commit
        block.tools, block.tool_rows = encode_tool_spans(batch.tool_rows)
    return EncodedRequest(
        block,
        batch.ignored,
        batch.rejected,
        batch.reject_reasons,
        batch.content.as_counts(),
        pid=os.getpid(),
        cache_bytes=cache_bytes(),
    )
