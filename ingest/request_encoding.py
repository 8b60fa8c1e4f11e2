"""One export request's bytes → its attempts as COPY text, ready for the group commit.

This is the CPU-heavy half of ingest (protobuf walk, docs/conventions.md normalization, COPY
encoding). It is a plain function of bytes so that :mod:`ingest.normalize_pool` can run
it in worker processes: the request goes in as one ``bytes`` object and comes back as
one ``bytes`` block plus a few counters, both cheap to pass between processes.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpmledger.ingest.normalize import normalize_payload
from tpmledger.storage.attempt_encoding import AttemptBlock, encode_attempts
from tpmledger.storage.tool_span_encoding import encode_tool_spans


@dataclass(slots=True)
class EncodedRequest:
    """A normalized export request: its stored rows as one block, and what was dropped."""

    block: AttemptBlock
    ignored: int  # spans that are not LLM calls (counted, not stored)
    rejected: int  # invalid spans (reported via OTLP partial success)
    reject_reasons: list[str]  # distinct human-readable reasons, at most a few


def encode_request(payload: bytes | bytearray) -> EncodedRequest:
    """Normalize serialized ``ExportTraceServiceRequest`` bytes and encode the rows.

    Raises ``google.protobuf.message.DecodeError`` when ``payload`` is not a request.
    """
    batch = normalize_payload(payload)
    block = encode_attempts(batch.rows)
    if batch.tool_rows:  # execute_tool spans travel in the same block, stored in the same commit
        block.tools, block.tool_rows = encode_tool_spans(batch.tool_rows)
    return EncodedRequest(block, batch.ignored, batch.rejected, batch.reject_reasons)
