"""Count limits per export request, checked before a body is decoded (docs/ingest.md#limits).

A body's size says little about what decoding it builds: 15 KB of gzip'd OTLP/JSON held
5.2 M empty spans (2.2 GiB once parsed), 14.6 KB of protobuf 7.5 M (a normalizer worker
at 1,018 MiB and 123 s of CPU). So every body is counted first — spans, metric data
points, log records, and attributes (every ``KeyValue`` at any depth, and every element
of an array value) — and refused with 413 as soon as one count passes its limit, before
anything is built. What decoding will build is then estimated from the counts
(:meth:`Counts.decoded_bytes`) and charged to the in-flight body budget with the body.

Protobuf is counted by walking the wire format: only the nesting that leads to spans,
points, records and attributes is entered; every other field is skipped by its length.
The walk stops at the first limit passed, so its work is bounded by the limits, not by
the body. OTLP/JSON is counted by its objects and arrays (``{`` and ``[`` bytes, an upper
bound: inside strings they are counted too), which is what ``json.loads`` builds.

413 (Payload Too Large; gRPC ``RESOURCE_EXHAUSTED`` without RetryInfo) is the OTLP
answer for a request that can never be accepted as it is: exporters do not retry it,
and the message says to send smaller batches.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Final

from tpmledger.ingest.body_budget import BodyCharge
from tpmledger.ingest.error_taxonomy import IngestError, PayloadTooLarge

#: Spans, metric data points or log records in one request. The OpenTelemetry SDKs send
#: 512 per batch by default, the Collector's batch processor 8,192.
MAX_ITEMS: Final = 65_536
#: Attributes in one request, at every level (resource, span, event, link, point,
#: record, nested kvlist and array elements).
MAX_ATTRIBUTES: Final = 524_288
#: Objects and arrays in one OTLP/JSON body (about 8,000 spans of 15 attributes).
MAX_JSON_CONTAINERS: Final = 262_144

# What decoding builds, per counted thing (upb messages and the Python objects the
# normalizer or the JSON parser makes of them; measured upper estimates).
_BYTES_PER_ITEM: Final = 256
_BYTES_PER_ATTRIBUTE: Final = 48
_BYTES_PER_JSON_CONTAINER: Final = 320

_ITEM_NAMES: Final = {"traces": "spans", "metrics": "data points", "logs": "log records"}

# The wire schema walked, per message kind: field number → (child kind, what it counts).
# Only length-delimited fields are listed; "item" is a span, point or record.
_KV: Final = "kv"
_SCHEMAS: Final[dict[str, dict[str, dict[int, tuple[str | None, str | None]]]]] = {
    "traces": {
        "request": {1: ("resource_spans", None)},
        "resource_spans": {1: ("resource", None), 2: ("scope_spans", None)},
        "resource": {1: (_KV, "attributes")},
        "scope_spans": {1: ("scope", None), 2: ("span", "items")},
        "scope": {3: (_KV, "attributes")},
        "span": {9: (_KV, "attributes"), 11: ("event", None), 13: ("link", None)},
        "event": {3: (_KV, "attributes")},
        "link": {4: (_KV, "attributes")},
    },
    "metrics": {
        "request": {1: ("resource_metrics", None)},
        "resource_metrics": {1: ("resource", None), 2: ("scope_metrics", None)},
        "resource": {1: (_KV, "attributes")},
        "scope_metrics": {1: ("scope", None), 2: ("metric", None)},
        "scope": {3: (_KV, "attributes")},
        "metric": {
            5: ("number_points", None),  # gauge
            7: ("number_points", None),  # sum
            9: ("histogram_points", None),  # histogram
            10: ("exponential_points", None),  # exponential histogram
            11: ("summary_points", None),  # summary
            12: (_KV, "attributes"),  # metadata
        },
        "number_points": {1: ("number_point", "items")},
        "histogram_points": {1: ("histogram_point", "items")},
        "exponential_points": {1: ("exponential_point", "items")},
        "summary_points": {1: ("summary_point", "items")},
        # Each point type keeps its attributes and exemplars under its own numbers.
        "number_point": {7: (_KV, "attributes"), 5: ("exemplar", None)},
        "histogram_point": {9: (_KV, "attributes"), 8: ("exemplar", None)},
        "exponential_point": {1: (_KV, "attributes"), 11: ("exemplar", None)},
        "summary_point": {7: (_KV, "attributes")},
        "exemplar": {7: (_KV, "attributes")},
    },
    "logs": {
        "request": {1: ("resource_logs", None)},
        "resource_logs": {1: ("resource", None), 2: ("scope_logs", None)},
        "resource": {1: (_KV, "attributes")},
        "scope_logs": {1: ("scope", None), 2: ("record", "items")},
        "scope": {3: (_KV, "attributes")},
        "record": {5: ("any", None), 6: (_KV, "attributes")},
    },
}
# Inside attributes: KeyValue.value (2) → AnyValue; AnyValue.array_value (5) /
# kvlist_value (6); ArrayValue.values (1) and KeyValueList.values (1) count.
_VALUES: Final[dict[str, dict[int, tuple[str | None, str | None]]]] = {
    _KV: {2: ("any", None)},
    "any": {5: ("array", None), 6: ("kvlist", None)},
    "array": {1: ("any", "attributes")},
    "kvlist": {1: (_KV, "attributes")},
}
_SHALLOW_SCOPE_SPANS: Final[dict[int, tuple[str | None, str | None]]] = {
    1: ("scope", None),
    2: (None, "items"),  # a span counted, skipped by its length
}
_SPAN_ATTRIBUTE_TAG: Final = b"\x4a"  # Span.attributes: field 9, length-delimited
_SPAN_EVENT_TAG: Final = b"\x5a"  # Span.events: field 11
_MAX_DEPTH: Final = 64
# The walk runs in a thread of the listener's process: every 4,096 things counted it
# gives the GIL up, so the event loop (``/healthz``, other requests) waits milliseconds.
_YIELD_EVERY: Final = 0xFFF  # nested values deeper than this are refused (400)


@dataclass
class Counts:
    """What one request holds."""

    signal: str
    items: int = 0
    attributes: int = 0
    json_containers: int = 0
    limits: dict[str, int] = field(default_factory=dict)
    unwalkable: bool = False  # the wire walk failed; decoding will refuse it

    def decoded_bytes(self) -> int:
        """An upper estimate of what decoding the request builds, in bytes."""
        return (
            self.items * _BYTES_PER_ITEM
            + self.attributes * _BYTES_PER_ATTRIBUTE
            + self.json_containers * _BYTES_PER_JSON_CONTAINER
        )


async def counted(
    payload: bytes | bytearray, signal: str, json: bool, charge: BodyCharge
) -> Counts:
    """:func:`count_request` off the event loop, then the request charged what decoding
    it builds (its estimate, when that is more than the body already charged)."""
    try:
        counts = await asyncio.to_thread(count_request, payload, signal, json)
        charge.grow_to(
            max(charge.charged, counts.decoded_bytes()),
            "what decoding this request builds (estimated)",
        )
    except IngestError:
        # A refused body is dropped now: the exception's traceback would keep it (up to
        # 64 MiB) until a cyclic garbage collection, which ingest makes rare.
        if isinstance(payload, bytearray):
            payload.clear()
        raise
    return counts


def count_request(
    payload: bytes | bytearray,
    signal: str,
    json: bool,
    *,
    max_items: int = MAX_ITEMS,
    max_attributes: int = MAX_ATTRIBUTES,
    max_json_containers: int = MAX_JSON_CONTAINERS,
) -> Counts:
    """Count ``payload`` (an ``Export…ServiceRequest`` of ``signal``: traces, metrics or
    logs; OTLP/JSON when ``json``); :class:`PayloadTooLarge` (413) at the first limit
    passed. A protobuf body whose wire format does not walk is left to the protobuf
    parser, which refuses it (400) with its own reason."""
    counts = Counts(signal)
    if json:
        containers = payload.count(b"{") + payload.count(b"[")
        if containers > max_json_containers:
            raise PayloadTooLarge(
                f"OTLP/JSON body holds {containers} objects and arrays, over the limit of "
                f"{max_json_containers} per request: send smaller batches, or use protobuf"
            )
        counts.json_containers = containers
        return counts
    limits = {"items": max_items, "attributes": max_attributes}
    schema = {**_SCHEMAS[signal], **_VALUES}
    # Released on the way out, even through an exception: the body can then be cleared.
    with memoryview(payload) as view:
        try:
            if signal == "traces":
                # Spans counted, not entered: an upper bound of their attributes and events
                # (every byte that could be their tag) settles nearly every request at C
                # speed.
                shallow_schema = {**schema, "scope_spans": _SHALLOW_SCOPE_SPANS}
                shallow = _Walk(view, shallow_schema, Counts(signal))
                shallow.limits = limits
                shallow.message(0, len(payload), "request", 0)
                bound = payload.count(_SPAN_ATTRIBUTE_TAG) + payload.count(_SPAN_EVENT_TAG)
                if bound + shallow.counts.attributes <= max_attributes:
                    shallow.counts.attributes += bound
                    return shallow.counts
            walk = _Walk(view, schema, counts)
            walk.limits = limits
            walk.message(0, len(payload), "request", 0)
        except (IndexError, ValueError):
            # Not a well-formed request: the protobuf parser, the reference, says why (400).
            counts.unwalkable = True
        finally:
            # The walks hold the view: drop them before it is released.
            shallow = walk = None  # type: ignore[assignment]
    return counts


class _Walk:
    __slots__ = ("buf", "counts", "limits", "schema")

    def __init__(
        self,
        buf: memoryview,
        schema: dict[str, dict[int, tuple[str | None, str | None]]],
        counts: Counts,
    ) -> None:
        self.buf = buf
        self.schema = schema
        self.counts = counts
        self.limits: dict[str, int] = {}

    def message(self, pos: int, end: int, kind: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise ValueError("values nested too deep")
        fields = self.schema[kind]
        buf = self.buf
        while pos < end:
            key = buf[pos]
            pos += 1
            if key >= 0x80:
                key, pos = _varint(buf, pos - 1)
            wire = key & 7
            if wire == 2:
                size = buf[pos]
                pos += 1
                if size >= 0x80:
                    size, pos = _varint(buf, pos - 1)
                stop = pos + size
                if stop > end:
                    raise ValueError("a field runs past its message")
                entry = fields.get(key >> 3)
                if entry is not None:
                    child, counter = entry
                    if counter is not None:
                        self._count(counter)
                    if child == _KV:
                        if self._compound_value(pos, stop):
                            self.message(pos, stop, _KV, depth + 1)
                    elif child is not None:
                        self.message(pos, stop, child, depth + 1)
                pos = stop
            elif wire == 0:
                while buf[pos] >= 0x80:
                    pos += 1
                pos += 1
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            else:
                raise ValueError(f"wire type {wire} is not supported")
        if pos != end:
            raise ValueError("a field runs past its message")

    def _compound_value(self, pos: int, end: int) -> bool:
        """Whether the ``KeyValue`` at ``pos`` may hold an array or kvlist value (to be
        walked); a plain scalar after a short key is answered without a walk."""
        buf = self.buf
        if end - pos < 4 or buf[pos] != 0x0A or buf[pos + 1] >= 0x80:
            return True  # an unusual shape: walk it
        at = pos + 2 + buf[pos + 1]  # after the key
        if at + 2 >= end or buf[at] != 0x12:
            return True
        if buf[at + 1] >= 0x80:
            return buf[at + 2 + (buf[at + 2] >= 0x80)] in (0x2A, 0x32) or True
        return buf[at + 2] in (0x2A, 0x32)

    def _count(self, counter: str) -> None:
        counts = self.counts
        if counter == "items":
            counts.items += 1
            if not counts.items & _YIELD_EVERY:
                time.sleep(0)
            if counts.items > self.limits["items"]:
                name = _ITEM_NAMES[counts.signal]
                raise PayloadTooLarge(
                    f"request holds more than {self.limits['items']} {name}, the limit per "
                    "request: send smaller batches"
                )
        else:
            counts.attributes += 1
            if not counts.attributes & _YIELD_EVERY:
                time.sleep(0)  # let the event loop's thread take the GIL now and then
            if counts.attributes > self.limits["attributes"]:
                raise PayloadTooLarge(
                    f"request holds more than {self.limits['attributes']} attributes, the "
                    "limit per request: send smaller batches"
                )


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    value = byte & 0x7F
    shift = 7
    while True:
        pos += 1
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
